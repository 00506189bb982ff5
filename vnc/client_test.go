package vnc

import (
	"context"
	"errors"
	"image"
	"image/color"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	red   = color.RGBA{0xff, 0x30, 0x30, 0xff}
	green = color.RGBA{0x30, 0xe0, 0x30, 0xff}
)

// dialFake connects a Client to s and closes it at the end of the test,
// checking that nothing of the client is left running.
func dialFake(t *testing.T, s *fakeServer) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{Socket: s.path, VM: "fake", Log: quietLogger(t)})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		checkNoGoroutines(t)
	})
	return c
}

// quietLogger sends client logs to the test log.
func quietLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func settle(t *testing.T, c *Client, quiet, max time.Duration) time.Duration {
	t.Helper()
	d, err := c.Settle(context.Background(), quiet, max)
	if err != nil {
		t.Fatalf("settle: %v", err)
	}
	return d
}

func mustMatch(t *testing.T, got, want *image.RGBA, what string) {
	t.Helper()
	if ok, diff := imagesEqual(got, want); !ok {
		t.Fatalf("%s: %s", what, diff)
	}
}

func TestClientMirrorsServer(t *testing.T) {
	s := newFakeServer(t, 320, 200)
	s.draw(image.Rect(10, 10, 20, 20), red)
	c := dialFake(t, s)
	if w, h := c.Size(); w != 320 || h != 200 {
		t.Fatalf("size %dx%d", w, h)
	}
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "first frame")
	if err := c.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	s.draw(image.Rect(100, 50, 130, 90), green)
	settle(t, c, 0, 2*time.Second)
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "after a change")
	// Snapshot is a copy.
	snap := c.Snapshot()
	snap.Pix[0] = 1
	if c.Snapshot().Pix[0] == 1 {
		t.Error("Snapshot returned the mirror itself")
	}
	if x, y := c.CursorPos(); x != -1 || y != -1 {
		t.Errorf("CursorPos before any pointer event = (%d, %d), want (-1, -1)", x, y)
	}
}

func TestClientInput(t *testing.T) {
	s := newFakeServer(t, 320, 200)
	c := dialFake(t, s)
	settle(t, c, 0, 2*time.Second) // the extended key event acknowledgement has arrived

	for _, p := range []image.Point{{-1, 0}, {0, -1}, {320, 0}, {0, 200}, {1000, 1000}} {
		err := c.Pointer(p.X, p.Y, 1)
		if !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("pointer at %v: %v, want ErrOutOfBounds", p, err)
		} else if !strings.Contains(err.Error(), "320x200") {
			t.Errorf("pointer error does not name the bounds: %v", err)
		}
	}
	if err := c.Pointer(319, 199, 0b101); err != nil {
		t.Fatal(err)
	}
	if x, y := c.CursorPos(); x != 319 || y != 199 {
		t.Errorf("CursorPos (%d, %d)", x, y)
	}
	keys := []struct {
		sym  uint32
		code uint16
	}{
		{0x61, 0x1e},     // a: plain scancode
		{0xffe4, 0xe01d}, // Control_R: 0xE0-prefixed, key number 0x9d
		{0xff52, 0xe048}, // Up: 0xc8
		{0xff6b, 0xe11d}, // Break (E1-prefixed): no key number, by keysym
		{0x62, 0},        // b: no scancode, by keysym
	}
	for _, k := range keys {
		if err := c.Key(k.sym, k.code, true); err != nil {
			t.Fatal(err)
		}
		if err := c.Key(k.sym, k.code, false); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, c, 0, 2*time.Second) // the server has read everything sent before
	var got []clientEvent
	for _, ev := range s.inputEvents() {
		if ev.kind == "key" && !ev.down && slices.Contains(wakeKeysyms, ev.keysym) {
			continue // Settle's wake-up
		}
		got = append(got, ev)
	}
	want := []clientEvent{
		{kind: "pointer", x: 319, y: 199, buttons: 0b101},
		{kind: "extkey", down: true, keysym: 0x61, keycode: 0x1e}, {kind: "extkey", keysym: 0x61, keycode: 0x1e},
		{kind: "extkey", down: true, keysym: 0xffe4, keycode: 0x9d}, {kind: "extkey", keysym: 0xffe4, keycode: 0x9d},
		{kind: "extkey", down: true, keysym: 0xff52, keycode: 0xc8}, {kind: "extkey", keysym: 0xff52, keycode: 0xc8},
		{kind: "key", down: true, keysym: 0xff6b}, {kind: "key", keysym: 0xff6b},
		{kind: "key", down: true, keysym: 0x62}, {kind: "key", keysym: 0x62},
	}
	if !slices.Equal(got, want) {
		t.Errorf("server got\n%+v\nwant\n%+v", got, want)
	}
}

func TestClientKeyWithoutExtendedKeyEvent(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	s.set(func(s *fakeServer) { s.extKey = false })
	c := dialFake(t, s)
	c.Key(0x61, 0x1e, true)
	c.Key(0x61, 0x1e, false)
	settle(t, c, 0, 2*time.Second)
	evs := s.inputEvents()
	if len(evs) < 2 || evs[0] != (clientEvent{kind: "key", down: true, keysym: 0x61}) {
		t.Errorf("without the acknowledgement keys must go as plain key events; server got %+v", evs)
	}
}

// TestClientWritesSerialised hammers the writers from many goroutines while
// the reader requests updates; the fake server fails on a torn message.
func TestClientWritesSerialised(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if g%2 == 0 {
					c.Pointer(i%64, g, uint8(i%2))
				} else {
					c.Key(0x61+uint32(g), 0x1e, i%2 == 0)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			c.Settle(context.Background(), 0, time.Second)
		}
	}()
	wg.Wait()
	settle(t, c, 0, 2*time.Second)
	if err := c.Err(); err != nil {
		t.Fatalf("connection broke: %v", err)
	}
	if got := len(s.inputEvents()); got < 1600 {
		t.Errorf("server parsed %d input events, want at least 1600", got)
	}
	if st := c.Stats(); st.Connects != 1 {
		t.Errorf("reconnected: %+v", st)
	}
}

// TestSettleWakesServer: with the server's refresh timer backed off, a
// change made before Settle shows after it, fast, because Settle's wake-up
// resets the timer.
func TestSettleWakesServer(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	s.set(func(s *fakeServer) { s.interval = 3 * time.Second })
	time.Sleep(50 * time.Millisecond)
	s.draw(image.Rect(0, 0, 8, 8), red)
	d := settle(t, c, 0, 5*time.Second)
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "after settle")
	if d > time.Second {
		t.Errorf("settle took %v: the wake-up did not reset the server's timer", d)
	}
	t.Logf("settle with a 3 s refresh interval: %v", d)
}

// TestSettleSeesDelayedReaction: the server reacts to a click 60 ms later;
// Settle with a quiet period longer than that shows the reaction.
func TestSettleSeesDelayedReaction(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	s.set(func(s *fakeServer) {
		s.interval = 300 * time.Millisecond
		s.onInput = func(ev clientEvent) {
			if ev.kind == "pointer" && ev.buttons&1 != 0 {
				time.AfterFunc(60*time.Millisecond, func() {
					s.draw(image.Rect(ev.x-2, ev.y-2, ev.x+3, ev.y+3), red)
				})
			}
		}
	})
	for _, p := range []image.Point{{10, 10}, {40, 30}, {63, 47}} {
		c.Pointer(p.X, p.Y, 1)
		c.Pointer(p.X, p.Y, 0)
		d := settle(t, c, 150*time.Millisecond, 3*time.Second)
		snap := c.Snapshot()
		if got := snap.RGBAAt(p.X, p.Y); got != red {
			t.Fatalf("click at %v: pixel %v after Settle (%v), want the marker", p, got, d)
		}
		if d < 150*time.Millisecond {
			t.Errorf("settle returned after %v, before its quiet period", d)
		}
	}
}

// TestSettleQuiet: Settle waits out a burst of changes, and returns at max
// with no error while the picture keeps changing.
func TestSettleQuiet(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	stop := make(chan struct{})
	done := make(chan struct{})
	animate := func(n int) {
		defer close(done)
		for i := 0; n < 0 || i < n; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			col := red
			if i%2 == 1 {
				col = green
			}
			s.draw(image.Rect(0, 0, 4, 4), col)
		}
	}
	start := time.Now()
	go animate(20) // about 300 ms of changes
	settle(t, c, 100*time.Millisecond, 5*time.Second)
	<-done
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("settle returned after %v, during the burst", el)
	}
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "after the burst")

	done = make(chan struct{})
	go animate(-1)
	d, err := c.Settle(context.Background(), 100*time.Millisecond, 400*time.Millisecond)
	close(stop)
	<-done
	if err != nil {
		t.Errorf("settle on an endless animation: %v, want nil at max", err)
	}
	if d < 400*time.Millisecond || d > 1500*time.Millisecond {
		t.Errorf("settle on an endless animation took %v, want about its max of 400ms", d)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Settle(ctx, 0, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("settle with a cancelled context: %v", err)
	}
}

// TestSettleStale: a server that stops answering makes Settle fail with
// ErrStale at max.
func TestSettleStale(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	s.set(func(s *fakeServer) { s.frozen = true })
	d, err := c.Settle(context.Background(), 0, 300*time.Millisecond)
	if !errors.Is(err, ErrStale) {
		t.Fatalf("settle on a frozen server: %v, want ErrStale", err)
	}
	if d < 300*time.Millisecond {
		t.Errorf("returned after %v, before max", d)
	}
	s.set(func(s *fakeServer) { s.frozen = false })
	settle(t, c, 0, 2*time.Second)
}

func TestClientReconnects(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	sub := c.Subscribe()
	defer sub.Close()

	// The server goes away: input fails, Err says why, Settle waits.
	s.stopListening()
	deadline := time.Now().Add(2 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Err(); !errors.Is(err, ErrDisconnected) {
		t.Fatalf("Err after the server went away: %v", err)
	}
	if err := c.Pointer(1, 1, 0); !errors.Is(err, ErrDisconnected) {
		t.Errorf("pointer while disconnected: %v", err)
	}
	if _, err := c.Settle(context.Background(), 0, 100*time.Millisecond); !errors.Is(err, ErrStale) {
		t.Errorf("settle while disconnected: %v", err)
	}
	// It comes back with a changed screen: the client reconnects by itself
	// and Settle shows the new picture.
	s.draw(image.Rect(5, 5, 25, 25), green)
	s.listen()
	settle(t, c, 0, 5*time.Second)
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "after reconnecting")
	if err := c.Err(); err != nil {
		t.Errorf("Err after reconnecting: %v", err)
	}
	if st := c.Stats(); st.Connects < 2 {
		t.Errorf("stats %+v, want a second connect", st)
	}
	// Dropped connections too.
	s.dropConns()
	s.draw(image.Rect(30, 30, 40, 40), red)
	settle(t, c, 0, 5*time.Second)
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "after a dropped connection")
	select {
	case d := <-sub.C:
		if d.Empty() {
			t.Error("empty damage delivered")
		}
	default:
		t.Error("no damage delivered to the subscriber")
	}
}

// TestUnsupportedEncodingEndsConnection: a rectangle in an encoding the
// client did not advertise ends the connection with an error naming it,
// never a hang.
func TestUnsupportedEncodingEndsConnection(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	s.set(func(s *fakeServer) { s.ln.Close(); s.ln = nil }) // no reconnecting
	s.sendAll(append([]byte{msgFramebufferUpdate, 0, 0, 1}, rectHeader(0, 0, 4, 4, EncodingZRLE)...))
	deadline := time.Now().Add(2 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	err := c.Err()
	if !errors.Is(err, ErrUnsupportedEncoding) || !errors.Is(err, ErrDisconnected) || !strings.Contains(err.Error(), "ZRLE") {
		t.Fatalf("Err after a ZRLE rectangle: %v", err)
	}
	t.Logf("%v", err)
}

func TestUnknownServerMessage(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	s.set(func(s *fakeServer) { s.ln.Close(); s.ln = nil })
	s.sendAll([]byte{2, 3, 0, 0, 0, 0, 0, 0, 2, 'h', 'i', 77}) // bell, cut text "hi", then type 77
	deadline := time.Now().Add(2 * time.Second)
	for c.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Err(); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "type 77") {
		t.Fatalf("Err after message type 77: %v", err)
	}
}

func TestClientDesktopSize(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	sub := c.Subscribe()
	defer sub.Close()
	s.resize(100, 80, green)
	settle(t, c, 0, 2*time.Second)
	if w, h := c.Size(); w != 100 || h != 80 {
		t.Fatalf("size after DesktopSize %dx%d", w, h)
	}
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "after resize")
	var d Damage
	for more := true; more; {
		select {
		case x := <-sub.C:
			d = d.union(x)
		default:
			more = false
		}
	}
	if !d.Resized || d.Rect != image.Rect(0, 0, 100, 80) {
		t.Errorf("damage after resize %+v", d)
	}
	if err := c.Pointer(99, 79, 0); err != nil {
		t.Errorf("pointer inside the new size: %v", err)
	}
}

func TestClientCursor(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	// 2x2 cursor, hotspot (1,1), top-left pixel transparent.
	cur := rectHeader(1, 1, 2, 2, EncodingCursor)
	cur = append(cur, wirePixels(4, [3]byte{0xff, 0xff, 0xff})...)
	cur = append(cur, 0x40, 0xc0)
	s.sendAll(append([]byte{msgFramebufferUpdate, 0, 0, 1}, cur...))
	deadline := time.Now().Add(2 * time.Second)
	for img, _ := c.Cursor(); img == nil && time.Now().Before(deadline); img, _ = c.Cursor() {
		time.Sleep(5 * time.Millisecond)
	}
	if img, hot := c.Cursor(); img == nil || hot != image.Pt(1, 1) {
		t.Fatalf("cursor %v hotspot %v", img, hot)
	}
	if snap := c.Snapshot(); snap.RGBAAt(0, 0) != serverBackground {
		t.Error("cursor drawn before any pointer event")
	}
	c.Pointer(10, 10, 0)
	snap := c.Snapshot()
	white := color.RGBA{0xff, 0xff, 0xff, 0xff}
	for _, p := range []image.Point{{10, 9}, {9, 10}, {10, 10}} {
		if snap.RGBAAt(p.X, p.Y) != white {
			t.Errorf("cursor pixel at %v = %v", p, snap.RGBAAt(p.X, p.Y))
		}
	}
	if snap.RGBAAt(9, 9) != serverBackground {
		t.Errorf("transparent cursor pixel drawn at (9,9)")
	}
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "raw snapshot with a cursor defined")
}

// TestSubscriberNeverStallsReader: a subscriber that never reads does not
// hold up updates, and gets the union of what it missed.
func TestSubscriberNeverStallsReader(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	sub := c.Subscribe()
	for i := range 30 {
		s.draw(image.Rect(i, i, i+1, i+1), red)
		settle(t, c, 0, 2*time.Second)
	}
	mustMatch(t, c.SnapshotRaw(), s.snapshot(), "with a stalled subscriber")
	d := <-sub.C
	if !image.Rect(0, 0, 30, 30).In(d.Rect) {
		t.Errorf("merged damage %v does not cover all changes", d.Rect)
	}
	sub.Close()
	if _, ok := <-sub.C; ok {
		t.Error("channel open after Close")
	}
	sub.Close() // twice is fine
}

func TestDialFailsAfterContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, Config{Socket: filepath.Join(t.TempDir(), "none.sock"), VM: "ghost", Log: quietLogger(t)})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "none.sock") || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("dial to a missing socket: %v", err)
	}
	t.Logf("%v", err)
	checkNoGoroutines(t)
}

// TestDialHandshakeTimeout: a server that accepts but never speaks.
func TestDialHandshakeTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mute.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = Dial(ctx, Config{Socket: path, ConnectTimeout: 100 * time.Millisecond, Log: quietLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("dial to a mute server: %v", err)
	}
	checkNoGoroutines(t)
}

func TestClientClose(t *testing.T) {
	s := newFakeServer(t, 64, 48)
	c := dialFake(t, s)
	sub := c.Subscribe()
	c.Close()
	c.Close()
	// A damage the server sent before Close may wait in the channel's
	// buffer; after it the channel must be closed.
	timeout := time.After(5 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-sub.C:
		case <-timeout:
			t.Fatal("subscription open after Close")
		}
	}
	if err := c.Err(); !errors.Is(err, ErrClosed) {
		t.Errorf("Err after Close: %v", err)
	}
	if err := c.Pointer(0, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Pointer after Close: %v", err)
	}
	if _, err := c.Settle(context.Background(), 0, time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("Settle after Close: %v", err)
	}
	if _, ok := <-c.Subscribe().C; ok {
		t.Error("subscription after Close is open")
	}
	checkNoGoroutines(t)
}

func TestConfigValidate(t *testing.T) {
	var c Config
	if err := c.Validate(); err == nil {
		t.Error("empty config validated")
	}
	c = Config{Socket: "/x", MinBackoff: time.Second, MaxBackoff: time.Millisecond}
	if err := c.Validate(); err == nil {
		t.Error("MaxBackoff below MinBackoff validated")
	}
	c = Config{Socket: "/x"}
	if err := c.Validate(); err != nil || c.WriteTimeout != DefaultWriteTimeout || c.DialFunc == nil || c.Log == nil {
		t.Errorf("defaults: %v %+v", err, c)
	}
}
