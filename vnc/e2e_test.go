package vnc

import (
	"bytes"
	"compress/gzip"
	"context"
	"image"
	"image/png"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/images/tiny/screen"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// The real-VM test boots the tiny guest image (images/tiny): its /init draws
// a known screen, a marker centred on every pointer press and the typed
// characters, and logs input events.

// captureEnv, when set to a directory, makes TestE2EClient write a new
// capture of QEMU's side of the connection there (see testdata/README).
const captureEnv = "DESKFARM_VNC_CAPTURE"

// requireTinyVM skips (or, under make test, fails) unless a real VM can run.
func requireTinyVM(t *testing.T) { testenv.RequireVM(t, "tiny") }

func startTinyVM(t *testing.T) (*vmm.Manager, vmm.VM) {
	t.Helper()
	m := testenv.Manager(t, "tiny") // may wait for another test process's run
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatalf("create tiny vm: %v", err)
	}
	t.Logf("vm %s ready in %v (%dx%d, %s)", vm.ID, time.Since(start).Round(time.Millisecond), vm.Width, vm.Height, vm.Accel)
	return m, vm
}

// X keysyms and XT scancodes used below.
const (
	xkA       = 0x61
	xkShiftL  = 0xffe1
	xkCtrlR   = 0xffe4
	xkUp      = 0xff52
	scA       = 0x1e
	scShiftL  = 0x2a
	scCtrlR   = 0xe01d
	scUpArrow = 0xe048
)

func TestE2EClient(t *testing.T) {
	requireTinyVM(t)
	m, vm := startTinyVM(t)
	ctx := context.Background()

	shot := func() *image.RGBA {
		t.Helper()
		img, err := m.Screenshot(ctx, vm.ID)
		if err != nil {
			t.Fatalf("libvirt screenshot: %v", err)
		}
		return img
	}
	var tap *tapConn
	c, err := Dial(ctx, Config{Socket: vm.VNCSocket, VM: vm.ID, Log: testLogger(), DialFunc: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", vm.VNCSocket)
		if err != nil || tap != nil {
			return conn, err
		}
		tap = &tapConn{Conn: conn}
		return tap, nil
	}})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	if w, h := c.Size(); w != vm.Width || h != vm.Height {
		t.Fatalf("size %dx%d, vm is %dx%d", w, h, vm.Width, vm.Height)
	}

	settle := func(what string) {
		t.Helper()
		if _, err := c.Settle(ctx, 100*time.Millisecond, 10*time.Second); err != nil {
			t.Fatalf("settle after %s: %v", what, err)
		}
	}
	mirrorMatchesLibvirt := func(what string) {
		t.Helper()
		settle(what)
		want := shot()
		if ok, diff := imagesEqual(c.SnapshotRaw(), want); !ok {
			savePNG(t, "mirror-"+what, c.SnapshotRaw())
			savePNG(t, "libvirt-"+what, want)
			t.Fatalf("%s: mirror differs from libvirt's screenshot: %s", what, diff)
		}
	}

	// The first frame is the guest's initial screen.
	mirrorMatchesLibvirt("connect")
	initial := screen.NewCanvas(vm.Width, vm.Height)
	if ok, diff := imagesEqual(c.SnapshotRaw(), initial.Img); !ok {
		t.Errorf("initial mirror is not the tiny guest's initial screen: %s", diff)
	}
	if cur, _ := c.Cursor(); cur != nil {
		t.Logf("server cursor: %v", cur.Rect.Size())
	}

	// Clicks: the marker is centred exactly where the pointer went down.
	w, h := vm.Width, vm.Height
	points := []image.Point{{0, 0}, {w - 1, 0}, {0, h - 1}, {w - 1, h - 1}, {w / 2, h / 2}, {w/2 + 137, h/2 + 91}}
	for i, p := range points {
		if err := c.Pointer(p.X, p.Y, 0); err != nil {
			t.Fatal(err)
		}
		if i == len(points)-1 {
			// The last click lands on an idle guest, whose QEMU refresh
			// timer has backed off to 3 s (see the package documentation):
			// Settle must still bring its marker.
			time.Sleep(3 * time.Second)
		}
		if err := c.Pointer(p.X, p.Y, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Pointer(p.X, p.Y, 0); err != nil {
			t.Fatal(err)
		}
		settle("click")
		checkMarker(t, c.Snapshot(), p, screen.MarkerLeft)
	}
	if err := c.Pointer(w, 0, 0); err == nil {
		t.Errorf("pointer at x=%d on a %d-wide screen: no error", w, w)
	}
	mirrorMatchesLibvirt("clicks")
	// The takeover path: a Server fed by this client's mirror shows a
	// viewer (another Client) the guest's picture.
	viewer, _ := dialServer(t, &Server{Source: clientSource{c}, VM: vm.ID, Log: testLogger()})
	if ok, diff := imagesEqual(viewer.SnapshotRaw(), shot()); !ok {
		t.Errorf("a viewer of the mirror through Server: %s", diff)
	}
	viewer.Close()
	if dir := os.Getenv(captureEnv); dir != "" && tap != nil {
		writeCapture(t, dir, tap.bytes(), c.SnapshotRaw())
	}

	// Typing: ext key events with scancodes, Shift for the capital.
	type key struct {
		sym  uint32
		code uint16
	}
	press := func(keys ...key) {
		for _, k := range keys {
			if err := c.Key(k.sym, k.code, true); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range slices.Backward(keys) {
			if err := c.Key(k.sym, k.code, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	press(key{xkA, scA})
	press(key{xkShiftL, scShiftL}, key{'A', scA})
	press(key{xkCtrlR, scCtrlR})
	press(key{xkUp, scUpArrow})
	settle("typing")
	want := screen.NewCanvas(w, h)
	want.TypeString("aA")
	snap := c.Snapshot()
	for col := 0; col < 2; col++ {
		cell := screen.CellRect(col, 0)
		if ok, diff := imagesEqual(snap.SubImage(cell).(*image.RGBA), want.Img.SubImage(cell).(*image.RGBA)); !ok {
			t.Errorf("text cell %d: %s", col, diff)
		}
	}
	log, err := m.ReadFile(ctx, vm.ID, screen.InputLogPath)
	if err != nil {
		t.Fatalf("read input log: %v", err)
	}
	for _, line := range []string{
		"button down left 0 0", "button down left 1279 799",
		"key down 30 a", "char a", "key down 42 leftshift", "char A",
		"key down 97 rightctrl", "key up 97 rightctrl", "key down 103 up",
	} {
		if !strings.Contains(string(log), line+"\n") {
			t.Errorf("input log lacks %q", line)
		}
	}
	// The wake-up key releases of Settle must not reach the guest.
	for _, bad := range []string{"scrolllock", "pause", "f11"} {
		if strings.Contains(string(log), bad) {
			t.Errorf("input log shows a wake-up key (%s):\n%s", bad, log)
		}
	}
	mirrorMatchesLibvirt("typing")

	// Reset: loadvm keeps the VNC connection; the mirror follows.
	connects := c.Stats().Connects
	if _, err := m.Reset(ctx, vm.ID); err != nil {
		t.Fatalf("reset: %v", err)
	}
	mirrorMatchesLibvirt("reset")
	if ok, diff := imagesEqual(c.SnapshotRaw(), initial.Img); !ok {
		t.Errorf("after reset the mirror is not the initial screen: %s", diff)
	}
	if got := c.Stats().Connects; got != connects {
		t.Errorf("reset made the client reconnect (%d -> %d connects); loadvm should keep VNC clients", connects, got)
	}
	if err := c.Err(); err != nil {
		t.Errorf("after reset: %v", err)
	}
	p := image.Pt(400, 300)
	c.Pointer(p.X, p.Y, 4)
	c.Pointer(p.X, p.Y, 0)
	settle("click after reset")
	checkMarker(t, c.Snapshot(), p, screen.MarkerRight)

	// Latency (Snapshot, Settle, libvirt's screenshot) is measured by
	// bench/actions and BenchmarkSnapshot, not asserted here.
	t.Logf("stats: %+v", c.Stats())

	c.Close()
	closed = true
	checkNoGoroutines(t)
}

// checkMarker checks that img shows a marker of colour col centred exactly
// on p: the marker square (clipped) is all col, the ring around it is not.
func checkMarker(t *testing.T, img *image.RGBA, p image.Point, col interface{ RGBA() (r, g, b, a uint32) }) {
	t.Helper()
	sq := screen.MarkerRect(p).Intersect(img.Rect)
	want := img.ColorModel().Convert(col)
	bad := 0
	for y := sq.Min.Y; y < sq.Max.Y; y++ {
		for x := sq.Min.X; x < sq.Max.X; x++ {
			if img.At(x, y) != want {
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("marker at %v: %d of %d pixels of %v are not %v", p, bad, sq.Dx()*sq.Dy(), sq, want)
	}
	ring := screen.MarkerRect(p).Inset(-1).Intersect(img.Rect)
	for y := ring.Min.Y; y < ring.Max.Y; y++ {
		for x := ring.Min.X; x < ring.Max.X; x++ {
			if image.Pt(x, y).In(sq) {
				continue
			}
			if img.At(x, y) == want {
				t.Errorf("marker at %v: pixel (%d,%d) just outside it has the marker colour: off centre", p, x, y)
				return
			}
		}
	}
}

func savePNG(t *testing.T, name string, img image.Image) {
	t.Helper()
	dir := t.TempDir()
	if d := os.Getenv("DESKFARM_VNC_ARTIFACTS"); d != "" {
		dir = d
	}
	p := filepath.Join(dir, name+".png")
	f, err := os.Create(p)
	if err != nil {
		t.Logf("save %s: %v", p, err)
		return
	}
	defer f.Close()
	if err := png.Encode(f, img); err != nil {
		t.Logf("save %s: %v", p, err)
	}
	t.Logf("saved %s", p)
}

// writeCapture stores QEMU's side of the connection (gzip) and the mirror
// it produced, which the test has just checked against libvirt's
// screenshot.
func writeCapture(t *testing.T, dir string, stream []byte, mirror *image.RGBA) {
	t.Helper()
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
	zw.Write(stream)
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, captureStream), z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var p bytes.Buffer
	if err := png.Encode(&p, mirror); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, captureScreen), p.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("capture: %d bytes of stream (%d gzipped), screen %d bytes PNG, in %s", len(stream), z.Len(), p.Len(), dir)
}

// testLogger logs at debug level when DESKFARM_VNC_DEBUG is set.
func testLogger() *slog.Logger {
	level := slog.LevelInfo
	switch os.Getenv("DESKFARM_VNC_DEBUG") {
	case "":
	case "updates":
		level = slog.LevelDebug - 1 // every update
	default:
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
