package osworld

import (
	"context"
	"errors"
	"fmt"
	"image"
	"path"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vnc"
)

// Cmd is one program run in the guest as the desktop user.
type Cmd struct {
	// Argv is the program and its arguments, looked up in the user's PATH.
	Argv []string
	// Dir is the working directory; empty means the user's home.
	Dir string
	// Stdin is fed to the program (at most vmm.MaxExecStdin bytes).
	Stdin []byte
	// MergeStderr sends stderr to stdout, as subprocess's stderr=STDOUT.
	MergeStderr bool
	// Timeout bounds the run; 0 means vmm.DefaultExecTimeout.
	Timeout time.Duration
}

// Result is what a guest program returned.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Frames is a VM's live picture, for recording.
type Frames interface {
	// Snapshot is a copy of the framebuffer, cursor included.
	Snapshot() *image.RGBA
	// Damage subscribes to framebuffer changes (see desk.FrameSource).
	Damage() (c <-chan vnc.Damage, cancel func())
}

// Guest is what a Handler needs from one VM. VMGuest is the real one; unit
// tests use a fake.
type Guest interface {
	// Run runs a program as the desktop user with the X session's
	// environment. An error means it could not run (ErrNotRun: no such
	// program) or the guest failed (agent error, timeout); a program that
	// ran and failed is a nil error with its exit code.
	Run(ctx context.Context, c Cmd) (Result, error)
	// ReadFile reads a guest file (as root: the agent's view).
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile writes a guest file owned by the desktop user, creating its
	// parent directories (owned by the user too).
	WriteFile(ctx context.Context, path string, data []byte) error
	// Screenshot is a PNG of the screen at native size, cursor included.
	Screenshot(ctx context.Context) ([]byte, error)
	// Frames is the live picture, for recordings.
	Frames(ctx context.Context) (Frames, error)
}

// ErrNotRun marks a command that could not be started (no such program).
var ErrNotRun = errors.New("command could not run")

// The desktop user of deskfarm's images.
const (
	DefaultUser = "user"
	DefaultHome = "/home/user"
)

// notFoundMarker is what sessionScript writes on stderr when the program is
// not on PATH, so Run can tell "no such program" (subprocess.run raises:
// a 500) from a program that exits 127 (a 200).
const notFoundMarker = "deskfarm-osworld: command not found: "

// sessionScript runs "$@" in the X session's environment. The osworld
// image's session writes its variables to ~/.deskfarm-session-env; the
// desktop image does not, so the fallback reads them from the window
// manager's process (the session D-Bus address is random per boot: it comes
// from dbus-launch).
const sessionScript = `f="$HOME/.deskfarm-session-env"
if [ -r "$f" ]; then
	set -a; . "$f"; set +a
else
	pid=$(pgrep -u "$(id -u)" -x openbox | head -n 1)
	if [ -n "$pid" ]; then
		eval "$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n "s/^\(DBUS_SESSION_BUS_ADDRESS\|XAUTHORITY\)=\(.*\)$/export \1='\2'/p")"
	fi
fi
export DISPLAY="${DISPLAY:-:0}" XAUTHORITY="${XAUTHORITY:-$HOME/.Xauthority}" XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}"
dir=$1; merge=$2; shift 2
cd "${dir:-$HOME}" || exit 126
if [ "$merge" = 1 ]; then exec 2>&1; fi
if ! command -v "$1" >/dev/null 2>&1; then
	echo "` + notFoundMarker + `$1" >&2
	exit 127
fi
exec "$@"`

// userArgv wraps argv to run as user with the session's environment: qemu-ga
// runs commands as root, OSWorld's server runs them as the desktop user.
func userArgv(user, home string, c Cmd) []string {
	merge := "0"
	if c.MergeStderr {
		merge = "1"
	}
	out := []string{"/usr/sbin/runuser", "-u", user, "--", "/usr/bin/env", "-i",
		"HOME=" + home, "USER=" + user, "LOGNAME=" + user, "SHELL=/bin/bash", "LANG=C.UTF-8",
		"PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
		"/bin/sh", "-c", sessionScript, "deskfarm-session", c.Dir, merge}
	return append(out, c.Argv...)
}

// VMFarm is what VMGuest needs from the VM layer (a vmm.Farm has it).
type VMFarm interface {
	Exec(ctx context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
}

// VMGuest is a Guest over a deskfarm VM: exec and files through the guest
// agent, the picture through the VM's desk.
type VMGuest struct {
	Farm  VMFarm
	Desks *desk.Pool
	VM    string
	// User and Home are the desktop user; default DefaultUser, DefaultHome.
	User, Home string
}

var _ Guest = (*VMGuest)(nil)

func (g *VMGuest) user() (string, string) {
	u, h := g.User, g.Home
	if u == "" {
		u = DefaultUser
	}
	if h == "" {
		h = DefaultHome
	}
	return u, h
}

// Run runs c as the desktop user through the guest agent.
func (g *VMGuest) Run(ctx context.Context, c Cmd) (Result, error) {
	if len(c.Argv) == 0 {
		return Result{}, fmt.Errorf("run in vm %s: %w: empty command", g.VM, ErrNotRun)
	}
	u, h := g.user()
	res, err := g.Farm.Exec(ctx, g.VM, vmm.ExecRequest{Argv: userArgv(u, h, c), Stdin: c.Stdin, Timeout: c.Timeout})
	if err != nil {
		return Result{}, fmt.Errorf("run %s in vm %s: %w", c.Argv[0], g.VM, err)
	}
	return checkNotFound(Result{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, c.Argv[0], g.VM)
}

func checkNotFound(r Result, prog, vm string) (Result, error) {
	if r.ExitCode == 127 && strings.Contains(string(r.Stderr)+string(r.Stdout), notFoundMarker+prog) {
		return r, fmt.Errorf("run %s in vm %s: %w: no such program", prog, vm, ErrNotRun)
	}
	return r, nil
}

// ReadFile reads a guest file through the agent.
func (g *VMGuest) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return g.Farm.ReadFile(ctx, g.VM, p)
}

// WriteFile creates p's parent directories as the user, writes p through the
// agent (as root) and gives it to the user.
func (g *VMGuest) WriteFile(ctx context.Context, p string, data []byte) error {
	u, _ := g.user()
	dir := path.Dir(p)
	if res, err := g.root(ctx, "/usr/sbin/runuser", "-u", u, "--", "mkdir", "-p", "--", dir); err != nil {
		return err
	} else if res.ExitCode != 0 {
		return fmt.Errorf("create %s in vm %s: %s", dir, g.VM, strings.TrimSpace(string(res.Stderr)))
	}
	if err := g.Farm.WriteFile(ctx, g.VM, p, data, 0o644); err != nil {
		return err
	}
	if res, err := g.root(ctx, "chown", u+":"+u, "--", p); err != nil {
		return err
	} else if res.ExitCode != 0 {
		return fmt.Errorf("chown %s in vm %s: %s", p, g.VM, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

func (g *VMGuest) root(ctx context.Context, argv ...string) (vmm.ExecResult, error) {
	return g.Farm.Exec(ctx, g.VM, vmm.ExecRequest{Argv: argv})
}

// Screenshot encodes the live mirror as PNG at native size, cursor included,
// after proving it current (a command may just have changed the screen).
func (g *VMGuest) Screenshot(ctx context.Context) ([]byte, error) {
	d, err := g.Desks.Get(ctx, g.VM)
	if err != nil {
		return nil, err
	}
	b, _, err := d.Screenshot(ctx, desk.ScreenshotOptions{Fresh: true, Encode: actions.EncodeOptions{Format: actions.FormatPNG}})
	return b, err
}

// Frames is the desk's picture with the cursor drawn in.
func (g *VMGuest) Frames(ctx context.Context) (Frames, error) {
	d, err := g.Desks.Get(ctx, g.VM)
	if err != nil {
		return nil, err
	}
	fs := d.Frames()
	// The desk's display is an actions.Display too (desk.Display), which
	// draws the cursor; FrameSource alone would record without it.
	snap, ok := fs.(interface{ Snapshot() *image.RGBA })
	if !ok {
		return nil, fmt.Errorf("frames of vm %s: display has no cursor snapshot", g.VM)
	}
	return cursorFrames{snap, fs}, nil
}

type cursorFrames struct {
	s interface{ Snapshot() *image.RGBA }
	f desk.FrameSource
}

func (c cursorFrames) Snapshot() *image.RGBA { return c.s.Snapshot() }
func (c cursorFrames) Damage() (<-chan vnc.Damage, func()) {
	return c.f.Damage()
}
