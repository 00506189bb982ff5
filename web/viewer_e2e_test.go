package web_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/images/tiny/screen"
	"github.com/deskfarm/deskfarm/internal/testenv"
)

// These tests watch and take over a real tiny VM through the browser
// endpoints: the frame websocket, the RFB proxy that noVNC talks to, and
// the control token.

func wsURL(a *tinyAPI, path string) string {
	return "ws" + strings.TrimPrefix(a.srv.URL, "http") + "/v1/vms/" + a.vm.ID + path
}

// frameConn reads frame messages and keeps the picture they build.
type frameConn struct {
	t    *testing.T
	conn *websocket.Conn
	img  *image.RGBA
}

func dialFrames(t *testing.T, a *tinyAPI) *frameConn {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.Dial(wsURL(a, "/stream"), nil)
	if err != nil {
		t.Fatalf("dial stream: %v (response %v)", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	return &frameConn{t: t, conn: conn}
}

// next reads one frame and applies it; it returns the frame's kind and rect.
func (f *frameConn) next(timeout time.Duration) (byte, image.Rectangle, error) {
	f.conn.SetReadDeadline(time.Now().Add(timeout))
	typ, b, err := f.conn.ReadMessage()
	if err != nil {
		return 0, image.Rectangle{}, err
	}
	if typ != websocket.BinaryMessage || len(b) < 13 {
		return 0, image.Rectangle{}, fmt.Errorf("frame message type %d of %d bytes", typ, len(b))
	}
	u := func(i int) int { return int(binary.BigEndian.Uint16(b[1+2*i:])) }
	fw, fh, r := u(0), u(1), image.Rect(u(2), u(3), u(2)+u(4), u(3)+u(5))
	part, err := jpeg.Decode(bytes.NewReader(b[13:]))
	if err != nil {
		return 0, r, fmt.Errorf("decode frame jpeg: %w", err)
	}
	if f.img == nil || f.img.Rect.Dx() != fw || f.img.Rect.Dy() != fh {
		if b[0] != 1 {
			return 0, r, fmt.Errorf("first frame is kind %d, want a key frame", b[0])
		}
		f.img = image.NewRGBA(image.Rect(0, 0, fw, fh))
	}
	for y := 0; y < r.Dy(); y++ {
		for x := 0; x < r.Dx(); x++ {
			f.img.Set(r.Min.X+x, r.Min.Y+y, part.At(part.Bounds().Min.X+x, part.Bounds().Min.Y+y))
		}
	}
	return b[0], r, nil
}

// similar reports the fraction of pixels of a and b within tol per channel.
func similar(a, b *image.RGBA, tol int) float64 {
	if a.Rect != b.Rect {
		return 0
	}
	ok, n := 0, 0
	for i := 0; i < len(a.Pix); i += 4 {
		n++
		d := 0
		for c := 0; c < 3; c++ {
			d = max(d, absInt(int(a.Pix[i+c])-int(b.Pix[i+c])))
		}
		if d <= tol {
			ok++
		}
	}
	return float64(ok) / float64(n)
}

func absInt(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// markerNear reports whether most of the marker square of b at p has its
// colour (frames are JPEG: allow a little).
func markerNear(img *image.RGBA, b screen.Button, p image.Point) bool {
	want := screen.MarkerColor(b)
	r := screen.MarkerRect(p).Inset(2).Intersect(img.Bounds())
	good, n := 0, 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			n++
			c := img.RGBAAt(x, y)
			if absInt(int(c.R)-int(want.R)) < 40 && absInt(int(c.G)-int(want.G)) < 40 && absInt(int(c.B)-int(want.B)) < 40 {
				good++
			}
		}
	}
	return n > 0 && good*10 >= n*9
}

func TestE2EStreamFramesFollowTheScreen(t *testing.T) {
	a := startTiny(t)
	f := dialFrames(t, a)
	kind, r, err := f.next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if kind != 1 || r != image.Rect(0, 0, 1280, 800) {
		t.Fatalf("first frame kind %d rect %v, want a 1280x800 key frame", kind, r)
	}
	if s := similar(f.img, a.screenshot("format=png"), 24); s < 0.99 {
		t.Errorf("key frame matches the screenshot in %.3f of its pixels, want >= 0.99", s)
	}

	p := image.Pt(700, 300)
	a.act(fmt.Sprintf(`{"screenshot_size":"native","action":{"kind":"click","x":%d,"y":%d}}`, p.X, p.Y), 200)
	deadline := time.Now().Add(10 * time.Second)
	for !markerNear(f.img, screen.ButtonLeft, p) {
		if time.Now().After(deadline) {
			t.Fatal("no frame showed the click marker within 10 s")
		}
		kind, r, err := f.next(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiting for the marker: %v", err)
		}
		t.Logf("frame kind %d rect %v", kind, r)
	}
	if s := similar(f.img, a.screenshot("format=png"), 24); s < 0.99 {
		t.Errorf("after the click the picture matches the screenshot in %.3f of its pixels", s)
	}
	// A still desktop sends nothing: frames stop once the click is drawn.
	quietFor := 2 * time.Second
	deadline = time.Now().Add(15 * time.Second)
	for {
		_, r, err := f.next(quietFor)
		if err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				break // quiet
			}
			t.Fatalf("waiting for quiet: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("frames still coming 15 s after the click (last rect %v): a still desktop must send nothing", r)
		}
	}
}

// rfbClient is a minimal RFB 3.8 client of the proxy.
type rfbClient struct {
	t    *testing.T
	conn *websocket.Conn
	buf  []byte
	w, h int
}

func dialRFB(t *testing.T, a *tinyAPI, token string) *rfbClient {
	t.Helper()
	url := wsURL(a, "/vnc")
	if token != "" {
		url += "?control_token=" + token
	}
	conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial vnc proxy: %v (response %v)", err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rfbClient{t: t, conn: conn}
	if v := c.read(12); string(v) != "RFB 003.008\n" {
		t.Fatalf("server version %q", v)
	}
	c.send([]byte("RFB 003.008\n"))
	if st := c.read(2); st[0] != 1 || st[1] != 1 {
		t.Fatalf("security types % x, want one: None", st)
	}
	c.send([]byte{1})
	if res := c.read(4); binary.BigEndian.Uint32(res) != 0 {
		t.Fatalf("security result % x", res)
	}
	c.send([]byte{1})
	init := c.read(24)
	c.w, c.h = int(binary.BigEndian.Uint16(init)), int(binary.BigEndian.Uint16(init[2:]))
	c.read(int(binary.BigEndian.Uint32(init[20:])))
	return c
}

func (c *rfbClient) send(b []byte) {
	c.t.Helper()
	if err := c.conn.WriteMessage(websocket.BinaryMessage, b); err != nil {
		c.t.Fatalf("rfb send: %v", err)
	}
}

func (c *rfbClient) read(n int) []byte {
	c.t.Helper()
	for len(c.buf) < n {
		c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.conn.ReadMessage()
		if err != nil {
			c.t.Fatalf("rfb read: %v", err)
		}
		c.buf = append(c.buf, b...)
	}
	out := c.buf[:n:n]
	c.buf = c.buf[n:]
	return out
}

// update asks for the whole screen and returns the raw update's size.
func (c *rfbClient) update() int {
	c.t.Helper()
	req := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(req[6:], uint16(c.w))
	binary.BigEndian.PutUint16(req[8:], uint16(c.h))
	c.send(req)
	hdr := c.read(4)
	if hdr[0] != 0 {
		c.t.Fatalf("server message type %d, want a framebuffer update", hdr[0])
	}
	total := 0
	for i := 0; i < int(binary.BigEndian.Uint16(hdr[2:])); i++ {
		r := c.read(12)
		w, h, enc := binary.BigEndian.Uint16(r[4:]), binary.BigEndian.Uint16(r[6:]), int32(binary.BigEndian.Uint32(r[8:]))
		if enc != 0 {
			c.t.Fatalf("rect encoding %d, want raw", enc)
		}
		c.read(int(w) * int(h) * 4)
		total += int(w) * int(h)
	}
	return total
}

// click sends a left click at p, and every other input message type.
func (c *rfbClient) click(p image.Point) {
	ptr := func(mask byte) []byte {
		b := []byte{5, mask, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(b[2:], uint16(p.X))
		binary.BigEndian.PutUint16(b[4:], uint16(p.Y))
		return b
	}
	c.send(ptr(0))
	c.send(ptr(1))
	c.send(ptr(0))
}

func (c *rfbClient) typeKey(keysym uint32) {
	for _, down := range []byte{1, 0} {
		b := []byte{4, down, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[4:], keysym)
		c.send(b)
	}
	// QEMU extended key event for 'a' (XT 0x1e), down and up.
	for _, down := range []uint16{1, 0} {
		b := []byte{255, 0, 0, 0, 0, 0, 0, 0x61, 0, 0, 0, 0x1e}
		binary.BigEndian.PutUint16(b[2:], down)
		c.send(b)
	}
}

func (a *tinyAPI) control(method string, want int) string {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.srv.URL+"/v1/vms/"+a.vm.ID+"/control", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s control: %d %s, want %d", method, resp.StatusCode, b, want)
	}
	var out struct {
		ControlToken string `json:"control_token"`
	}
	json.Unmarshal(b, &out)
	return out.ControlToken
}

func TestE2EProxyReadOnlyAndControl(t *testing.T) {
	a := startTiny(t)
	a.inputLog() // start from an empty log

	// Read-only: the proxy serves the picture and drops every input.
	ro := dialRFB(t, a, "")
	if ro.w != 1280 || ro.h != 800 {
		t.Fatalf("server init %dx%d, want 1280x800", ro.w, ro.h)
	}
	if n := ro.update(); n != 1280*800 {
		t.Fatalf("first update covers %d pixels, want the whole screen", n)
	}
	ro.click(image.Pt(300, 300))
	ro.typeKey('a')
	ro.update() // the proxy handled everything sent before this
	// An agent action after the dropped input: the guest logs it, and
	// nothing before it.
	a.act(`{"screenshot_size":"native","action":{"kind":"click","x":10,"y":10}}`, 200)
	for _, l := range a.inputLog() {
		if strings.Contains(l, "300 300") || strings.HasPrefix(l, "key") || strings.HasPrefix(l, "typed") {
			t.Errorf("read-only input reached the guest: %q", l)
		}
	}

	// Take control: agent actions are refused, the human's input lands.
	tok := a.control("POST", http.StatusCreated)
	e := a.errorOf(`{"action":{"kind":"click","x":10,"y":10}}`, http.StatusConflict)
	if e.Code != "human_control" {
		t.Errorf("agent action under human control: code %q, want human_control", e.Code)
	}
	// A wrong token is refused before the upgrade.
	if _, resp, err := websocket.DefaultDialer.Dial(wsURL(a, "/vnc?control_token=nope"), nil); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("wrong control token: err %v, response %v; want 403", err, resp)
	}
	rw := dialRFB(t, a, tok)
	rw.update()
	p := image.Pt(900, 500)
	rw.click(p)
	rw.update()
	deadline := time.Now().Add(10 * time.Second)
	for !markerNear(a.screenshot("format=png"), screen.ButtonLeft, p) {
		if time.Now().After(deadline) {
			t.Fatalf("the human's click at %v left no marker; guest input log: %q", p, a.inputLog())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Hand back: the agent acts again, the old token is dead.
	a.control("DELETE", http.StatusNoContent)
	a.act(`{"screenshot_size":"native","action":{"kind":"click","x":20,"y":20}}`, 200)
	a.inputLog()
	rw.click(image.Pt(400, 400))
	rw.update()
	a.act(`{"screenshot_size":"native","action":{"kind":"click","x":30,"y":30}}`, 200)
	for _, l := range a.inputLog() {
		if strings.Contains(l, "400 400") {
			t.Errorf("input with a released token reached the guest: %q", l)
		}
	}
}

// noVNCDir is the noVNC install `make novnc` makes, seen from this package.
func noVNCDir(t *testing.T) string {
	d, err := filepath.Abs(filepath.Join("assets", "vendor", "node_modules", "@novnc", "novnc"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// browser starts a headless Chromium for the test and returns its context.
// The browser process ends with the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Unavailable(t, "chromium is not installed (scripts/setup-host.sh installs it)")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1700, 1100),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()      // closes the browser
		cancelAlloc() // waits for the process to exit
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// do runs chromedp steps under a timeout.
func do(t *testing.T, ctx context.Context, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// eval evaluates a JavaScript expression (awaiting a promise) in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// poll waits until a JavaScript expression is true in the page.
func poll(t *testing.T, ctx context.Context, timeout time.Duration, expr string) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](expr)); err != nil {
		t.Fatalf("browser: waiting for %s: %v", expr, err)
	}
}

// canvasImage returns the live view's stream canvas.
func canvasImage(t *testing.T, ctx context.Context) *image.RGBA {
	t.Helper()
	url := eval[string](t, ctx, `document.getElementById('screen').toDataURL('image/png')`)
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(url, "data:image/png;base64,"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return toRGBA(img)
}

// waitFor polls cond every 100 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vncPoint returns where in the page guest pixel p is on the noVNC canvas.
func vncPoint(t *testing.T, ctx context.Context, p image.Point) (float64, float64) {
	t.Helper()
	xy := eval[[]float64](t, ctx, fmt.Sprintf(`(() => {
		const c = document.querySelector('#vnc canvas');
		const r = c.getBoundingClientRect();
		return [r.left + (%d + 0.5) * r.width / c.width, r.top + (%d + 0.5) * r.height / c.height];
	})()`, p.X, p.Y))
	return xy[0], xy[1]
}

func TestE2EBrowserViewer(t *testing.T) {
	t.Setenv("DESKFARM_NOVNC_DIR", noVNCDir(t))
	a := startTiny(t)
	if _, err := os.Stat(filepath.Join(noVNCDir(t), "core", "rfb.js")); err != nil {
		testenv.Unavailable(t, "noVNC is not installed (run `make novnc`)")
	}
	ctx := browser(t)

	// The dashboard lists the VM.
	do(t, ctx, 20*time.Second,
		chromedp.Navigate(a.srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-vm="`+a.vm.ID+`"]`)))

	// The live view shows the desktop.
	do(t, ctx, 20*time.Second, chromedp.Navigate(a.srv.URL+"/vms/"+a.vm.ID))
	poll(t, ctx, 20*time.Second, `window.deskfarm !== undefined && window.deskfarm.stats.frames > 0`)
	if s := similar(canvasImage(t, ctx), a.screenshot("format=png"), 24); s < 0.99 {
		t.Errorf("live view canvas matches the screenshot in %.3f of its pixels, want >= 0.99", s)
	}

	// An agent action appears in the view and in the overlay's log.
	p := image.Pt(500, 400)
	a.act(fmt.Sprintf(`{"screenshot_size":"native","action":{"kind":"click","x":%d,"y":%d}}`, p.X, p.Y), 200)
	waitFor(t, 10*time.Second, "the click marker on the live view canvas", func() bool {
		return markerNear(canvasImage(t, ctx), screen.ButtonLeft, p)
	})
	poll(t, ctx, 10*time.Second, fmt.Sprintf(`window.deskfarm.events.some(e => e.kind === 'click' && e.x === %d && e.y === %d)`, p.X, p.Y))
	logText := eval[string](t, ctx, `document.querySelector('#log li[data-kind="click"]').textContent`)
	if !strings.Contains(logText, fmt.Sprintf("(%d, %d)", p.X, p.Y)) {
		t.Errorf("action log entry %q does not show the click at %v", logText, p)
	}

	// A read-only noVNC connection with the browser's viewOnly off: the
	// proxy drops its input.
	a.inputLog()
	ro := image.Pt(200, 600)
	eval[bool](t, ctx, `window.deskfarm.openVNC('', false).then(() => true)`)
	x, y := vncPoint(t, ctx, ro)
	do(t, ctx, 10*time.Second, chromedp.MouseClickXY(x, y), chromedp.KeyEvent("q"))

	// Take control with the button; a click in the browser reaches the VM.
	do(t, ctx, 10*time.Second, chromedp.Click(chromedp.CSS(`#take`)))
	poll(t, ctx, 20*time.Second, `document.getElementById('mode').textContent.startsWith('YOU HAVE CONTROL')`)
	b := image.Pt(800, 250)
	x, y = vncPoint(t, ctx, b)
	do(t, ctx, 10*time.Second, chromedp.MouseClickXY(x, y))
	waitFor(t, 10*time.Second, "the takeover click's marker in the guest", func() bool {
		return markerNear(a.screenshot("format=png"), screen.ButtonLeft, b)
	})
	for _, l := range a.inputLog() {
		if strings.Contains(l, fmt.Sprintf("%d %d", ro.X, ro.Y)) || strings.HasPrefix(l, "key") || strings.HasPrefix(l, "typed") {
			t.Errorf("read-only browser input reached the guest: %q", l)
		}
	}
	e := a.errorOf(`{"action":{"kind":"click","x":10,"y":10}}`, http.StatusConflict)
	if e.Code != "human_control" {
		t.Errorf("agent action during takeover: code %q, want human_control", e.Code)
	}

	// Hand back with one click: the agent acts again.
	do(t, ctx, 10*time.Second, chromedp.Click(chromedp.CSS(`#giveback`)))
	poll(t, ctx, 10*time.Second, `document.getElementById('mode').textContent.startsWith('watching')`)
	a.act(`{"screenshot_size":"native","action":{"kind":"click","x":10,"y":10}}`, 200)

	// The wall shows the VM as a live thumbnail.
	do(t, ctx, 10*time.Second, chromedp.Navigate(a.srv.URL+"/wall"))
	poll(t, ctx, 20*time.Second, `document.querySelector('canvas[data-vm="`+a.vm.ID+`"]').width === 1280`)
}
