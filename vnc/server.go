package vnc

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Defaults for Server.
const (
	// DefaultHandshakeTimeout bounds the RFB handshake a viewer must finish
	// (version, security, ClientInit) before it is dropped.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultRevokeCheck is how often a Server asks InputAllowed again
	// while its client holds a key or button, so that input revoked while
	// the client sends nothing is still released.
	DefaultRevokeCheck = 250 * time.Millisecond
	// DefaultDesktopName is the desktop name in ServerInit.
	DefaultDesktopName = "deskfarm"
)

// maxBandPixels bounds the pixels of one raw rectangle the Server writes
// (16 MiB at 32 bpp): a larger region goes as several rectangles of whole
// rows, each written on its own, so a viewer of a large framebuffer never
// costs one allocation of the whole frame.
const maxBandPixels = 1 << 22

// FrameSource is what a Server shows: the framebuffer and its changes.
// *Client provides both (SnapshotRaw, and Subscribe for Damage).
type FrameSource interface {
	// SnapshotRaw returns a copy of the framebuffer, origin (0, 0). The
	// Server does not modify it.
	SnapshotRaw() *image.RGBA
	// Damage subscribes to framebuffer changes. The channel closes when
	// the source does; cancel ends the subscription.
	Damage() (c <-chan Damage, cancel func())
}

// InputSink receives a viewer's input.
type InputSink interface {
	// Key presses (down) or releases an X keysym.
	Key(down bool, keysym uint32) error
	// Pointer moves the absolute pointer with button mask buttons (RFB's:
	// bit 0 left, 1 middle, 2 right, 3-6 wheel). An error wrapping
	// ErrOutOfBounds is not logged: viewers send positions off a
	// framebuffer that just shrank.
	Pointer(x, y int, buttons uint8) error
}

// ServerConn is the byte stream a Server speaks RFB on; a net.Conn is one.
// The Server writes whole messages per Write (one FramebufferUpdate, or
// one band of a large one), which an adapter may map to one websocket
// message each.
type ServerConn interface {
	io.ReadWriteCloser
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// Server is an RFB 3.8 server for viewers (noVNC, or this package's
// Client): it shows a FrameSource and passes input to an InputSink while
// InputAllowed says so. It announces security type None: whoever hands it
// a connection has authorised it. It sends raw rectangles of the damaged
// region in the pixel format the viewer asks for (32 bpp true colour with
// 8-bit channels), and DesktopSize when the framebuffer changes size.
//
// Input discipline: key, pointer and QEMU messages are always read; while
// input is not allowed they are dropped. The Server tracks the keys and
// buttons its viewer holds down and releases them all (key-ups and a
// pointer event with no buttons, sent to the InputSink) when the
// connection ends or InputAllowed turns false, so a viewer that vanishes
// mid-drag or loses control mid-chord leaves nothing held in the guest.
//
// The fields configure every connection; Serve may run concurrently on
// many connections and does not modify them.
type Server struct {
	// Source is the framebuffer shown. Required.
	Source FrameSource
	// Input receives the viewer's key and pointer events. Nil: view only.
	Input InputSink
	// InputAllowed is asked before each key or pointer event is passed to
	// Input (and periodically while the viewer holds a key or button);
	// false drops the event and releases what the viewer holds. Nil allows
	// all input.
	InputAllowed func() bool
	// Name is the desktop name in ServerInit. Default DefaultDesktopName.
	Name string
	// HandshakeTimeout bounds the handshake. Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds each write; a viewer that cannot take an update
	// in this time is dropped. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// RevokeCheck is how often InputAllowed is asked while the viewer holds
	// input. Default DefaultRevokeCheck.
	RevokeCheck time.Duration
	// VM names the VM in logs and errors.
	VM string
	// Log receives structured logs (keys vm, op). Default slog.Default().
	Log *slog.Logger
}

// ServeStats counts what one connection did.
type ServeStats struct {
	// Updates counts FramebufferUpdates sent.
	Updates int
	// Forwarded counts key and pointer events passed to Input.
	Forwarded int
	// Dropped counts input messages read and dropped: input not allowed,
	// or a QEMU extended key event (never forwarded: this server does not
	// offer the extension).
	Dropped int
	// Released counts keys and pointer-button masks released for the
	// viewer at revocation or disconnection.
	Released int
}

// Serve runs the RFB server on conn until the viewer goes away, ctx ends,
// the source closes or the viewer breaks the protocol. It closes conn, and
// returns only after its last call to Input. A viewer that hangs up (end of
// stream between messages, or a reset) ends it with a nil error; a
// handshake not finished in time wraps ErrHandshakeTimeout; a framebuffer
// beyond MaxFramebufferSide wraps ErrFramebufferTooLarge; a cancelled ctx
// returns its error.
func (s *Server) Serve(ctx context.Context, conn ServerConn) (ServeStats, error) {
	c := &serverConn{srv: s, conn: conn, log: s.Log, held: map[uint32]bool{}, wake: make(chan struct{}, 1)}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.writeTimeout = orDefault(s.WriteTimeout, DefaultWriteTimeout)
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // unblocks reads and writes
	defer stop()

	err := c.serve(ctx)
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		err = fmt.Errorf("rfb server for vm %s: %w", s.VM, err)
	}
	return c.stats, err
}

func orDefault(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}

// serverConn is one viewer's connection.
type serverConn struct {
	srv          *Server
	conn         ServerConn
	log          *slog.Logger
	writeTimeout time.Duration
	wbuf         []byte      // main loop only
	frames       *FrameCache // the source's shared full frames, or nil

	mu        sync.Mutex // guards the update state, set by the reader
	enc       encoder
	desktopSz bool            // the viewer takes DesktopSize
	want      bool            // an update request is pending
	damage    image.Rectangle // to send: changed since the last update, plus regions asked for in full
	size      image.Point     // the size the viewer knows
	wake      chan struct{}   // a request arrived

	inMu    sync.Mutex // serialises Input calls and guards the fields below
	held    map[uint32]bool
	buttons uint8
	ptr     image.Point
	stats   ServeStats // Forwarded, Dropped, Released under inMu; Updates main loop only
}

func (c *serverConn) serve(ctx context.Context) error {
	damage, cancel := c.srv.Source.Damage()
	defer cancel()
	if sh, ok := c.srv.Source.(SharedFrameSource); ok && sh.FullFrames() != nil {
		c.frames = sh.FullFrames()
		_, c.size = c.frames.src.FrameVersion()
	} else {
		c.size = c.srv.Source.SnapshotRaw().Rect.Size()
	}
	if err := checkFramebufferSize(c.size.X, c.size.Y); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	enc, err := newEncoder(WireFormat)
	if err != nil {
		return err
	}
	c.enc = enc
	if err := c.handshake(); err != nil {
		return err
	}

	readErr := make(chan error, 1)
	go func() { readErr <- c.readLoop() }()
	defer func() {
		// No Input call may follow Serve: stop the reader, then release.
		c.conn.Close()
		if readErr != nil {
			<-readErr
		}
		c.releaseAll("disconnect")
	}()
	revoke := time.NewTicker(orDefault(c.srv.RevokeCheck, DefaultRevokeCheck))
	defer revoke.Stop()
	for {
		select {
		case err := <-readErr:
			readErr = nil
			if viewerGone(err) {
				return nil
			}
			return err
		case d, ok := <-damage:
			if !ok {
				return fmt.Errorf("frame source: %w", ErrClosed)
			}
			c.mu.Lock()
			c.damage = c.damage.Union(d.Rect)
			c.mu.Unlock()
		case <-c.wake:
		case <-revoke.C:
			c.checkRevoked()
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := c.maybeUpdate(); err != nil {
			// A write fails when the viewer hangs up mid-update; if the
			// reader saw it hang up, that is the clean end it is.
			c.conn.Close()
			rerr := <-readErr
			readErr = nil
			if viewerGone(err) || viewerGone(rerr) {
				return nil
			}
			return err
		}
	}
}

// viewerGone reports an error that means the viewer hung up: the end of
// its stream between messages, or a reset (a viewer closing with updates
// still unread in its socket resets it, on unix sockets as on TCP).
func viewerGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// write sends b as one Write with the write deadline.
func (c *serverConn) write(b []byte) error {
	c.conn.SetWriteDeadline(time.Now().Add(c.writeTimeout)) //nolint:errcheck // fails only on a closed conn, which Write reports
	_, err := c.conn.Write(b)
	return err
}

// handshake runs the server side of the RFB 3.8 handshake with security
// type None (RFC 6143 sections 7.1 to 7.3), within HandshakeTimeout.
func (c *serverConn) handshake() error {
	timeout := orDefault(c.srv.HandshakeTimeout, DefaultHandshakeTimeout)
	deadline := time.Now().Add(timeout)
	c.conn.SetReadDeadline(deadline)  //nolint:errcheck // a conn without deadlines still works, unbounded
	c.conn.SetWriteDeadline(deadline) //nolint:errcheck // as above
	err := c.handshakeSteps()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline) {
			return fmt.Errorf("rfb handshake: %w (%v): %w", ErrHandshakeTimeout, timeout, err)
		}
		return fmt.Errorf("rfb handshake: %w", err)
	}
	c.conn.SetReadDeadline(time.Time{}) //nolint:errcheck // as above
	return nil
}

func (c *serverConn) handshakeSteps() error {
	if _, err := c.conn.Write([]byte("RFB 003.008\n")); err != nil {
		return fmt.Errorf("write version: %w", err)
	}
	var ver [12]byte
	if err := readFull(c.conn, ver[:]); err != nil {
		return fmt.Errorf("read client version: %w", err)
	}
	major, errMaj := strconv.Atoi(string(ver[4:7]))
	minor, errMin := strconv.Atoi(string(ver[8:11]))
	if string(ver[:4]) != "RFB " || ver[7] != '.' || ver[11] != '\n' || errMaj != nil || errMin != nil || major != 3 || minor < 8 {
		// 3.3 and 3.7 negotiate security differently; every viewer in use
		// speaks 3.8.
		return fmt.Errorf("client version %q: %w: this server speaks RFB 3.8", ver, ErrProtocol)
	}
	// Security: one type, None. Authorisation happened before the
	// connection reached the server.
	if _, err := c.conn.Write([]byte{1, 1}); err != nil {
		return fmt.Errorf("write security types: %w", err)
	}
	var b [1]byte
	if err := readFull(c.conn, b[:]); err != nil {
		return fmt.Errorf("read security type: %w", err)
	}
	if b[0] != 1 {
		return fmt.Errorf("client chose security type %d, offered 1 (None): %w", b[0], ErrProtocol)
	}
	if _, err := c.conn.Write([]byte{0, 0, 0, 0}); err != nil { // SecurityResult OK
		return fmt.Errorf("write security result: %w", err)
	}
	if err := readFull(c.conn, b[:]); err != nil { // ClientInit shared flag: every viewer shares
		return fmt.Errorf("read ClientInit: %w", err)
	}
	name := c.srv.Name
	if name == "" {
		name = DefaultDesktopName
	}
	if _, err := c.conn.Write(appendServerInit(nil, c.size, WireFormat, name)); err != nil {
		return fmt.Errorf("write ServerInit: %w", err)
	}
	return nil
}

// readLoop parses client messages until an error; io.EOF at a message
// boundary is the viewer hanging up.
func (c *serverConn) readLoop() error {
	var m clientMessage
	for {
		if err := readClientMessage(c.conn, &m); err != nil {
			return err
		}
		switch m.Type {
		case msgSetPixelFormat:
			enc, err := newEncoder(m.PixelFormat)
			if err != nil {
				return fmt.Errorf("set pixel format: %w", err)
			}
			c.mu.Lock()
			c.enc = enc
			c.mu.Unlock()
		case msgSetEncodings:
			ds := slices.Contains(m.Encodings, EncodingDesktopSize)
			c.mu.Lock()
			c.desktopSz = ds
			c.mu.Unlock()
		case msgUpdateRequest:
			c.mu.Lock()
			c.want = true
			if !m.Incremental { // the whole region now
				c.damage = c.damage.Union(m.Rect)
			}
			c.mu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
		case msgKeyEvent:
			c.key(m.Down, m.Keysym)
		case msgPointerEvent:
			c.pointer(m.X, m.Y, m.Buttons)
		case msgQEMU:
			c.inMu.Lock()
			c.stats.Dropped++
			c.inMu.Unlock()
		case msgClientCutText:
			// Read and dropped: the guest clipboard is not connected.
		}
	}
}

// allowedLocked asks the policy; if input is no longer allowed, what the
// viewer holds is released. Called with inMu held.
func (c *serverConn) allowedLocked() bool {
	if c.srv.Input == nil {
		return false
	}
	if c.srv.InputAllowed == nil || c.srv.InputAllowed() {
		return true
	}
	c.releaseLocked("input revoked")
	return false
}

func (c *serverConn) key(down bool, keysym uint32) {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if !c.allowedLocked() {
		c.stats.Dropped++
		return
	}
	c.stats.Forwarded++
	if err := c.srv.Input.Key(down, keysym); err != nil {
		c.log.Warn("forward key", "vm", c.srv.VM, "op", "vnc.serve", "keysym", keysym, "down", down, "err", err)
		if down {
			return // not pressed in the guest
		}
	}
	if down {
		c.held[keysym] = true
	} else {
		delete(c.held, keysym)
	}
}

func (c *serverConn) pointer(x, y int, buttons uint8) {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if !c.allowedLocked() {
		c.stats.Dropped++
		return
	}
	c.stats.Forwarded++
	if err := c.srv.Input.Pointer(x, y, buttons); err != nil {
		if !errors.Is(err, ErrOutOfBounds) {
			c.log.Warn("forward pointer", "vm", c.srv.VM, "op", "vnc.serve", "x", x, "y", y, "buttons", buttons, "err", err)
		}
		return
	}
	c.ptr, c.buttons = image.Pt(x, y), buttons
}

// checkRevoked releases held input once input is no longer allowed, even
// if the viewer sends nothing more.
func (c *serverConn) checkRevoked() {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	if len(c.held) > 0 || c.buttons != 0 {
		c.allowedLocked()
	}
}

func (c *serverConn) releaseAll(why string) {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	c.releaseLocked(why)
}

// releaseLocked sends a key-up for every key the viewer holds and a
// pointer event without buttons if it holds any, in a fixed order.
func (c *serverConn) releaseLocked(why string) {
	if len(c.held) == 0 && c.buttons == 0 {
		return
	}
	keys := make([]uint32, 0, len(c.held))
	for k := range c.held {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if err := c.srv.Input.Key(false, k); err != nil {
			c.log.Warn("release key", "vm", c.srv.VM, "op", "vnc.serve", "keysym", k, "why", why, "err", err)
		}
		c.stats.Released++
	}
	clear(c.held)
	if c.buttons != 0 {
		if err := c.srv.Input.Pointer(c.ptr.X, c.ptr.Y, 0); err != nil && !errors.Is(err, ErrOutOfBounds) {
			c.log.Warn("release buttons", "vm", c.srv.VM, "op", "vnc.serve", "buttons", c.buttons, "why", why, "err", err)
		}
		c.stats.Released++
		c.buttons = 0
	}
	c.log.Debug("released viewer input", "vm", c.srv.VM, "op", "vnc.serve", "why", why, "keys", len(keys))
}

// update is one FramebufferUpdate to send: either a whole frame shared with
// other viewers, or a region of a snapshot encoded for this viewer.
type update struct {
	resized bool        // goes with DesktopSize first
	size    image.Point // of the framebuffer
	shared  *sharedFrame
	img     *image.RGBA
	r       image.Rectangle
	enc     encoder
}

// maybeUpdate sends one FramebufferUpdate if the viewer asked for one and
// something in its region changed (or the framebuffer changed size).
func (c *serverConn) maybeUpdate() error {
	c.mu.Lock()
	u, err := c.nextUpdateLocked()
	c.mu.Unlock()
	if err != nil || u == nil {
		return err
	}
	if u.shared != nil {
		err = c.sendShared(u)
	} else {
		err = c.sendRegion(u)
	}
	if err != nil {
		return fmt.Errorf("write update: %w", err)
	}
	c.stats.Updates++
	return nil
}

// nextUpdateLocked decides what the pending request gets, if anything, and
// takes the pixels; a nil update means nothing to send yet. Called with mu
// held, so a request that arrives meanwhile is not lost.
func (c *serverConn) nextUpdateLocked() (*update, error) {
	if !c.want {
		return nil, nil
	}
	var img *image.RGBA
	var size image.Point
	if c.frames != nil {
		_, size = c.frames.src.FrameVersion() // no copy until we know what to send
	} else {
		img = c.srv.Source.SnapshotRaw()
		size = img.Rect.Size()
	}
	u := &update{size: size, resized: size != c.size}
	// Like QEMU (vnc_update_client sends its whole dirty map), an update
	// carries everything that changed, not only the requested region: the
	// Client asks for one pixel per request and relies on that (see the
	// package documentation), and noVNC always asks for the whole
	// framebuffer, so to it this is the same.
	full := image.Rectangle{Max: size}
	u.r = c.damage.Intersect(full)
	if u.resized {
		u.r = full
	}
	if u.r.Empty() {
		return nil, nil
	}
	switch {
	case c.frames != nil && u.r == full:
		f, err := c.frames.frame(c.enc)
		if err != nil {
			return nil, fmt.Errorf("full frame: %w", err)
		}
		// The frame may be newer than size, even of another size.
		u.shared, u.size, u.resized = f, f.size, f.size != c.size
	case img == nil:
		img = c.srv.Source.SnapshotRaw()
		if img.Rect.Size() != size { // resized since FrameVersion
			u.size, u.resized, u.r = img.Rect.Size(), img.Rect.Size() != c.size, img.Rect
		}
	}
	if u.resized {
		if err := checkFramebufferSize(u.size.X, u.size.Y); err != nil {
			return nil, fmt.Errorf("resize: %w", err)
		}
		if !c.desktopSz {
			return nil, fmt.Errorf("framebuffer resized to %dx%d and the viewer does not take DesktopSize", u.size.X, u.size.Y)
		}
	}
	u.img, u.enc = img, c.enc
	c.size = u.size
	c.want, c.damage = false, image.Rectangle{}
	return u, nil
}

// sendShared writes a shared full frame: its messages as they are, after a
// message header and DesktopSize of their own if the size changed.
func (c *serverConn) sendShared(u *update) error {
	msgs := u.shared.msgs
	if u.resized {
		b := appendUpdateHeader(c.wbuf[:0], len(msgs)+1)
		b = appendRectHeader(b, image.Rectangle{Max: u.size}, EncodingDesktopSize)
		c.wbuf = b
		if err := c.write(b); err != nil {
			return err
		}
		// The first message without its header: the rectangles follow.
		msgs = append([][]byte{msgs[0][4:]}, msgs[1:]...)
	}
	for _, m := range msgs {
		if err := c.write(m); err != nil {
			return err
		}
	}
	return nil
}

// sendRegion encodes region u.r of u.img for this viewer and writes it, one
// band per Write.
func (c *serverConn) sendRegion(u *update) error {
	bs := bands(u.r)
	n := len(bs)
	if u.resized {
		n++
	}
	b := appendUpdateHeader(c.wbuf[:0], n)
	if u.resized {
		b = appendRectHeader(b, image.Rectangle{Max: u.size}, EncodingDesktopSize)
	}
	for i, band := range bs {
		if i > 0 {
			if err := c.write(b); err != nil {
				return err
			}
			b = b[:0]
		}
		b = appendBand(b, u.enc, u.img, band)
	}
	c.wbuf = b
	return c.write(b)
}
