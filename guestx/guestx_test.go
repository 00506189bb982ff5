package guestx

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// The wrapper is run here by the host's sh with setpriv replaced by a
// stand-in and the D-Bus session file by a copy of one from a desktop VM
// (~/.dbus/session-bus/MACHINEID-0 as dbus-launch wrote it, 2026-11-30), so
// the test sees the environment and argv the program would get, not just
// the strings Request builds.
func TestRequestRunsAsTheUserWithTheSessionEnv(t *testing.T) {
	req, err := Request(Cmd{Argv: []string{"printenv"}, Env: []string{"LANG=de_DE.UTF-8", "EXTRA=1"}, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.MkdirAll(home+"/.dbus/session-bus", 0o755); err != nil {
		t.Fatal(err)
	}
	session := "# This file allows processes on the machine with id 16012cd2b71b4f70919aa02ab60d886c using \n" +
		"DBUS_SESSION_BUS_ADDRESS='unix:path=/tmp/dbus-BOggE8BaLE,guid=1e360f9fe075d30ea8278f226b0d32a7'\n" +
		"DBUS_SESSION_BUS_PID=229\nDBUS_SESSION_BUS_WINDOWID=4194305\n"
	if err := os.WriteFile(home+"/.dbus/session-bus/16012cd2b71b4f70919aa02ab60d886c-0", []byte(session), 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(req.Argv[2], "/home/user/.dbus", home+"/.dbus")
	script = strings.ReplaceAll(script, "exec setpriv --reuid=user --regid=user --init-groups env -i", "printf '%s\\n' setpriv")
	out, err := exec.Command("sh", append([]string{"-c", script}, req.Argv[3:]...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if lines[0] != "setpriv" || lines[len(lines)-1] != "printenv" {
		t.Fatalf("argv after the wrapper: %q", lines)
	}
	for _, want := range []string{"DBUS_SESSION_BUS_ADDRESS=unix:path=/tmp/dbus-BOggE8BaLE,guid=1e360f9fe075d30ea8278f226b0d32a7", "DISPLAY=:0", "XAUTHORITY=/home/user/.Xauthority", "XDG_RUNTIME_DIR=/run/user/1000", "EXTRA=1"} {
		if !slices.Contains(lines, want) {
			t.Errorf("%s missing from %q", want, lines)
		}
	}
	// env applies assignments left to right: the caller's LANG comes after
	// the session's, so it wins.
	if i, j := slices.Index(lines, "LANG=C.UTF-8"), slices.Index(lines, "LANG=de_DE.UTF-8"); i < 0 || j < i {
		t.Errorf("LANG order in %q", lines)
	}
}

func TestRequestShellAndErrors(t *testing.T) {
	req, err := Request(Cmd{Shell: "echo $HOME", Dir: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(req.Argv); req.Argv[4] != "/tmp" || req.Argv[n-3] != "sh" || req.Argv[n-1] != "echo $HOME" {
		t.Errorf("argv %q", req.Argv)
	}
	for _, c := range []Cmd{{}, {Argv: []string{"a"}, Shell: "b"}, {Argv: []string{""}}, {Argv: []string{"A=b"}},
		{Argv: []string{"x"}, Env: []string{"NOVALUE"}}} {
		if _, err := Request(c); !errors.Is(err, ErrInvalid) {
			t.Errorf("Request(%+v) = %v, want ErrInvalid", c, err)
		}
	}
}

func TestOutputExitError(t *testing.T) {
	farm := vmmtest.New()
	vm, _ := farm.Create(context.Background(), vmm.CreateOptions{Image: "desktop"})
	farm.ExecFn = func(vmm.ExecRequest) (vmm.ExecResult, error) {
		return vmm.ExecResult{ExitCode: 1, Stderr: []byte("Error: Can't open display: :0\n")}, nil
	}
	_, err := Output(context.Background(), farm, vm.ID, Cmd{Argv: []string{"xclip", "-o"}})
	if ee, ok := errors.AsType[*ExitError](err); !ok || ee.Result.ExitCode != 1 || !strings.Contains(err.Error(), "Can't open display") {
		t.Errorf("Output = %v", err)
	}
}

// hostRun runs c's request on the host as the guest would, with the user
// switch (setpriv) left out and the home the user's directory would be
// replaced by dir: the launcher's checks run for real in the host's sh.
type hostRun struct{ dir string }

func (h hostRun) Exec(_ context.Context, _ string, req vmm.ExecRequest) (vmm.ExecResult, error) {
	script := strings.ReplaceAll(req.Argv[2], "exec setpriv --reuid=user --regid=user --init-groups env -i", "exec env -i")
	script = strings.ReplaceAll(script, "/home/user", h.dir)
	cmd := exec.Command("sh", append([]string{"-c", script}, req.Argv[3:]...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	res := vmm.ExecResult{Stdout: []byte(out.String()), Stderr: []byte(errOut.String())}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

func TestRunNotFoundMergeDir(t *testing.T) {
	ctx := context.Background()
	h := hostRun{dir: t.TempDir()}
	// A program that is not on PATH did not run: ErrNotFound.
	if _, err := Run(ctx, h, "vm1", Cmd{Argv: []string{"no-such-program-deskfarm"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing program: %v, want ErrNotFound", err)
	}
	// One that runs and exits 127 is a result.
	res, err := Run(ctx, h, "vm1", Cmd{Argv: []string{"sh", "-c", "echo gone >&2; exit 127"}})
	if err != nil || res.ExitCode != 127 || string(res.Stderr) != "gone\n" {
		t.Errorf("exit 127: %+v %v", res, err)
	}
	// MergeStderr: one stream, in order; the program starts in the home.
	res, err = Run(ctx, h, "vm1", Cmd{Shell: "echo a; echo b >&2; pwd", MergeStderr: true})
	if err != nil || string(res.Stdout) != "a\nb\n"+h.dir+"\n" || len(res.Stderr) != 0 {
		t.Errorf("merged: %q %q %v", res.Stdout, res.Stderr, err)
	}
	res, err = Run(ctx, h, "vm1", Cmd{Argv: []string{"pwd"}, Dir: "/"})
	if err != nil || string(res.Stdout) != "/\n" {
		t.Errorf("dir: %q %v", res.Stdout, err)
	}
}

func TestUnwrap(t *testing.T) {
	for _, c := range []Cmd{
		{Argv: []string{"xdotool", "type", "--", "a=b"}, Dir: "/tmp", Env: []string{"PATH=/x"}, MergeStderr: true, Stdin: []byte("in"), Timeout: time.Second},
		{Shell: "echo hi"},
	} {
		req, err := Request(c)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := Unwrap(req)
		want := c
		if c.Shell != "" {
			want.Argv, want.Shell = []string{"sh", "-c", c.Shell}, ""
		}
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("Unwrap(Request(%+v)) = %+v %v", c, got, ok)
		}
	}
	if _, ok := Unwrap(vmm.ExecRequest{Argv: []string{"ls"}}); ok {
		t.Error("Unwrap took a plain request")
	}
}
