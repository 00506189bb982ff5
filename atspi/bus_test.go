package atspi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// desktop is a real X session on the host with a real AT-SPI stack (a
// session bus, at-spi-bus-launcher, the registry) and GTK 3's widget
// factory, a program whose tree is known: a stand-in for a guest's
// desktop, reached the way a walk reaches a guest (localGuest).
type desktop struct {
	env  []string
	app  *exec.Cmd
	kill []func()
}

func startDesktop(t *testing.T) *desktop {
	t.Helper()
	d := startSession(t)
	d.app, _ = d.start(t, d.env, "gtk3-widget-factory")
	return d
}

// startSession is a desktop without an application.
func startSession(t *testing.T) *desktop {
	t.Helper()
	for _, p := range []string{"Xvfb", "dbus-daemon", "dbus-send", "gtk3-widget-factory", "/usr/libexec/at-spi-bus-launcher", "/usr/bin/python3"} {
		if _, err := exec.LookPath(p); err != nil {
			testenv.Unavailable(t, p+" not found (scripts/setup-host.sh installs it)")
		}
	}
	d := &desktop{}
	t.Cleanup(func() {
		for i := len(d.kill) - 1; i >= 0; i-- {
			d.kill[i]()
		}
	})
	// Xvfb picks a free display and names it on fd 3 once it accepts
	// clients: no clash with another test's display, no client started
	// before the server is up.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	xvfb := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1280x800x24", "-nolisten", "tcp")
	xvfb.ExtraFiles = []*os.File{w}
	d.track(t, xvfb, "Xvfb")
	w.Close()
	n, err := bufio.NewReader(r).ReadString('\n')
	r.Close()
	if err != nil {
		t.Fatalf("Xvfb named no display: %v", err)
	}
	display := ":" + strings.TrimSpace(n)
	// A home and a runtime directory of the test's own: the accessibility
	// bus launcher puts its socket in $XDG_RUNTIME_DIR, else under $HOME
	// (~/.cache/at-spi/bus), where another test's, or the host's, would
	// replace it (TestKeptChromium lost its bus so beside a CI run).
	d.env = []string{"DISPLAY=" + display, "HOME=" + t.TempDir(), "XDG_RUNTIME_DIR=" + t.TempDir(), "LANG=C.UTF-8", "PATH=/usr/bin:/bin"}
	// The session bus prints its address; the services it starts (the
	// accessibility bus launcher, the registry) stay in its process group
	// and take its environment.
	_, out := d.start(t, d.env, "dbus-daemon", "--session", "--nofork", "--print-address=1")
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("session bus address: %v", err)
	}
	d.env = append(d.env, "DBUS_SESSION_BUS_ADDRESS="+strings.TrimSpace(addr))
	return d
}

// start runs a program in a process group of its own, the whole group
// killed at cleanup.
func (d *desktop) start(t *testing.T, env []string, name string, args ...string) (*exec.Cmd, io.Reader) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.track(t, cmd, name)
	return cmd, out
}

// track starts cmd in a process group of its own, the whole group killed
// at cleanup.
func (d *desktop) track(t *testing.T, cmd *exec.Cmd, name string) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	d.kill = append(d.kill, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

// localGuest is the VM layer for a walk of the host's desktop: the port is
// a socket pair, and the relay runs on the host as the guest agent would
// run it, from the same request (checked).
type localGuest struct {
	t   *testing.T
	env []string

	mu   sync.Mutex
	port *os.File // the guest's end of the last dial
}

func (g *localGuest) DialA11y(context.Context, string) (net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	host := os.NewFile(uintptr(fds[0]), "host")
	defer host.Close()
	c, err := net.FileConn(host)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.port = os.NewFile(uintptr(fds[1]), "port")
	g.mu.Unlock()
	return c, nil
}

func (g *localGuest) Exec(ctx context.Context, _ string, req vmm.ExecRequest) (vmm.ExecResult, error) {
	g.mu.Lock()
	port := g.port
	g.mu.Unlock()
	defer port.Close()
	a := req.Argv
	if len(a) < 5 || a[0] != "sh" || a[2] != portOpen || a[3] != portPath {
		return vmm.ExecResult{ExitCode: 2, Stderr: []byte("not the port wrapper")}, nil
	}
	c, ok := guestx.Unwrap(vmm.ExecRequest{Argv: a[4:], Stdin: req.Stdin})
	if !ok || c.Argv[0] != "python3" || !bytes.Equal(c.Stdin, relayScript) {
		return vmm.ExecResult{ExitCode: 2, Stderr: []byte("not the relay in the session")}, nil
	}
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", c.Argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.ExtraFiles = g.env, bytes.NewReader(c.Stdin), []*os.File{port}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := vmm.ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

// The walk reaches a real desktop through the relay and answers each mode
// with what is on it: the widget factory's window, its buttons on screen
// with their boxes, the rows of a tree view (an object that manages its
// descendants, so not in the application's cache: asked live).
func TestReadRealBus(t *testing.T) {
	d := startDesktop(t)
	g := &localGuest{t: t, env: d.env}
	ctx := context.Background()
	var tree string
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := Read(ctx, g, "vm", ModeOSWorld)
		if err == nil && strings.Contains(string(out), `<table-cell name="Andrea"`) {
			tree = string(out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no widget factory in the tree after 30 s: %v %.500s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, want := range []string{`<application name="gtk3-widget-factory">`, `<radio-button name="Page 3"`, `<push-button name="Minimize" st:enabled="true"`, `act:click_desc="Clicks the button"`} {
		if !strings.Contains(tree, want) {
			t.Errorf("no %s in the tree", want)
		}
	}

	// The widget factory's tree came in one call, from its bridge's cache
	// (the walk's event listener turns the cache on), but for the objects
	// the cache leaves out.
	// It was asked on its own socket, past the bus daemon, through the
	// relay's second channel.
	_, st, err := ReadStats(ctx, g, "vm", ModeOSWorld, Options{})
	if err != nil || len(st.PerApp) != 1 || !st.PerApp[0].Cached || st.CachedNodes < st.Nodes/2 {
		t.Errorf("walk without the application's cache: %v %+v", err, st)
	}
	if len(st.PerApp) == 1 && !st.PerApp[0].Peer {
		t.Errorf("the application was not asked on its own socket: %s", st.PerApp[0].PeerErr)
	}
	// Through the bus daemon alone, the same tree.
	direct, _, err := ReadStats(ctx, g, "vm", ModeOSWorld, Options{})
	if err != nil {
		t.Fatal(err)
	}
	viaBus, st, err := ReadStats(ctx, g, "vm", ModeOSWorld, Options{BusOnly: true})
	if err != nil || len(st.PerApp) != 1 || st.PerApp[0].Peer {
		t.Errorf("bus-only walk: %v %+v", err, st)
	}
	if string(viaBus) != string(direct) {
		t.Errorf("the tree through the bus (%d bytes) differs from the one on the application's socket (%d bytes)", len(viaBus), len(direct))
	}

	out, err := Read(ctx, g, "vm", ModeCua)
	if err != nil {
		t.Fatal(err)
	}
	var root cuaNode
	if err := json.Unmarshal(out, &root); err != nil {
		t.Fatal(err)
	}
	var find func(n *cuaNode) *cuaNode
	find = func(n *cuaNode) *cuaNode {
		if n.Role == "push button" && n.Title == "Minimize" {
			return n
		}
		for _, c := range n.Children {
			if f := find(c); f != nil {
				return f
			}
		}
		return nil
	}
	if b := find(&root); b == nil || b.Position == nil || b.Size == nil || b.Size.Width <= 0 {
		t.Errorf("cua: Minimize button %+v, want one with a box", b)
	}
	// Options.AppNames renames an application, and only that.
	renamed, _, err := ReadStats(ctx, g, "vm", ModeOSWorld, Options{AppNames: map[string]string{"gtk3-widget-factory": "Widget Factory"}})
	if err != nil || !strings.Contains(string(renamed), `<application name="Widget Factory">`) || strings.Contains(string(renamed), `"gtk3-widget-factory"`) {
		t.Errorf("renamed application: %v %.300s", err, renamed)
	}
	if out, err := Read(ctx, g, "vm", ModeTerminal); err != nil || string(out) != `{"output":null}` {
		t.Errorf("terminal without gnome-terminal: %s %v", out, err)
	}

	// Walks at once each get the whole tree.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := Read(ctx, g2(d), "vm", ModeOSWorld)
			if err != nil || !strings.Contains(string(out), `<table-cell name="Andrea"`) {
				t.Errorf("concurrent walk: %v %.200s", err, out)
			}
		}()
	}
	wg.Wait()
}

// g2 is a localGuest of its own for a concurrent walk (one port each).
func g2(d *desktop) *localGuest { return &localGuest{env: d.env} }

// A frozen application is cut after callTimeout, not the walk: the answer
// comes in seconds, without it.
func TestReadHungApplication(t *testing.T) {
	d := startDesktop(t)
	g := &localGuest{t: t, env: d.env}
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := Read(ctx, g, "vm", ModeCua)
		if err == nil && strings.Contains(string(out), `"gtk3-widget-factory"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no widget factory after 30 s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	old := callTimeout
	callTimeout = time.Second
	t.Cleanup(func() { callTimeout = old })
	if err := syscall.Kill(d.app.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(d.app.Process.Pid, syscall.SIGCONT)
	start := time.Now()
	out, err := Read(ctx, g, "vm", ModeOSWorld)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("walk with a frozen application: %v", err)
	}
	if strings.Contains(string(out), "<push-button") || took > 15*time.Second {
		t.Fatalf("a frozen application's tree after %s: %.300s", took, out)
	}
}

// A guest without an accessibility bus answers ErrUnavailable, saying why.
func TestReadNoBus(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		testenv.Unavailable(t, "no /usr/bin/python3")
	}
	g := &localGuest{t: t, env: []string{"PATH=/usr/bin:/bin", "DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent/bus"}}
	_, err := Read(context.Background(), g, "vm", ModeOSWorld)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v, want ErrUnavailable", err)
	}
}
