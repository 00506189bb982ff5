// Package guestx owns running programs inside the guest's desktop session:
// as the desktop user ("user" of the desktop image) with the session's
// environment (DISPLAY, XAUTHORITY, the D-Bus session bus, XDG_RUNTIME_DIR),
// through vmm's guest agent. The guest agent runs commands as root with an
// empty environment; X clients need the user's display, the session bus and
// its files owned by the user, so anything that acts on the desktop (xdotool,
// xclip, launching an app, pyautogui) goes through here.
//
// The session's values come from images/recipes/desktop (bash_profile,
// xinitrc, deskfarm-session) and were checked in a desktop VM with
// `cat /proc/$(pgrep -u user -x openbox)/environ` on 2026-11-30:
// DISPLAY=:0, XAUTHORITY=/home/user/.Xauthority, XDG_RUNTIME_DIR=/run/user/1000,
// HOME=/home/user, LANG=C.UTF-8, and a D-Bus address that dbus-launch picks at
// each session start (unix:path=/tmp/dbus-XXXXXXXXXX,guid=...). That last one
// cannot be fixed in advance, so the wrapper reads it from the session file
// dbus-launch writes, each time.
package guestx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// Session facts of the desktop image.
const (
	// User is the desktop user the session runs as, and Home its home.
	User = "user"
	Home = "/home/" + User
	// Display is the session's X display.
	Display = ":0"
)

// SessionEnv is the fixed part of the session's environment (the D-Bus
// address is added at run time).
var SessionEnv = []string{
	"HOME=/home/user",
	"USER=user",
	"LOGNAME=user",
	"SHELL=/bin/bash",
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"LANG=C.UTF-8",
	"DISPLAY=:0",
	"XAUTHORITY=/home/user/.Xauthority",
	"XDG_RUNTIME_DIR=/run/user/1000",
	"XDG_CURRENT_DESKTOP=LXDE",
	"XDG_MENU_PREFIX=lxde-",
}

// SbinPath is an Env entry for PATH with the sbin directories too: what
// the servers that OSWorld's and Cua's clients expect run with, so their
// commands find admin tools by name as there.
const SbinPath = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

// Execer is what guestx needs from the VM layer: vmm.Farm's Exec.
type Execer interface {
	Exec(ctx context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error)
}

// Cmd is a program to run in the session. Exactly one of Argv and Shell is
// set.
type Cmd struct {
	// Argv is the program and its arguments, looked up in the session's PATH.
	Argv []string
	// Shell is a script run with sh -c.
	Shell string
	// Stdin is the program's standard input (at most vmm.MaxExecStdin).
	Stdin []byte
	// Env adds or overrides "K=V" variables of the session's environment.
	Env []string
	// Dir is the working directory; "" means the user's home.
	Dir string
	// MergeStderr sends stderr to stdout, as subprocess's stderr=STDOUT.
	MergeStderr bool
	// Timeout bounds the run; 0 means vmm.DefaultExecTimeout.
	Timeout time.Duration
}

// ErrInvalid means a Cmd was malformed.
var ErrInvalid = errors.New("invalid guest session command")

// ErrNotFound means Argv's program is not on the session's PATH: nothing
// ran (the exec that raises in Python, as opposed to a program that ran and
// exited 127).
var ErrNotFound = errors.New("program not found in the guest session")

// notFoundMarker starts the line the launcher writes on stderr, with exit
// code 127, when the program is not on PATH.
const notFoundMarker = "deskfarm-guestx: command not found: "

// launcher runs as the user inside the session's environment: it tells a
// missing program (ErrNotFound) from one that exits 127, merges stderr into
// stdout when $1 is 1, and becomes the program.
const launcher = `if ! command -v "$2" >/dev/null 2>&1; then
	echo "` + notFoundMarker + `$2" >&2
	exit 127
fi
if [ "$1" = 1 ]; then exec 2>&1; fi
shift
exec "$@"`

// wrapper runs as root in the guest: it reads the session's D-Bus address
// from the file dbus-launch writes at session start
// (~/.dbus/session-bus/MACHINEID-0, for display :0), then becomes the user
// with only the session environment (env -i) and runs "$@" from the
// directory in $1 ("" for the home). setpriv rather than su, sudo or
// runuser: no PAM session, no password, no tty, stdin passes through, and it
// is the cheapest: measured in a desktop VM under TCG at host load 12-18
// (2026-11-30), runuser took 1.3 s, setpriv 0.15 s, and reading the address
// from the window manager's environment (pgrep, /proc/PID/environ) 1.8 s.
// Without a session file (X not up yet) the address is left out and X
// clients fail on their own terms. The program then starts through launcher
// (one more sh, a few milliseconds), which tells a missing program from one
// that exits 127 and merges stderr when asked.
const wrapper = `bus=$(sed -n "s/^DBUS_SESSION_BUS_ADDRESS='\\(.*\\)'$/\\1/p" /home/` + User + `/.dbus/session-bus/*-0 2>/dev/null)
cd "${1:-/home/` + User + `}" || exit 126
shift
if [ -n "$bus" ]; then
	set -- "DBUS_SESSION_BUS_ADDRESS=$bus" "$@"
fi
exec setpriv --reuid=` + User + ` --regid=` + User + ` --init-groups env -i "$@"`

// Request builds the vmm exec request that runs c in the session: what Run
// sends, exposed for callers that exec through something else.
func Request(c Cmd) (vmm.ExecRequest, error) {
	switch {
	case len(c.Argv) > 0 && c.Shell != "":
		return vmm.ExecRequest{}, fmt.Errorf("%w: both argv and shell given", ErrInvalid)
	case len(c.Argv) == 0 && c.Shell == "":
		return vmm.ExecRequest{}, fmt.Errorf("%w: neither argv nor shell given", ErrInvalid)
	case len(c.Argv) > 0 && c.Argv[0] == "":
		return vmm.ExecRequest{}, fmt.Errorf("%w: empty program name", ErrInvalid)
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsAny(k, " \t\n'\"$") {
			return vmm.ExecRequest{}, fmt.Errorf("%w: env entry %q is not K=V", ErrInvalid, kv)
		}
	}
	argv := []string{"sh", "-c", wrapper, "guestx", c.Dir}
	argv = append(argv, SessionEnv...)
	argv = append(argv, c.Env...)
	merge := "0"
	if c.MergeStderr {
		merge = "1"
	}
	argv = append(argv, "sh", "-c", launcher, launcherName, merge)
	if c.Shell != "" {
		argv = append(argv, "sh", "-c", c.Shell)
	} else {
		// Unwrap would take a program name with '=' for an assignment.
		if strings.Contains(c.Argv[0], "=") {
			return vmm.ExecRequest{}, fmt.Errorf("%w: program name %q contains '='", ErrInvalid, c.Argv[0])
		}
		argv = append(argv, c.Argv...)
	}
	return vmm.ExecRequest{Argv: argv, Stdin: c.Stdin, Timeout: c.Timeout}, nil
}

// launcherName is the launcher's $0.
const launcherName = "guestx-launch"

// Unwrap is Request's inverse, for fakes of the VM layer in tests: the
// Cmd that req runs in the session (a Shell comes back as Argv sh -c
// SCRIPT; Stdin and Timeout are req's), and false when req is not a
// session request.
func Unwrap(req vmm.ExecRequest) (Cmd, bool) {
	a := req.Argv
	if len(a) < 5+len(SessionEnv) || a[0] != "sh" || a[1] != "-c" || a[2] != wrapper || a[3] != "guestx" {
		return Cmd{}, false
	}
	c := Cmd{Dir: a[4], Stdin: req.Stdin, Timeout: req.Timeout}
	a = a[5+len(SessionEnv):]
	for len(a) > 0 && strings.Contains(a[0], "=") {
		c.Env = append(c.Env, a[0])
		a = a[1:]
	}
	if len(a) < 6 || a[0] != "sh" || a[1] != "-c" || a[2] != launcher || a[3] != launcherName {
		return Cmd{}, false
	}
	c.MergeStderr = a[4] == "1"
	c.Argv = a[5:]
	return c, true
}

// Run runs c in vm's desktop session and returns what it returned; a
// non-zero exit is a result, not an error. Errors are the VM layer's
// (vmm.ErrAgent, vmm.ErrTimeout, ...), ErrInvalid, or ErrNotFound when
// Argv's program is not on PATH (with the result, exit code 127).
func Run(ctx context.Context, ex Execer, vm string, c Cmd) (vmm.ExecResult, error) {
	req, err := Request(c)
	if err != nil {
		return vmm.ExecResult{}, err
	}
	res, err := ex.Exec(ctx, vm, req)
	if err != nil {
		return res, fmt.Errorf("run %s in the session of vm %s: %w", c.name(), vm, err)
	}
	if c.Shell == "" && res.ExitCode == 127 && bytes.HasPrefix(res.Stderr, []byte(notFoundMarker+c.Argv[0]+"\n")) {
		return res, fmt.Errorf("run %s in the session of vm %s: %w", c.Argv[0], vm, ErrNotFound)
	}
	return res, nil
}

// Output runs c and returns its stdout; a non-zero exit is an *ExitError.
func Output(ctx context.Context, ex Execer, vm string, c Cmd) ([]byte, error) {
	res, err := Run(ctx, ex, vm, c)
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 || res.Signal != 0 {
		return res.Stdout, &ExitError{VM: vm, Cmd: c.name(), Result: res}
	}
	return res.Stdout, nil
}

// ExitError is a session program that exited non-zero or was killed.
type ExitError struct {
	VM     string
	Cmd    string
	Result vmm.ExecResult
}

func (e *ExitError) Error() string {
	how := fmt.Sprintf("exit code %d", e.Result.ExitCode)
	if e.Result.Signal != 0 {
		how = fmt.Sprintf("signal %d", e.Result.Signal)
	}
	msg := strings.TrimSpace(string(e.Result.Stderr))
	if len(msg) > 500 {
		msg = msg[:500] + "..."
	}
	if msg == "" {
		return fmt.Sprintf("%s in the session of vm %s: %s", e.Cmd, e.VM, how)
	}
	return fmt.Sprintf("%s in the session of vm %s: %s: %s", e.Cmd, e.VM, how, msg)
}

// name is a short name of the command for errors.
func (c Cmd) name() string {
	if c.Shell != "" {
		s := c.Shell
		if len(s) > 60 {
			s = s[:60] + "..."
		}
		return fmt.Sprintf("sh -c %q", s)
	}
	return c.Argv[0]
}
