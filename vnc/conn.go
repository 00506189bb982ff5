package vnc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"sync"
	"time"

	govnc "github.com/mitchellh/go-vnc"
)

// readBufferSize is the bufio.Reader under go-vnc. Reads at least this large
// (pixel data) bypass it.
const readBufferSize = 64 << 10

// session is one RFB connection. A Client has at most one at a time; a new
// one is made for every reconnection.
type session struct {
	c    *Client
	n    int // connection attempt number, from 1
	raw  net.Conn
	bc   *bufConn
	pf   PixelFormat
	conv converter

	upd Update // reader goroutine only

	wmu  sync.Mutex // serialises every write on raw
	sent uint64     // FramebufferUpdateRequests written; guarded by wmu
	wbuf []byte     // guarded by wmu

	// Guarded by c.mu.
	answered uint64 // updates that answered a request
	want     uint64 // highest fence sequence number waited for
	extKey   bool   // QEMU acknowledged the extended key event

	errMu sync.Mutex
	err   error // why the session ended; first error wins
}

// bufConn is the net.Conn handed to go-vnc. Its reads go through a
// bufio.Reader and record errors on the session; its Close, called by go-vnc
// when its read loop ends (or its handshake fails), closes loopDone.
type bufConn struct {
	net.Conn
	r        *bufio.Reader
	s        *session
	once     sync.Once
	loopDone chan struct{}
}

func (b *bufConn) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		b.s.fail(fmt.Errorf("read: %w", err))
	}
	return n, err
}

func (b *bufConn) Close() error {
	b.once.Do(func() { close(b.loopDone) })
	return b.Conn.Close()
}

// fail records why the session ends and closes the connection, which makes
// go-vnc's loop exit.
func (s *session) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	_ = s.raw.Close()
}

func (s *session) error() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		return errors.New("connection closed")
	}
	return s.err
}

// write sends b as one Write, under wmu (held by the caller), with the
// configured deadline. A failed write ends the session.
func (s *session) writeLocked(b []byte) error {
	if err := s.raw.SetWriteDeadline(time.Now().Add(s.c.cfg.WriteTimeout)); err != nil {
		s.fail(fmt.Errorf("set write deadline: %w", err))
		return err
	}
	if _, err := s.raw.Write(b); err != nil {
		err = fmt.Errorf("write: %w", err)
		s.fail(err)
		return err
	}
	return nil
}

// send writes one or more complete client messages built by build.
func (s *session) send(build func(b []byte) []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf = build(s.wbuf[:0])
	return s.writeLocked(s.wbuf)
}

// fenceRegion is what every FramebufferUpdateRequest after the first asks
// for: one pixel, non-incremental. QEMU answers such a request at its next
// refresh tick with everything that changed plus that pixel, so each request
// gets exactly one answer. The pixel is (0,0): a request for an empty or
// off-screen region would make QEMU 7.2 queue an empty job, which it drops
// without clearing its job state, and stop updating this client.
var fenceRegion = image.Rect(0, 0, 1, 1)

// request writes the next FramebufferUpdateRequest (non-incremental, for
// fenceRegion), preceded by a wake-up when wake is set.
func (s *session) request(wake bool) error {
	var wk uint32
	if wake {
		wk = s.c.wakeKeysym()
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b := s.wbuf[:0]
	if wake {
		b = appendKeyEvent(b, wk, false)
	}
	b = appendUpdateRequest(b, false, fenceRegion)
	s.wbuf = b
	if err := s.writeLocked(b); err != nil {
		return err
	}
	s.sent++
	return nil
}

// fence wakes QEMU's refresh timer and returns the sequence number of the
// next request the reader will send; the update answering it was generated
// after QEMU processed everything written before this call. While the fence
// is pending the reader sends a wake-up with each request.
func (s *session) fence() (uint64, error) {
	wk := s.c.wakeKeysym()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	target := s.sent + 1
	s.c.mu.Lock()
	s.want = max(s.want, target)
	s.c.stats.Fences++
	s.c.mu.Unlock()
	s.wbuf = appendKeyEvent(s.wbuf[:0], wk, false)
	return target, s.writeLocked(s.wbuf)
}

// handlers returns go-vnc ServerMessages for every message type, so go-vnc
// only reads the type byte and all parsing is ours.
func (s *session) handlers() []govnc.ServerMessage {
	hs := make([]govnc.ServerMessage, 256)
	for i := range hs {
		hs[i] = &serverMessage{t: uint8(i), s: s}
	}
	return hs
}

// serverMessage adapts session.handle to go-vnc's ServerMessage.
type serverMessage struct {
	t uint8
	s *session
}

func (m *serverMessage) Type() uint8 { return m.t }

func (m *serverMessage) Read(_ *govnc.ClientConn, r io.Reader) (govnc.ServerMessage, error) {
	if err := m.s.handle(m.t, r); err != nil {
		m.s.fail(err)
		return nil, err
	}
	return m, nil
}

// handle reads one server message of type t (its type byte already read).
func (s *session) handle(t uint8, r io.Reader) error {
	eff, isUpdate, err := readServerMessage(t, r, s.pf, s.conv, s.c.fb, &s.upd)
	if err != nil || !isUpdate {
		return err
	}
	return s.c.afterUpdate(s, eff)
}

// readServerMessage reads one server message of type t (its type byte
// already read) and applies framebuffer updates to fb. isUpdate reports a
// FramebufferUpdate.
func readServerMessage(t uint8, r io.Reader, pf PixelFormat, conv converter, fb *mirror, upd *Update) (eff effect, isUpdate bool, err error) {
	switch t {
	case msgFramebufferUpdate:
		if err := ReadUpdate(r, pf, fb.size(), upd); err != nil {
			return eff, true, fmt.Errorf("read framebuffer update: %w", err)
		}
		eff, err := fb.apply(upd, conv)
		return eff, true, err
	case msgSetColourMap:
		// Not sent for true colour; skip it if it comes.
		var h [5]byte
		if err := readFull(r, h[:]); err != nil {
			return eff, false, fmt.Errorf("read colour map entries: %w", err)
		}
		n := int64(h[3])<<8 | int64(h[4])
		if _, err := io.CopyN(io.Discard, r, 6*n); err != nil {
			return eff, false, fmt.Errorf("read colour map entries: %w", unexpected(err))
		}
		return eff, false, nil
	case msgBell:
		return eff, false, nil
	case msgServerCutText:
		var h [7]byte
		if err := readFull(r, h[:]); err != nil {
			return eff, false, fmt.Errorf("read server cut text: %w", err)
		}
		n := int64(h[3])<<24 | int64(h[4])<<16 | int64(h[5])<<8 | int64(h[6])
		if n > 16<<20 {
			return eff, false, fmt.Errorf("server cut text of %d bytes: %w", n, ErrProtocol)
		}
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return eff, false, fmt.Errorf("read server cut text: %w", unexpected(err))
		}
		return eff, false, nil
	}
	return eff, false, fmt.Errorf("server message type %d: %w: not one this client can parse", t, ErrProtocol)
}

// connect dials, runs go-vnc's handshake and sends the set-up messages
// (pixel format, encodings, a full non-incremental update request).
func (c *Client) connect(n int) (*session, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.ConnectTimeout)
	defer cancel()
	raw, err := c.cfg.DialFunc(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	conv, err := newConverter(WireFormat)
	if err != nil {
		raw.Close()
		return nil, err
	}
	s := &session{c: c, n: n, raw: raw, pf: WireFormat, conv: conv}
	s.bc = &bufConn{Conn: raw, r: bufio.NewReaderSize(raw, readBufferSize), s: s, loopDone: make(chan struct{})}

	// go-vnc's handshake blocks on reads; closing the connection is the only
	// way to stop it when the deadline passes or the client closes.
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	vc, err := govnc.Client(s.bc, &govnc.ClientConfig{ServerMessages: s.handlers()})
	if !stop() {
		if err == nil {
			// Handshake done but the connection was closed under it: the read
			// loop is running and about to end.
			<-s.bc.loopDone
			err = ctx.Err()
		}
	}
	if err != nil {
		raw.Close()
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("rfb handshake: %w", err)
	}
	w, h := int(vc.FrameBufferWidth), int(vc.FrameBufferHeight)
	if err := checkFramebufferSize(w, h); err != nil {
		s.fail(fmt.Errorf("server init: %w", err))
		<-s.bc.loopDone
		return nil, s.error()
	}
	if d := c.fb.resize(w, h); !d.Empty() {
		c.mu.Lock()
		c.changedAt = time.Now()
		c.mu.Unlock()
		c.notify(d)
	}
	c.log.Debug("rfb handshake done", "vm", c.cfg.VM, "op", "vnc.connect", "conn", n,
		"width", w, "height", h, "name", vc.DesktopName, "server_format", fmt.Sprintf("%+v", vc.PixelFormat))
	// go-vnc's own SetPixelFormat would leave vc.PixelFormat stale; we
	// decode with s.pf and never read vc.PixelFormat after this.
	s.wmu.Lock()
	b := appendSetPixelFormat(s.wbuf[:0], s.pf)
	b = appendSetEncodings(b, advertisedEncodings)
	b = appendUpdateRequest(b, false, image.Rect(0, 0, w, h)) // the whole first frame
	s.wbuf = b
	err = s.writeLocked(b)
	if err == nil {
		s.sent = 1
	}
	s.wmu.Unlock()
	if err != nil {
		<-s.bc.loopDone
		return nil, fmt.Errorf("set up: %w", err)
	}
	return s, nil
}
