package osworld

import (
	"context"
	"fmt"
	"github.com/deskfarm/deskfarm/atspi"
	"image"
	"net"
	"path"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/player"
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
	// A11y walks the desktop's accessibility tree in one of package
	// atspi's modes.
	A11y(ctx context.Context, m atspi.Mode) ([]byte, error)
}

// ErrNotRun marks a command that could not be started (no such program):
// guestx's ErrNotFound.
var ErrNotRun = guestx.ErrNotFound

// The desktop user of deskfarm's images.
const (
	DefaultUser = guestx.User
	DefaultHome = guestx.Home
)

// VMFarm is what VMGuest needs from the VM layer (a vmm.Farm has it).
type VMFarm interface {
	Exec(ctx context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	DialA11y(ctx context.Context, id string) (net.Conn, error)
}

// VMGuest is a Guest over a deskfarm VM: exec and files through the guest
// agent (commands in the desktop session through package guestx), the
// picture through the VM's desk.
type VMGuest struct {
	Farm  VMFarm
	Desks *desk.Pool
	VM    string
}

var _ Guest = (*VMGuest)(nil)

// A11y walks the VM's accessibility tree (atspi.Read), with Chromium named
// as Chrome (ChromeAppNames).
func (g *VMGuest) A11y(ctx context.Context, m atspi.Mode) ([]byte, error) {
	out, _, err := atspi.ReadStats(ctx, g.Farm, g.VM, m, atspi.Options{AppNames: ChromeAppNames})
	return out, err
}

// ChromeAppNames names the osworld image's Chromium "Google Chrome" in the
// tree /accessibility answers, as Chrome names itself on OSWorld's Ubuntu
// image: OSWorld's getters find the address bar by
// "application[name=Google\ Chrome] entry[name=Address\ and\ search\ bar]"
// on x86 VMs (desktop_env/evaluators/getters/chrome.py,
// get_active_url_from_accessTree; 29 tasks), and Chromium's own name is
// compiled in (docs/osworld-image.md, "Chrome's names").
var ChromeAppNames = map[string]string{"Chromium": "Google Chrome"}

// Run runs c as the desktop user in its session.
func (g *VMGuest) Run(ctx context.Context, c Cmd) (Result, error) {
	res, err := guestx.Run(ctx, g.Farm, g.VM, guestx.Cmd{Argv: c.Argv, Dir: c.Dir, Stdin: c.Stdin, MergeStderr: c.MergeStderr,
		Env: []string{guestx.SbinPath}, Timeout: c.Timeout})
	if err != nil {
		return Result{}, err
	}
	return Result{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}, nil
}

// ReadFile reads a guest file through the agent.
func (g *VMGuest) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return g.Farm.ReadFile(ctx, g.VM, p)
}

// WriteFile creates p's parent directories as the user, writes p through the
// agent (as root) and gives it to the user.
func (g *VMGuest) WriteFile(ctx context.Context, p string, data []byte) error {
	dir := path.Dir(p)
	if res, err := guestx.Run(ctx, g.Farm, g.VM, guestx.Cmd{Argv: []string{"mkdir", "-p", "--", dir}}); err != nil {
		return err
	} else if res.ExitCode != 0 {
		return fmt.Errorf("create %s in vm %s: %s", dir, g.VM, strings.TrimSpace(string(res.Stderr)))
	}
	if err := g.Farm.WriteFile(ctx, g.VM, p, data, 0o644); err != nil {
		return err
	}
	owner := DefaultUser + ":" + DefaultUser
	if res, err := g.Farm.Exec(ctx, g.VM, vmm.ExecRequest{Argv: []string{"chown", owner, "--", p}}); err != nil {
		return err
	} else if res.ExitCode != 0 {
		return fmt.Errorf("chown %s in vm %s: %s", p, g.VM, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// Screenshot encodes the live mirror as PNG at native size, cursor included,
// after proving it current (a command may just have changed the screen).
func (g *VMGuest) Screenshot(ctx context.Context) ([]byte, error) {
	d, err := g.Desks.Get(ctx, g.VM)
	if err != nil {
		return nil, err
	}
	b, _, err := d.Screenshot(ctx, desk.ScreenshotOptions{Fresh: true, Encode: player.EncodeOptions{Format: player.FormatPNG}})
	return b, err
}

// Frames is the desk's picture with the cursor drawn in.
func (g *VMGuest) Frames(ctx context.Context) (Frames, error) {
	d, err := g.Desks.Get(ctx, g.VM)
	if err != nil {
		return nil, err
	}
	fs := d.Frames()
	// The desk's display is an player.Display too (desk.Display), which
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
