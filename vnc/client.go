package vnc

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Defaults for Config.
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultWriteTimeout   = 5 * time.Second
	DefaultMinBackoff     = 50 * time.Millisecond
	DefaultMaxBackoff     = 2 * time.Second
)

// fenceRetry is how long a fence waits for its answer before Settle sends
// an extra request. QEMU answers every request at its next refresh tick (at
// most 3 s apart, 30 ms after a wake-up), so this only fires if a request
// was lost, which QEMU 7.2 should never do; the extra request costs later
// fences one refresh tick each.
const fenceRetry = 5 * time.Second

// Config configures a Client. Zero values take the defaults noted.
type Config struct {
	// Socket is the VM's VNC unix socket. Required unless DialFunc is set.
	Socket string
	// VM names the VM in logs and errors.
	VM string
	// DialFunc opens the connection. Default: dial Socket. Tests use it to
	// put a fake server or a tap on the stream.
	DialFunc func(ctx context.Context) (net.Conn, error)
	// ConnectTimeout bounds dialling plus the RFB handshake. Default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// WriteTimeout bounds each client message write; a write that times
	// out ends the connection. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between reconnection
	// attempts, which doubles from MinBackoff. Defaults DefaultMinBackoff
	// and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Log receives structured logs (keys vm, op). Default slog.Default().
	Log *slog.Logger
}

// Validate checks c and fills in defaults.
func (c *Config) Validate() error {
	if c.Socket == "" && c.DialFunc == nil {
		return errors.New("vnc config: Socket is required")
	}
	if c.ConnectTimeout < 0 || c.WriteTimeout < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 {
		return errors.New("vnc config: durations must not be negative")
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.MinBackoff {
		return fmt.Errorf("vnc config: MaxBackoff %v is below MinBackoff %v", c.MaxBackoff, c.MinBackoff)
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.DialFunc == nil {
		socket := c.Socket
		c.DialFunc = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}
	}
	return nil
}

// Stats counts what a Client did.
type Stats struct {
	// Connects counts completed RFB handshakes (1 + reconnections).
	Connects int
	// Updates counts framebuffer updates that answered a request.
	Updates uint64
	// Fences counts fence requests Settle issued.
	Fences uint64
}

// Client is one VM's RFB connection: a live framebuffer mirror and the input
// path. It reconnects by itself when the connection drops. All methods are
// safe for concurrent use.
type Client struct {
	cfg    Config
	log    *slog.Logger
	fb     *mirror
	frames *FrameCache // full frames encoded for Servers showing this client

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu        sync.Mutex
	sess      *session      // live session, nil while reconnecting
	lastErr   error         // why the last session ended or dial failed
	closed    bool          //
	changed   chan struct{} // closed and replaced on every event a waiter may want
	changedAt time.Time     // when an update last changed the picture
	ptr       image.Point   // last pointer position sent
	ptrKnown  bool
	held      map[uint32]bool // keysyms this client holds down on the live session
	stats     Stats

	subMu sync.Mutex
	subs  map[*Subscription]struct{}
}

// Dial connects to the VNC server and returns once the mirror holds a full
// first frame. It retries, with backoff, until ctx ends; the Client keeps
// reconnecting by itself after that. Close it when done.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{
		cfg:     cfg,
		log:     cfg.Log,
		fb:      newMirror(1, 1),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
		subs:    map[*Subscription]struct{}{},
	}
	c.frames = NewFrameCache(c)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	start := time.Now()
	c.log.Debug("vnc dial started", "vm", cfg.VM, "op", "vnc.dial", "socket", cfg.Socket)
	go c.run()
	for {
		c.mu.Lock()
		ready := c.sess != nil && c.sess.answered > 0
		ch, lastErr := c.changed, c.lastErr
		c.mu.Unlock()
		if ready {
			c.log.Debug("vnc dial finished", "vm", cfg.VM, "op", "vnc.dial", "duration", time.Since(start).Round(time.Millisecond))
			return c, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			c.Close()
			err := ctx.Err()
			if lastErr != nil {
				err = errors.Join(err, lastErr)
			}
			return nil, c.errorf("dial", "no first frame after %v: %w", time.Since(start).Round(time.Millisecond), err)
		}
	}
}

// errorf wraps an error with the operation, the VM and the socket.
func (c *Client) errorf(op, format string, args ...any) error {
	return fmt.Errorf("vnc %s vm %s (socket %s): %w", op, c.cfg.VM, c.cfg.Socket, fmt.Errorf(format, args...))
}

// run connects and reconnects until the client is closed. A VM that is
// gone for good keeps it retrying (at MaxBackoff) until Close.
func (c *Client) run() {
	defer close(c.done)
	backoff := c.cfg.MinBackoff
	failures := 0 // consecutive attempts that did not get a first frame
	for n := 1; ; n++ {
		s, err := c.connect(n)
		lost := err == nil
		if err == nil {
			c.attach(s)
			select {
			case <-s.bc.loopDone:
			case <-c.ctx.Done():
				s.fail(ErrClosed)
				<-s.bc.loopDone
			}
			err = s.error()
			c.mu.Lock()
			gotFrame := s.answered > 0
			c.mu.Unlock()
			if gotFrame {
				backoff, failures = c.cfg.MinBackoff, 0
			}
		}
		if c.ctx.Err() != nil {
			c.detach(s, ErrClosed)
			return
		}
		err = fmt.Errorf("attempt %d: %w", n, err)
		c.detach(s, err)
		failures++
		level, msg := slog.LevelDebug, "vnc connect failed, retrying"
		if lost {
			msg = "vnc connection lost, reconnecting"
		}
		if lost || failures == 1 || failures%30 == 0 {
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, msg, "vm", c.cfg.VM, "op", "vnc.connect",
			"socket", c.cfg.Socket, "err", err, "retry_in", backoff, "failures", failures)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

func (c *Client) attach(s *session) {
	c.mu.Lock()
	c.sess = s
	c.lastErr = nil
	c.held = map[uint32]bool{} // QEMU releases a client's keys when it goes
	c.stats.Connects++
	connects := c.stats.Connects
	c.broadcastLocked()
	c.mu.Unlock()
	level := slog.LevelInfo
	if connects == 1 {
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, "vnc connected", "vm", c.cfg.VM, "op", "vnc.connect",
		"socket", c.cfg.Socket, "conn", s.n, "size", c.fb.size())
}

func (c *Client) detach(s *session, err error) {
	c.mu.Lock()
	if s != nil && c.sess == s {
		c.sess = nil
	}
	c.lastErr = err
	c.broadcastLocked()
	c.mu.Unlock()
}

// broadcastLocked wakes everything waiting on c.changed.
func (c *Client) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// afterUpdate runs on the reader after an update was applied: it counts
// answers, wakes waiters, notifies subscribers and, when the update answered
// our request, sends the next one.
func (c *Client) afterUpdate(s *session, eff effect) error {
	c.mu.Lock()
	if eff.response {
		s.answered++
		c.stats.Updates++
	}
	if eff.extKey && !s.extKey {
		s.extKey = true
		c.log.Debug("qemu extended key event acknowledged", "vm", c.cfg.VM, "op", "vnc.connect", "conn", s.n)
	}
	if !eff.Empty() {
		c.changedAt = time.Now()
	}
	wake := s.answered < s.want // a fence is waiting: keep QEMU's timer fast
	c.broadcastLocked()
	answered := s.answered
	c.mu.Unlock()
	if c.log.Enabled(context.Background(), slog.LevelDebug-1) {
		c.log.Log(context.Background(), slog.LevelDebug-1, "update applied", "vm", c.cfg.VM, "op", "vnc.read",
			"response", eff.response, "answered", answered, "rects", len(s.upd.Rects), "damage", eff.Rect)
	}
	if !eff.Empty() {
		c.notify(eff.Damage)
	}
	if !eff.response {
		// QEMU's own message (cursor, resize, acknowledgement): our request
		// is still pending. After a resize QEMU marks the whole new
		// framebuffer dirty, so that request brings all of it.
		return nil
	}
	return s.request(wake)
}

// liveSession returns the current session or why there is none.
func (c *Client) liveSession(op string) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, c.errorf(op, "%w", ErrClosed)
	}
	if c.sess == nil {
		if c.lastErr != nil {
			return nil, c.errorf(op, "%w: %w", ErrDisconnected, c.lastErr)
		}
		return nil, c.errorf(op, "%w", ErrDisconnected)
	}
	return c.sess, nil
}

// Err reports the client's health: nil while connected, ErrClosed after
// Close, otherwise why the last connection ended (wrapping ErrDisconnected)
// while the client reconnects.
func (c *Client) Err() error {
	_, err := c.liveSession("status")
	return err
}

// Stats returns counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Close ends the connection and every goroutine of the client, and closes
// all subscriptions. It returns once they are gone.
func (c *Client) Close() error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	<-c.done
	if !already {
		c.subMu.Lock()
		for s := range c.subs {
			delete(c.subs, s)
			close(s.ch)
		}
		c.subMu.Unlock()
		c.log.Debug("vnc closed", "vm", c.cfg.VM, "op", "vnc.close")
	}
	return nil
}

// Size returns the framebuffer size.
func (c *Client) Size() (w, h int) {
	s := c.fb.size()
	return s.X, s.Y
}

// Snapshot returns a copy of the mirror with the server's cursor image drawn
// at the last pointer position (if both are known). It makes no round trip;
// call Settle first to be sure it shows what was just done.
func (c *Client) Snapshot() *image.RGBA {
	c.mu.Lock()
	p, known := c.ptr, c.ptrKnown
	c.mu.Unlock()
	if !known {
		return c.fb.snapshot(nil)
	}
	return c.fb.snapshot(&p)
}

// SnapshotRaw returns a copy of the mirror without the cursor.
func (c *Client) SnapshotRaw() *image.RGBA { return c.fb.snapshot(nil) }

// FrameVersion returns the mirror's version and size. The version grows
// with every update that changes its pixels or size (not the cursor).
func (c *Client) FrameVersion() (uint64, image.Point) { return c.fb.frameVersion() }

// ReadFrame calls f with the mirror, without the cursor, and its version.
// Updates wait until f returns, so f must be quick; it must neither keep
// nor modify img.
func (c *Client) ReadFrame(f func(img *image.RGBA, version uint64)) { c.fb.readFrame(f) }

// FullFrames returns the cache through which every Server showing this
// client shares encoded full frames.
func (c *Client) FullFrames() *FrameCache { return c.frames }

// Cursor returns a copy of the server's cursor image and its hotspot, or
// nil if the server defined none.
func (c *Client) Cursor() (*image.RGBA, image.Point) { return c.fb.cursorImage() }

// CursorPos returns where the pointer was last sent, or (-1, -1) if no
// pointer event was sent yet.
func (c *Client) CursorPos() (x, y int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ptrKnown {
		return -1, -1
	}
	return c.ptr.X, c.ptr.Y
}

// Pointer moves the absolute pointer to (x, y) with button mask buttons
// (bit 0 left, 1 middle, 2 right, 3/4 wheel up/down, 5/6 wheel left/right).
// A position off the framebuffer is an error wrapping ErrOutOfBounds; it is
// never clamped.
func (c *Client) Pointer(x, y int, buttons uint8) error {
	w, h := c.Size()
	if x < 0 || y < 0 || x >= w || y >= h {
		return c.errorf("pointer", "(%d, %d) is outside the %dx%d framebuffer (0 <= x < %d, 0 <= y < %d): %w",
			x, y, w, h, w, h, ErrOutOfBounds)
	}
	s, err := c.liveSession("pointer")
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf = appendPointerEvent(s.wbuf[:0], buttons, x, y)
	if err := s.writeLocked(s.wbuf); err != nil {
		return c.errorf("pointer", "(%d, %d) buttons %#x: %w", x, y, buttons, err)
	}
	c.mu.Lock()
	c.ptr, c.ptrKnown = image.Pt(x, y), true
	c.mu.Unlock()
	return nil
}

// Key presses (down) or releases one key. keysym is an X keysym; scancode is
// the PC/XT set-1 make code (0xE0-prefixed keys as 0xE0xx) or 0. With a
// scancode QEMU can take, and once QEMU acknowledged the extension, the key
// goes as QEMU's extended key event, which QEMU passes to the guest by
// scancode regardless of keymaps; otherwise as a plain KeyEvent, which QEMU
// maps through its keymap (lower-casing A-Z: press Shift for capitals).
func (c *Client) Key(keysym uint32, scancode uint16, down bool) error {
	s, err := c.liveSession("key")
	if err != nil {
		return err
	}
	c.mu.Lock()
	ext := s.extKey
	c.mu.Unlock()
	keycode, ok := qemuKeycode(scancode)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if ext && ok {
		s.wbuf = appendExtKeyEvent(s.wbuf[:0], keysym, keycode, down)
	} else {
		if scancode != 0 {
			c.log.Debug("key sent by keysym", "vm", c.cfg.VM, "op", "vnc.key", "keysym", keysym,
				"scancode", scancode, "ext_key_acked", ext)
		}
		s.wbuf = appendKeyEvent(s.wbuf[:0], keysym, down)
	}
	if err := s.writeLocked(s.wbuf); err != nil {
		return c.errorf("key", "keysym %#x scancode %#x down=%v: %w", keysym, scancode, down, err)
	}
	c.mu.Lock()
	if down {
		c.held[keysym] = true
	} else {
		delete(c.held, keysym)
	}
	c.mu.Unlock()
	return nil
}

// wakeKeysyms are keys whose release wakes QEMU's refresh timer. QEMU drops
// the release of a key that is not down (qkbd_state_key_event), so the guest
// sees no event; a key this client holds is skipped.
var wakeKeysyms = []uint32{0xff14 /* Scroll_Lock */, 0xff13 /* Pause */, 0xffc8 /* F11 */}

func (c *Client) wakeKeysym() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range wakeKeysyms {
		if !c.held[k] {
			return k
		}
	}
	return wakeKeysyms[0]
}

// awaitFence makes sure the mirror holds everything the server showed after
// this call began: it sets a fence and waits for its answer, setting a new
// one after a reconnection. It returns when the fence was set.
func (c *Client) awaitFence(ctx context.Context) (time.Time, error) {
	for {
		c.mu.Lock()
		s, closed, ch := c.sess, c.closed, c.changed
		c.mu.Unlock()
		if closed {
			return time.Time{}, ErrClosed
		}
		if s == nil {
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
		setAt := time.Now()
		target, err := s.fence()
		if err != nil {
			// The session is ending; wait for the next one.
			select {
			case <-s.bc.loopDone:
				continue
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
		retry := time.NewTimer(fenceRetry)
	wait:
		for {
			c.mu.Lock()
			answered, live, ch := s.answered, c.sess == s, c.changed
			c.mu.Unlock()
			if answered >= target {
				retry.Stop()
				return setAt, nil
			}
			if !live {
				break wait
			}
			select {
			case <-ch:
			case <-retry.C:
				c.log.Warn("fence unanswered, sending an extra update request", "vm", c.cfg.VM, "op", "vnc.settle",
					"target", target, "answered", answered, "after", fenceRetry)
				if err := s.request(true); err != nil {
					break wait
				}
				retry.Reset(fenceRetry)
			case <-ctx.Done():
				retry.Stop()
				return time.Time{}, ctx.Err()
			}
		}
		retry.Stop()
	}
}

// Settle returns once the mirror reflects everything sent before the call
// (a fence round trip completed: see the package documentation) and then
// showed no change for quiet, or once maxWait has passed; it returns how
// long it waited. With quiet 0 it returns right after the fence. If maxWait
// passes before the first fence completes (no connection, or a server that
// stopped answering) the mirror is not known to be current and the error
// wraps ErrStale; if it passes while the picture keeps changing, Settle
// returns nil (the mirror is current, just not quiet) and a duration of at
// least maxWait. A cancelled ctx returns its error.
func (c *Client) Settle(ctx context.Context, quiet, maxWait time.Duration) (time.Duration, error) {
	start := time.Now()
	c.log.Debug("settle started", "vm", c.cfg.VM, "op", "vnc.settle", "quiet", quiet, "max", maxWait)
	mctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	fail := func(err error) (time.Duration, error) {
		waited := time.Since(start)
		switch {
		case errors.Is(err, ErrClosed):
			return waited, c.errorf("settle", "%w", ErrClosed)
		case ctx.Err() != nil:
			return waited, c.errorf("settle", "%w", ctx.Err())
		}
		c.mu.Lock()
		lastErr := c.lastErr
		c.mu.Unlock()
		if lastErr != nil {
			return waited, c.errorf("settle", "no fresh update within %v: %w (last connection error: %w)", maxWait, ErrStale, lastErr)
		}
		return waited, c.errorf("settle", "no fresh update within %v: %w", maxWait, ErrStale)
	}
	first, err := c.awaitFence(mctx)
	if err != nil {
		return fail(err)
	}
	fences := 1
	last := first
	for quiet > 0 {
		c.mu.Lock()
		from := c.changedAt
		c.mu.Unlock()
		if from.Before(first) {
			from = first
		}
		need := from.Add(quiet)
		if !last.Before(need) {
			break // a fence sent quiet after the last change saw nothing new
		}
		t := time.NewTimer(time.Until(need))
		select {
		case <-t.C:
		case <-mctx.Done():
			t.Stop()
		}
		if mctx.Err() != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			break // max reached: current as of the last fence, but not quiet
		}
		at, err := c.awaitFence(mctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return fail(err)
			}
			break
		}
		last = at
		fences++
	}
	waited := time.Since(start)
	c.log.Debug("settle finished", "vm", c.cfg.VM, "op", "vnc.settle", "duration", waited.Round(time.Microsecond), "fences", fences)
	return waited, nil
}

// Subscription delivers framebuffer changes. C holds at most one pending
// Damage: a change that arrives while one is pending is merged into it, so
// a slow reader gets the union of what it missed and the client never
// waits for it. C is closed by Close or when the Client closes.
type Subscription struct {
	C  <-chan Damage
	ch chan Damage
	c  *Client
}

// Subscribe starts a subscription to framebuffer changes.
func (c *Client) Subscribe() *Subscription {
	ch := make(chan Damage, 1)
	s := &Subscription{C: ch, ch: ch, c: c}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		close(ch)
		return s
	}
	c.subs[s] = struct{}{}
	return s
}

// Close ends the subscription and closes C.
func (s *Subscription) Close() {
	s.c.subMu.Lock()
	defer s.c.subMu.Unlock()
	if _, ok := s.c.subs[s]; ok {
		delete(s.c.subs, s)
		close(s.ch)
	}
}

// notify offers d to every subscriber without blocking.
func (c *Client) notify(d Damage) {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	for s := range c.subs {
		select {
		case s.ch <- d:
			continue
		default:
		}
		merged := d
		select {
		case old := <-s.ch:
			merged = old.union(d)
		default:
		}
		select {
		case s.ch <- merged:
		default: // cannot happen: this is the only sender and the slot was just emptied
		}
	}
}
