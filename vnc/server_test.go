package vnc

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// testSource is a FrameSource whose framebuffer tests change by hand. It
// is also VersionedFrames (see sharedSource) and counts the calls to both.
type testSource struct {
	mu      sync.Mutex
	img     *image.RGBA
	subs    map[chan Damage]struct{}
	closed  bool
	version uint64

	snapshots, reads, versions atomic.Int64  // calls to SnapshotRaw, ReadFrame, FrameVersion
	hold                       chan struct{} // if set, ReadFrame waits for it to close
}

func newTestSource(img *image.RGBA) *testSource {
	return &testSource{img: img, subs: map[chan Damage]struct{}{}}
}

// gradient is an opaque image whose every pixel differs from its
// neighbours in all three channels.
func gradient(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			i := img.PixOffset(x, y)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = uint8(x*7+y), uint8(y*5+3*x), uint8(x^y*3), 0xff
		}
	}
	return img
}

func (s *testSource) SnapshotRaw() *image.RGBA {
	s.snapshots.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *s.img
	c.Pix = bytes.Clone(s.img.Pix)
	return &c
}

func (s *testSource) FrameVersion() (uint64, image.Point) {
	s.versions.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.img.Rect.Size()
}

func (s *testSource) ReadFrame(f func(*image.RGBA, uint64)) {
	s.reads.Add(1)
	s.mu.Lock()
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.img, s.version)
}

// sharedSource is a testSource whose Servers share full frames.
type sharedSource struct {
	*testSource
	cache *FrameCache
}

func newSharedSource(img *image.RGBA) sharedSource {
	s := newTestSource(img)
	return sharedSource{s, NewFrameCache(s)}
}

func (s sharedSource) FullFrames() *FrameCache { return s.cache }

func (s *testSource) Damage() (<-chan Damage, func()) {
	ch := make(chan Damage, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(ch)
		return ch, func() {}
	}
	s.subs[ch] = struct{}{}
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[ch]; ok {
			delete(s.subs, ch)
			close(ch)
		}
	}
}

// notifyLocked offers d to every subscriber, merging with a pending one.
func (s *testSource) notifyLocked(d Damage) {
	for ch := range s.subs {
		select {
		case old := <-ch:
			d = old.union(d)
		default:
		}
		ch <- d
	}
}

func (s *testSource) draw(r image.Rectangle, col color.RGBA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fillRect(s.img, r, col)
	s.version++
	s.notifyLocked(Damage{Rect: r.Intersect(s.img.Rect)})
}

func (s *testSource) resize(w, h int, col color.RGBA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.img = image.NewRGBA(image.Rect(0, 0, w, h))
	fillRect(s.img, s.img.Rect, col)
	s.version++
	s.notifyLocked(Damage{Rect: s.img.Rect, Resized: true})
}

func (s *testSource) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ch := range s.subs {
		delete(s.subs, ch)
		close(ch)
	}
}

// clientSource makes a Client the FrameSource of a Server, as web does
// for the takeover path.
type clientSource struct{ *Client }

func (c clientSource) Damage() (<-chan Damage, func()) {
	s := c.Subscribe()
	return s.C, s.Close
}

// inputEvent is one call to a testSink.
type inputEvent struct {
	kind    string // "key" or "pointer"
	down    bool
	keysym  uint32
	x, y    int
	buttons uint8
}

func (e inputEvent) String() string {
	if e.kind == "key" {
		return fmt.Sprintf("key %#x down=%v", e.keysym, e.down)
	}
	return fmt.Sprintf("pointer (%d,%d) buttons %#x", e.x, e.y, e.buttons)
}

// testSink is an InputSink that records what reaches it.
type testSink struct {
	mu     sync.Mutex
	events []inputEvent
	added  chan struct{}
}

func newTestSink() *testSink { return &testSink{added: make(chan struct{}, 1)} }

func (s *testSink) add(e inputEvent) error {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
	select {
	case s.added <- struct{}{}:
	default:
	}
	return nil
}

func (s *testSink) Key(down bool, keysym uint32) error {
	return s.add(inputEvent{kind: "key", down: down, keysym: keysym})
}

func (s *testSink) Pointer(x, y int, buttons uint8) error {
	return s.add(inputEvent{kind: "pointer", x: x, y: y, buttons: buttons})
}

func (s *testSink) got() []inputEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// waitFor returns the events once there are at least n.
func (s *testSink) waitFor(t *testing.T, n int) []inputEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		if ev := s.got(); len(ev) >= n {
			return ev
		}
		select {
		case <-s.added:
		case <-deadline:
			t.Fatalf("input sink got %v, want at least %d events", s.got(), n)
		}
	}
}

func keyEv(keysym uint32, down bool) inputEvent {
	return inputEvent{kind: "key", down: down, keysym: keysym}
}

func ptrEv(x, y int, buttons uint8) inputEvent {
	return inputEvent{kind: "pointer", x: x, y: y, buttons: buttons}
}

func checkEvents(t *testing.T, got, want []inputEvent) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("input sink got\n  %v\nwant\n  %v", got, want)
	}
}

type serveResult struct {
	stats ServeStats
	err   error
}

// startServe runs srv on one end of a net.Pipe and returns the other end
// and Serve's result.
func startServe(t *testing.T, srv *Server) (net.Conn, <-chan serveResult) {
	t.Helper()
	client, server := net.Pipe()
	done := make(chan serveResult, 1)
	var serving sync.WaitGroup
	serving.Go(func() {
		st, err := srv.Serve(context.Background(), server)
		done <- serveResult{st, err}
	})
	t.Cleanup(func() {
		client.Close()
		serving.Wait() // Serve logs to t
	})
	return client, done
}

func waitServe(t *testing.T, done <-chan serveResult) serveResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	return serveResult{}
}

// socketPair returns the two ends of a unix stream socketpair. Unlike
// net.Pipe the kernel buffers writes, so a client that closes right after a
// write has sent all of it, as over QEMU's or the browser's socket.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), fmt.Sprintf("socketpair-%d", i))
		c, err := net.FileConn(f) // dups fd
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// dialServer connects this package's Client to srv through a socketpair. Every
// connection the client makes gets its own Serve, whose results arrive on
// the returned channel.
func dialServer(t *testing.T, srv *Server) (*Client, <-chan serveResult) {
	t.Helper()
	results := make(chan serveResult, 16)
	var serving sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{VM: "pair", Log: quietLogger(t), DialFunc: func(context.Context) (net.Conn, error) {
		client, server, err := socketPair()
		if err != nil {
			return nil, err
		}
		serving.Go(func() {
			st, err := srv.Serve(context.Background(), server)
			results <- serveResult{st, err}
		})
		return client, nil
	}})
	if err != nil {
		t.Fatalf("dial the server: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		serving.Wait() // Serve logs to t
	})
	return c, results
}

// waitMirror waits until the client's mirror equals want.
func waitMirror(t *testing.T, c *Client, want *image.RGBA, what string) {
	t.Helper()
	sub := c.Subscribe()
	defer sub.Close()
	deadline := time.After(5 * time.Second)
	for {
		got := c.SnapshotRaw()
		ok, diff := imagesEqual(got, want)
		if ok {
			return
		}
		select {
		case <-sub.C:
		case <-deadline:
			t.Fatalf("%s: the client's mirror never matched the source: %s", what, diff)
		}
	}
}

// rfbClient is a hand-driven RFB 3.8 viewer on a pipe, for edges the
// Client never produces.
type rfbClient struct {
	t    *testing.T
	conn net.Conn
	size image.Point
	pf   PixelFormat
}

func (c *rfbClient) read(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c.conn, b); err != nil {
		c.t.Fatalf("viewer read %d bytes: %v", n, err)
	}
	return b
}

func (c *rfbClient) send(b []byte) {
	c.t.Helper()
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("viewer write: %v", err)
	}
}

// handshake runs the viewer's side of the handshake and reads ServerInit.
func (c *rfbClient) handshake() {
	c.t.Helper()
	if v := c.read(12); string(v) != "RFB 003.008\n" {
		c.t.Fatalf("server version %q", v)
	}
	c.send([]byte("RFB 003.008\n"))
	n := c.read(1)
	if types := c.read(int(n[0])); !bytes.Equal(types, []byte{1}) {
		c.t.Fatalf("security types %v, want [1] (None)", types)
	}
	c.send([]byte{1})
	if r := c.read(4); !bytes.Equal(r, []byte{0, 0, 0, 0}) {
		c.t.Fatalf("security result %v", r)
	}
	c.send([]byte{1}) // shared
	si := c.read(24)
	c.size = image.Pt(int(binary.BigEndian.Uint16(si[0:])), int(binary.BigEndian.Uint16(si[2:])))
	c.pf = unmarshalPixelFormat([16]byte(si[4:20]))
	c.read(int(binary.BigEndian.Uint32(si[20:])))
}

// update reads one FramebufferUpdate with the client's parser.
func (c *rfbClient) update(pf PixelFormat, u *Update) []byte {
	c.t.Helper()
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var tap bytes.Buffer
	r := io.TeeReader(c.conn, &tap)
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil || t[0] != msgFramebufferUpdate {
		c.t.Fatalf("read update: type %d, %v", t[0], err)
	}
	if err := ReadUpdate(r, pf, c.size, u); err != nil {
		c.t.Fatalf("read update: %v", err)
	}
	return tap.Bytes()
}

func newRFBClient(t *testing.T, srv *Server) (*rfbClient, <-chan serveResult) {
	conn, done := startServe(t, srv)
	c := &rfbClient{t: t, conn: conn}
	c.handshake()
	return c, done
}

// captureMessages splits the capture's server messages (all
// FramebufferUpdates) into whole messages, type byte included.
func captureMessages(t *testing.T) ([][]byte, image.Point) {
	msgs, size := loadCapture(t)
	r := bytes.NewReader(msgs)
	var out [][]byte
	var u Update
	for r.Len() > 0 {
		start := len(msgs) - r.Len()
		if typ, _ := r.ReadByte(); typ != msgFramebufferUpdate {
			t.Fatalf("capture message type %d", typ)
		}
		if err := ReadUpdate(r, WireFormat, size, &u); err != nil {
			t.Fatal(err)
		}
		out = append(out, msgs[start:len(msgs)-r.Len()])
	}
	return out, size
}

// TestServerFrameIsQEMUs serves the first full frame QEMU 7.2 sent in the
// capture (testdata/README.md) and checks that the server's answer to the
// same request (a full non-incremental one, in the same pixel format) is
// byte for byte QEMU's message, and that its ServerInit announces what
// QEMU's did.
func TestServerFrameIsQEMUs(t *testing.T) {
	msgs, size := captureMessages(t)
	qemuFrame := msgs[1] // after the extended key event acknowledgement
	conv, _ := newConverter(WireFormat)
	m := newMirror(size.X, size.Y)
	var u Update
	if err := ReadUpdate(bytes.NewReader(qemuFrame[1:]), WireFormat, size, &u); err != nil {
		t.Fatal(err)
	}
	if _, err := m.apply(&u, conv); err != nil {
		t.Fatal(err)
	}

	c, done := newRFBClient(t, &Server{Source: newTestSource(m.snapshot(nil)), Log: quietLogger(t)})
	if c.size != size || c.pf != WireFormat {
		t.Errorf("ServerInit: %v %+v; QEMU announced %v %+v", c.size, c.pf, size, WireFormat)
	}
	c.send(appendSetPixelFormat(nil, WireFormat))
	c.send(appendSetEncodings(nil, advertisedEncodings))
	c.send(appendUpdateRequest(nil, false, image.Rectangle{Max: size}))
	got := c.update(WireFormat, &u)
	if !bytes.Equal(got, qemuFrame) {
		i := 0
		for i < min(len(got), len(qemuFrame)) && got[i] == qemuFrame[i] {
			i++
		}
		t.Fatalf("full frame: %d bytes, QEMU's %d; first difference at byte %d", len(got), len(qemuFrame), i)
	}
	c.conn.Close()
	if r := waitServe(t, done); r.err != nil || r.stats.Updates != 1 {
		t.Errorf("Serve: %+v %v; want 1 update and no error after the viewer hung up", r.stats, r.err)
	}
	checkNoGoroutines(t)
}

// TestServerClientQEMUCapture: the screen QEMU's capture ends on, served to
// this package's Client, arrives whole.
func TestServerClientQEMUCapture(t *testing.T) {
	screen := loadPNG(t, captureScreen)
	c, _ := dialServer(t, &Server{Source: newTestSource(screen), VM: "capture", Log: quietLogger(t)})
	if w, h := c.Size(); w != 1280 || h != 800 {
		t.Fatalf("client size %dx%d, want 1280x800", w, h)
	}
	mustMatch(t, c.SnapshotRaw(), screen, "first frame")
}

func TestServerFollowsSource(t *testing.T) {
	src := newTestSource(gradient(64, 48))
	c, results := dialServer(t, &Server{Source: src, Log: quietLogger(t)})
	mustMatch(t, c.SnapshotRaw(), src.SnapshotRaw(), "first frame")

	src.draw(image.Rect(10, 5, 30, 20), red)
	waitMirror(t, c, src.SnapshotRaw(), "after a draw")
	src.draw(image.Rect(60, 40, 64, 48), green)
	waitMirror(t, c, src.SnapshotRaw(), "after a draw in the corner")

	// A resize goes as DesktopSize plus the whole new frame.
	src.resize(100, 60, green)
	src.draw(image.Rect(90, 50, 100, 60), red)
	waitMirror(t, c, src.SnapshotRaw(), "after a resize")
	if w, h := c.Size(); w != 100 || h != 60 {
		t.Errorf("client size %dx%d after the resize, want 100x60", w, h)
	}
	if err := c.Err(); err != nil {
		t.Errorf("client after the resize: %v", err)
	}

	// The source going away ends the connection with ErrClosed.
	src.close()
	r := <-results
	if !errors.Is(r.err, ErrClosed) {
		t.Fatalf("Serve after the source closed: %v, want ErrClosed", r.err)
	}
	if r.stats.Updates < 3 {
		t.Errorf("%d updates, want at least 3", r.stats.Updates)
	}
}

// TestServerPixelFormats: every 32 bpp true-colour format with 8-bit
// channels, at any shifts and either byte order, carries the source's
// pixels, with unused bits set.
func TestServerPixelFormats(t *testing.T) {
	src := gradient(37, 11)
	formats := map[string]PixelFormat{
		"wire (bgrx le)": WireFormat,
		"rgbx le":        {BPP: 32, Depth: 24, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 0, GreenShift: 8, BlueShift: 16},
		"bgrx be":        {BPP: 32, Depth: 24, BigEndian: true, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 8, GreenShift: 16, BlueShift: 24},
		"xrgb be":        {BPP: 32, Depth: 24, BigEndian: true, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8, BlueShift: 0},
		"odd shifts le":  {BPP: 32, Depth: 32, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 2, GreenShift: 12, BlueShift: 22},
		"odd shifts be":  {BPP: 32, Depth: 24, BigEndian: true, TrueColor: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 21, GreenShift: 1, BlueShift: 11},
	}
	for name, pf := range formats {
		t.Run(name, func(t *testing.T) {
			c, done := newRFBClient(t, &Server{Source: newTestSource(src), Log: quietLogger(t)})
			c.send(appendSetPixelFormat(nil, pf))
			c.send(appendUpdateRequest(nil, false, image.Rect(3, 2, 30, 9)))
			var u Update
			c.update(pf, &u)
			if len(u.Rects) != 1 || u.Rects[0].Rectangle != image.Rect(3, 2, 30, 9) || u.Rects[0].Encoding != EncodingRaw {
				t.Fatalf("update %+v, want one raw rect for the requested region", u.Rects)
			}
			rc := u.Rects[0]
			pad := ^(uint32(0xff)<<pf.RedShift | uint32(0xff)<<pf.GreenShift | uint32(0xff)<<pf.BlueShift)
			for i := 0; i < rc.Dx()*rc.Dy(); i++ {
				p := image.Pt(rc.Min.X+i%rc.Dx(), rc.Min.Y+i/rc.Dx())
				var v uint32
				if pf.BigEndian {
					v = binary.BigEndian.Uint32(rc.Pixels[4*i:])
				} else {
					v = binary.LittleEndian.Uint32(rc.Pixels[4*i:])
				}
				got := color.RGBA{uint8(v >> pf.RedShift), uint8(v >> pf.GreenShift), uint8(v >> pf.BlueShift), 0xff}
				if want := src.RGBAAt(p.X, p.Y); got != want || v&pad != pad {
					t.Fatalf("pixel %v: %#08x decodes to %v, want %v with unused bits %#08x set", p, v, got, want, pad)
				}
			}
			// Byte-aligned formats also go through the client's converter.
			if conv, err := newConverter(pf); err == nil {
				m := newMirror(37, 11)
				if _, err := m.apply(&u, conv); err != nil {
					t.Fatal(err)
				}
				want := image.NewRGBA(src.Rect)
				copy(want.Pix, newMirror(37, 11).img.Pix)
				for y := 2; y < 9; y++ {
					copy(want.Pix[want.PixOffset(3, y):want.PixOffset(30, y)], src.Pix[src.PixOffset(3, y):src.PixOffset(30, y)])
				}
				mustMatch(t, m.snapshot(nil), want, "decoded by the client's converter")
			}
			c.conn.Close()
			waitServe(t, done)
		})
	}

	t.Run("16 bpp refused", func(t *testing.T) {
		c, done := newRFBClient(t, &Server{Source: newTestSource(src), Log: quietLogger(t)})
		pf := PixelFormat{BPP: 16, Depth: 16, TrueColor: true, RedMax: 31, GreenMax: 63, BlueMax: 31, RedShift: 11, GreenShift: 5}
		c.send(appendSetPixelFormat(nil, pf))
		if r := waitServe(t, done); !errors.Is(r.err, ErrUnsupportedPixelFormat) {
			t.Fatalf("Serve: %v, want ErrUnsupportedPixelFormat", r.err)
		}
	})
}

// TestServerLargeFrameInBands: a region above maxBandPixels goes as
// several rectangles of whole rows that together are the frame.
func TestServerLargeFrameInBands(t *testing.T) {
	src := gradient(2100, 2100)
	c, done := newRFBClient(t, &Server{Source: newTestSource(src), Log: quietLogger(t)})
	c.send(appendUpdateRequest(nil, false, image.Rectangle{Max: c.size}))
	var u Update
	c.update(WireFormat, &u)
	if len(u.Rects) < 2 {
		t.Fatalf("%d rects, want the 2100x2100 frame in bands", len(u.Rects))
	}
	for _, r := range u.Rects {
		if r.Dx()*r.Dy() > maxBandPixels {
			t.Errorf("rect %v has %d pixels, more than %d", r.Rectangle, r.Dx()*r.Dy(), maxBandPixels)
		}
	}
	conv, _ := newConverter(WireFormat)
	m := newMirror(2100, 2100)
	if _, err := m.apply(&u, conv); err != nil {
		t.Fatal(err)
	}
	mustMatch(t, m.snapshot(nil), src, "frame from bands")
	c.conn.Close()
	waitServe(t, done)
}

// TestServerInputPolicy drives the server with this package's Client:
// input reaches the sink only while allowed, and whatever the viewer holds
// is released when it disconnects.
func TestServerInputPolicy(t *testing.T) {
	const (
		xkA, xkB  = 0x61, 0x62
		xkShiftL  = 0xffe1
		xkControl = 0xffe3
	)
	var allowed atomic.Bool
	var asked atomic.Int32
	sink := newTestSink()
	srv := &Server{Source: newTestSource(gradient(64, 48)), Input: sink, RevokeCheck: time.Hour, Log: quietLogger(t),
		InputAllowed: func() bool { asked.Add(1); return allowed.Load() }}
	c, results := dialServer(t, srv)

	// Not allowed: read and dropped.
	must(t, c.Key(xkA, 0, true))
	must(t, c.Key(xkA, 0, false))
	must(t, c.Pointer(5, 5, 1))
	must(t, c.Pointer(5, 5, 0))
	for deadline := time.Now().Add(5 * time.Second); asked.Load() < 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server asked the policy %d times for 4 input events", asked.Load())
		}
	}
	allowed.Store(true)
	must(t, c.Key(xkB, 0, true))
	checkEvents(t, sink.waitFor(t, 1), []inputEvent{keyEv(xkB, true)})

	must(t, c.Key(xkShiftL, 0, true))
	must(t, c.Pointer(10, 20, 1))
	must(t, c.Pointer(12, 22, 1)) // a drag
	sink.waitFor(t, 4)

	// The viewer goes away holding b, Shift and the left button.
	c.Close()
	r := waitServe(t, results)
	checkEvents(t, sink.got(), []inputEvent{
		keyEv(xkB, true), keyEv(xkShiftL, true), ptrEv(10, 20, 1), ptrEv(12, 22, 1),
		keyEv(xkB, false), keyEv(xkShiftL, false), ptrEv(12, 22, 0),
	})
	if r.err != nil {
		t.Errorf("Serve after the viewer hung up: %v", r.err)
	}
	if r.stats.Forwarded != 4 || r.stats.Dropped != 4 || r.stats.Released != 3 {
		t.Errorf("stats %+v, want 4 forwarded, 4 dropped, 3 released", r.stats)
	}
	checkNoGoroutines(t)
}

// TestServerReleasesOnRevoke: input revoked while a key and a button are
// down releases them, whether or not the viewer sends anything more.
func TestServerReleasesOnRevoke(t *testing.T) {
	const xkC, xkD = 0x63, 0x64
	t.Run("viewer silent", func(t *testing.T) {
		var allowed atomic.Bool
		allowed.Store(true)
		sink := newTestSink()
		c, _ := dialServer(t, &Server{Source: newTestSource(gradient(64, 48)), Input: sink, InputAllowed: allowed.Load,
			RevokeCheck: 10 * time.Millisecond, Log: quietLogger(t)})
		must(t, c.Key(xkC, 0, true))
		must(t, c.Pointer(7, 8, 4))
		sink.waitFor(t, 2)
		allowed.Store(false)
		checkEvents(t, sink.waitFor(t, 4), []inputEvent{keyEv(xkC, true), ptrEv(7, 8, 4), keyEv(xkC, false), ptrEv(7, 8, 0)})
	})
	t.Run("next message", func(t *testing.T) {
		var allowed atomic.Bool
		allowed.Store(true)
		sink := newTestSink()
		c, results := dialServer(t, &Server{Source: newTestSource(gradient(64, 48)), Input: sink, InputAllowed: allowed.Load,
			RevokeCheck: time.Hour, Log: quietLogger(t)})
		must(t, c.Key(xkC, 0, true))
		sink.waitFor(t, 1)
		allowed.Store(false)
		must(t, c.Key(xkD, 0, true)) // dropped; its arrival shows the revocation
		checkEvents(t, sink.waitFor(t, 2), []inputEvent{keyEv(xkC, true), keyEv(xkC, false)})
		c.Close()
		r := waitServe(t, results)
		checkEvents(t, sink.got(), []inputEvent{keyEv(xkC, true), keyEv(xkC, false)})
		if r.stats.Released != 1 || r.stats.Dropped != 1 {
			t.Errorf("stats %+v, want 1 released (at revocation, none at disconnect), 1 dropped", r.stats)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestServerClientMessages covers messages the Client never sends: QEMU's
// extended key event (dropped even when input is allowed: the server does
// not offer it), cut text within and beyond the bound, and unknown types.
func TestServerClientMessages(t *testing.T) {
	src := newTestSource(gradient(16, 16))
	t.Run("qemu key and cut text", func(t *testing.T) {
		sink := newTestSink()
		c, done := newRFBClient(t, &Server{Source: src, Input: sink, Log: quietLogger(t)})
		c.send(appendExtKeyEvent(nil, 0x61, 0x1e, true))
		cut := []byte{msgClientCutText, 0, 0, 0, 0, 0, 0, 5}
		c.send(append(cut, "hello"...))
		c.send(appendKeyEvent(nil, 0x62, true))
		checkEvents(t, sink.waitFor(t, 1), []inputEvent{keyEv(0x62, true)})
		c.send([]byte{msgClientCutText, 0, 0, 0, 0, 0x20, 0, 0}) // 2 MiB
		r := waitServe(t, done)
		if !errors.Is(r.err, ErrProtocol) || !strings.Contains(r.err.Error(), "cut text") {
			t.Fatalf("Serve after 2 MiB of cut text: %v", r.err)
		}
		if r.stats.Dropped != 1 || r.stats.Forwarded != 1 || r.stats.Released != 1 {
			t.Errorf("stats %+v, want the QEMU key dropped, the key forwarded then released", r.stats)
		}
	})
	t.Run("unknown type", func(t *testing.T) {
		c, done := newRFBClient(t, &Server{Source: src, Log: quietLogger(t)})
		c.send([]byte{77})
		if r := waitServe(t, done); !errors.Is(r.err, ErrProtocol) || !strings.Contains(r.err.Error(), "type 77") {
			t.Fatalf("Serve after message type 77: %v", r.err)
		}
	})
	t.Run("view only", func(t *testing.T) {
		c, done := newRFBClient(t, &Server{Source: src, Log: quietLogger(t)})
		c.send(appendKeyEvent(nil, 0x62, true))
		c.send(appendPointerEvent(nil, 1, 3, 3))
		c.conn.Close()
		if r := waitServe(t, done); r.err != nil || r.stats.Dropped != 2 {
			t.Fatalf("view-only Serve: %+v %v, want 2 dropped", r.stats, r.err)
		}
	})
	t.Run("viewer without DesktopSize", func(t *testing.T) {
		src := newTestSource(gradient(16, 16))
		c, done := newRFBClient(t, &Server{Source: src, Log: quietLogger(t)})
		c.send(appendSetEncodings(nil, []int32{EncodingRaw}))
		c.send(appendUpdateRequest(nil, true, image.Rect(0, 0, 16, 16)))
		time.Sleep(10 * time.Millisecond) // let the request land before the resize (either order must end the same)
		src.resize(20, 20, red)
		if r := waitServe(t, done); r.err == nil || !strings.Contains(r.err.Error(), "DesktopSize") {
			t.Fatalf("Serve after a resize the viewer cannot take: %v", r.err)
		}
	})
	t.Run("rfb 3.3 viewer", func(t *testing.T) {
		conn, done := startServe(t, &Server{Source: src, Log: quietLogger(t)})
		c := &rfbClient{t: t, conn: conn}
		c.read(12)
		c.send([]byte("RFB 003.003\n"))
		if r := waitServe(t, done); !errors.Is(r.err, ErrProtocol) || !strings.Contains(r.err.Error(), "3.8") {
			t.Fatalf("Serve with an RFB 3.3 viewer: %v", r.err)
		}
	})
}

// TestServerHandshakeDeadline: a viewer that stalls in the handshake is
// dropped once HandshakeTimeout passes, whether it stops reading or stops
// answering.
func TestServerHandshakeDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stall func(c *rfbClient)
	}{
		{"reads nothing", func(*rfbClient) {}},
		{"after the version", func(c *rfbClient) { c.read(12) }},
		{"before ClientInit", func(c *rfbClient) {
			c.read(12)
			c.send([]byte("RFB 003.008\n"))
			c.read(2)
			c.send([]byte{1})
			c.read(4)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, done := startServe(t, &Server{Source: newTestSource(gradient(8, 8)), HandshakeTimeout: 50 * time.Millisecond, Log: quietLogger(t)})
			tc.stall(&rfbClient{t: t, conn: conn})
			r := waitServe(t, done)
			if !errors.Is(r.err, ErrHandshakeTimeout) {
				t.Fatalf("Serve with a stalled viewer: %v, want ErrHandshakeTimeout", r.err)
			}
			t.Log(r.err)
			// The viewer sees the connection closed.
			conn.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Errorf("viewer after the drop: %v, want EOF", err)
			}
		})
	}
	checkNoGoroutines(t)
}

// TestFramebufferSizeLimits: neither side takes a framebuffer beyond
// MaxFramebufferSide.
func TestFramebufferSizeLimits(t *testing.T) {
	t.Run("server refuses a huge source", func(t *testing.T) {
		_, done := startServe(t, &Server{Source: newTestSource(image.NewRGBA(image.Rect(0, 0, MaxFramebufferSide+1, 1))), Log: quietLogger(t)})
		if r := waitServe(t, done); !errors.Is(r.err, ErrFramebufferTooLarge) {
			t.Fatalf("Serve of a %dx1 source: %v", MaxFramebufferSide+1, r.err)
		}
	})
	t.Run("server refuses a resize beyond the limit", func(t *testing.T) {
		src := newTestSource(gradient(8, 8))
		c, done := newRFBClient(t, &Server{Source: src, Log: quietLogger(t)})
		c.send(appendSetEncodings(nil, []int32{EncodingRaw, EncodingDesktopSize}))
		c.send(appendUpdateRequest(nil, true, image.Rect(0, 0, 8, 8)))
		src.resize(1, MaxFramebufferSide+1, red)
		if r := waitServe(t, done); !errors.Is(r.err, ErrFramebufferTooLarge) {
			t.Fatalf("Serve after a resize to 1x%d: %v", MaxFramebufferSide+1, r.err)
		}
	})
	t.Run("client refuses a huge ServerInit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := Dial(ctx, Config{VM: "huge", Log: quietLogger(t), DialFunc: func(context.Context) (net.Conn, error) {
			client, server := net.Pipe()
			go hugeServer(server, 10000, 10000)
			return client, nil
		}})
		if !errors.Is(err, ErrFramebufferTooLarge) || !strings.Contains(err.Error(), "10000x10000") {
			t.Fatalf("dial a server announcing 10000x10000: %v", err)
		}
		t.Log(err)
		checkNoGoroutines(t)
	})
}

// hugeServer speaks the server's handshake with a ServerInit of w×h, then
// reads until the client hangs up.
func hugeServer(conn net.Conn, w, h int) {
	defer conn.Close()
	var buf [12]byte
	conn.Write([]byte("RFB 003.008\n"))
	io.ReadFull(conn, buf[:12])
	conn.Write([]byte{1, 1})
	io.ReadFull(conn, buf[:1])
	conn.Write([]byte{0, 0, 0, 0})
	io.ReadFull(conn, buf[:1])
	conn.Write(appendServerInit(nil, image.Pt(w, h), WireFormat, "huge"))
	io.Copy(io.Discard, conn)
}

// TestServeContext: cancelling ctx ends Serve and releases held input.
func TestServeContext(t *testing.T) {
	sink := newTestSink()
	client, server := net.Pipe()
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan serveResult, 1)
	go func() {
		st, err := (&Server{Source: newTestSource(gradient(8, 8)), Input: sink, Log: quietLogger(t)}).Serve(ctx, server)
		done <- serveResult{st, err}
	}()
	c := &rfbClient{t: t, conn: client}
	c.handshake()
	c.send(appendKeyEvent(nil, 0x61, true))
	sink.waitFor(t, 1)
	cancel()
	r := waitServe(t, done)
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Serve after cancel: %v", r.err)
	}
	checkEvents(t, sink.got(), []inputEvent{keyEv(0x61, true), keyEv(0x61, false)})
}

func FuzzReadClientMessage(f *testing.F) {
	f.Add(appendSetPixelFormat(nil, WireFormat))
	f.Add(appendSetEncodings(nil, advertisedEncodings))
	f.Add(appendUpdateRequest(nil, true, image.Rect(1, 2, 3, 4)))
	f.Add(appendKeyEvent(nil, 0x61, true))
	f.Add(appendPointerEvent(nil, 1, 10, 20))
	f.Add(appendExtKeyEvent(nil, 0x61, 0x1e, true))
	f.Add([]byte{msgClientCutText, 0, 0, 0, 0, 0, 0, 2, 'h', 'i'})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m clientMessage
		r := bytes.NewReader(b)
		for r.Len() > 0 {
			if err := readClientMessage(r, &m); err != nil {
				return
			}
		}
	})
}

// TestServerRelaysClient is the takeover path without a VM: a fake QEMU
// (fakeServer), the Client mirroring it, a Server fed by that Client, and
// a second Client as the viewer, whose input reaches the fake QEMU.
func TestServerRelaysClient(t *testing.T) {
	qemu := newFakeServer(t, 160, 100)
	mirror := dialFake(t, qemu)
	viewer, _ := dialServer(t, &Server{Source: clientSource{mirror}, Input: clientInput{mirror}, Log: quietLogger(t)})
	mustMatch(t, viewer.SnapshotRaw(), qemu.snapshot(), "first frame")

	qemu.draw(image.Rect(20, 10, 60, 40), red)
	settle(t, mirror, 0, 5*time.Second)
	waitMirror(t, viewer, qemu.snapshot(), "after a draw")

	must(t, viewer.Pointer(30, 20, 1))
	must(t, viewer.Pointer(30, 20, 0))
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(qemu.inputEvents(), func(e clientEvent) bool {
		return e.kind == "pointer" && e.x == 30 && e.y == 20 && e.buttons == 1
	}) {
		if time.Now().After(deadline) {
			t.Fatalf("the viewer's click never reached QEMU: %+v", qemu.inputEvents())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// clientInput passes a viewer's input to a Client, as web does.
type clientInput struct{ c *Client }

func (i clientInput) Key(down bool, keysym uint32) error { return i.c.Key(keysym, 0, down) }
func (i clientInput) Pointer(x, y int, buttons uint8) error {
	return i.c.Pointer(x, y, buttons)
}
