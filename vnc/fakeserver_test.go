package vnc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeServer is an RFB 3.8 server on a unix socket that answers update
// requests the way QEMU 7.2 does: one pending-request state per client
// (none, incremental, forced) that a refresh tick consumes; an incremental
// request is answered only when something changed, a forced one always,
// with everything that changed plus the requested region. Its refresh
// interval is fixed; a client message of type > 3 brings the next tick
// forward to 2 ms, like QEMU's timer reset.
type fakeServer struct {
	t    testing.TB
	path string
	ln   net.Listener

	mu       sync.Mutex
	img      *image.RGBA
	conns    map[*fakeConn]bool
	events   []clientEvent
	extKey   bool          // acknowledge QEMU's extended key event
	frozen   bool          // ignore update requests (a server that stopped answering)
	interval time.Duration // refresh tick
	onInput  func(ev clientEvent)
	requests int

	wake chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup
}

// clientEvent is a key, pointer or extended key message the server got.
type clientEvent struct {
	kind    string // "key", "extkey", "pointer"
	down    bool
	keysym  uint32
	keycode uint32
	x, y    int
	buttons uint8
}

type fakeConn struct {
	c   net.Conn
	wmu sync.Mutex
	// Guarded by fakeServer.mu.
	update int // 0 none, 1 incremental, 2 forced
	dirty  image.Rectangle
	forced image.Rectangle
	pf     PixelFormat
}

var serverBackground = color.RGBA{0x10, 0x20, 0x40, 0xff}

func newFakeServer(t testing.TB, w, h int) *fakeServer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vnc.sock")
	s := &fakeServer{t: t, path: path, conns: map[*fakeConn]bool{}, extKey: true, interval: 10 * time.Millisecond,
		wake: make(chan struct{}, 1), quit: make(chan struct{})}
	s.img = image.NewRGBA(image.Rect(0, 0, w, h))
	fillRect(s.img, s.img.Rect, serverBackground)
	s.listen()
	s.wg.Add(1)
	go s.ticker()
	t.Cleanup(s.stop)
	return s
}

func (s *fakeServer) listen() {
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fc := &fakeConn{c: c, dirty: image.Rectangle{}}
			s.mu.Lock()
			s.conns[fc] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer func() {
					s.mu.Lock()
					delete(s.conns, fc)
					s.mu.Unlock()
					c.Close()
				}()
				if err := s.serve(fc); err != nil && !isClosed(err) {
					s.t.Logf("fake server: %v", err)
				}
			}()
		}
	}()
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// stopListening closes the listener and every connection: the client sees
// the server go away and cannot reconnect until listen is called again.
func (s *fakeServer) stopListening() {
	s.mu.Lock()
	ln := s.ln
	s.ln = nil
	conns := make([]*fakeConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.c.Close()
	}
}

// dropConns closes the live connections but keeps accepting.
func (s *fakeServer) dropConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.c.Close()
	}
}

func (s *fakeServer) stop() {
	select {
	case <-s.quit:
		return
	default:
	}
	close(s.quit)
	s.stopListening()
	s.wg.Wait()
}

func (s *fakeServer) ticker() {
	defer s.wg.Done()
	t := time.NewTimer(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-s.wake:
			t.Reset(2 * time.Millisecond)
			continue
		case <-t.C:
		}
		s.refresh()
		s.mu.Lock()
		t.Reset(s.interval)
		s.mu.Unlock()
	}
}

// refresh is one refresh tick: answer every connection's pending request.
func (s *fakeServer) refresh() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		return
	}
	for c := range s.conns {
		if c.update == 0 || (c.update == 1 && c.dirty.Empty()) {
			continue
		}
		var msg []byte
		n := 0
		for _, r := range []image.Rectangle{c.dirty, c.forced} {
			r = r.Intersect(s.img.Rect)
			if r.Empty() {
				continue
			}
			msg = append(msg, rectHeader(r.Min.X, r.Min.Y, r.Dx(), r.Dy(), EncodingRaw)...)
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					p := s.img.RGBAAt(x, y)
					msg = append(msg, p.B, p.G, p.R, 0)
				}
			}
			n++
		}
		hdr := []byte{msgFramebufferUpdate, 0, byte(n >> 8), byte(n)}
		c.update, c.dirty, c.forced = 0, image.Rectangle{}, image.Rectangle{}
		go c.write(append(hdr, msg...)) // like QEMU's worker: do not block the tick
	}
}

func (c *fakeConn) write(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.c.Write(b)
}

// draw fills r with col and marks it dirty for every client.
func (s *fakeServer) draw(r image.Rectangle, col color.RGBA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drawLocked(r, col)
}

func (s *fakeServer) drawLocked(r image.Rectangle, col color.RGBA) {
	fillRect(s.img, r, col)
	for c := range s.conns {
		c.dirty = c.dirty.Union(r.Intersect(s.img.Rect))
	}
}

// resize switches to a new w×h framebuffer, like a guest mode change.
func (s *fakeServer) resize(w, h int, col color.RGBA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.img = image.NewRGBA(image.Rect(0, 0, w, h))
	fillRect(s.img, s.img.Rect, col)
	for c := range s.conns {
		c.dirty = s.img.Rect
		go c.write(append([]byte{msgFramebufferUpdate, 0, 0, 1}, rectHeader(0, 0, w, h, EncodingDesktopSize)...))
	}
}

// sendAll writes b to every live connection.
func (s *fakeServer) sendAll(b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		go c.write(b)
	}
}

func (s *fakeServer) snapshot() *image.RGBA {
	s.mu.Lock()
	defer s.mu.Unlock()
	img := *s.img
	img.Pix = bytes.Clone(s.img.Pix)
	return &img
}

func (s *fakeServer) inputEvents() []clientEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]clientEvent(nil), s.events...)
}

func (s *fakeServer) set(f func(s *fakeServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *fakeServer) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *fakeServer) serve(c *fakeConn) error {
	s.mu.Lock()
	w, h := s.img.Rect.Dx(), s.img.Rect.Dy()
	s.mu.Unlock()
	pf := WireFormat.marshal()
	hello := []byte("RFB 003.008\n")
	if _, err := c.c.Write(hello); err != nil {
		return err
	}
	var buf [64]byte
	if _, err := io.ReadFull(c.c, buf[:12]); err != nil {
		return err
	}
	c.write([]byte{1, 1}) // one security type: None
	if _, err := io.ReadFull(c.c, buf[:1]); err != nil || buf[0] != 1 {
		return fmt.Errorf("security type %d: %v", buf[0], err)
	}
	c.write([]byte{0, 0, 0, 0})
	if _, err := io.ReadFull(c.c, buf[:1]); err != nil { // shared flag
		return err
	}
	init := binary.BigEndian.AppendUint16(nil, uint16(w))
	init = binary.BigEndian.AppendUint16(init, uint16(h))
	init = append(init, pf[:]...)
	init = binary.BigEndian.AppendUint32(init, 4)
	c.write(append(init, "fake"...))
	for {
		if _, err := io.ReadFull(c.c, buf[:1]); err != nil {
			return err
		}
		t := buf[0]
		if t > 3 {
			s.wakeUp()
		}
		switch t {
		case msgSetPixelFormat:
			if _, err := io.ReadFull(c.c, buf[:19]); err != nil {
				return err
			}
			var got PixelFormat
			got.BPP, got.Depth, got.BigEndian, got.TrueColor = buf[3], buf[4], buf[5] != 0, buf[6] != 0
			got.RedMax, got.GreenMax, got.BlueMax = binary.BigEndian.Uint16(buf[7:]), binary.BigEndian.Uint16(buf[9:]), binary.BigEndian.Uint16(buf[11:])
			got.RedShift, got.GreenShift, got.BlueShift = buf[13], buf[14], buf[15]
			if got != WireFormat {
				return fmt.Errorf("client pixel format %+v, want %+v", got, WireFormat)
			}
		case msgSetEncodings:
			if _, err := io.ReadFull(c.c, buf[:3]); err != nil {
				return err
			}
			encs := make([]byte, 4*int(binary.BigEndian.Uint16(buf[1:])))
			if _, err := io.ReadFull(c.c, encs); err != nil {
				return err
			}
			for i := 0; i < len(encs); i += 4 {
				s.mu.Lock()
				ack := s.extKey
				s.mu.Unlock()
				if int32(binary.BigEndian.Uint32(encs[i:])) == EncodingQEMUExtendedKeyEvent && ack {
					c.write(append([]byte{msgFramebufferUpdate, 0, 0, 1}, rectHeader(0, 0, w, h, EncodingQEMUExtendedKeyEvent)...))
				}
			}
		case msgUpdateRequest:
			if _, err := io.ReadFull(c.c, buf[:9]); err != nil {
				return err
			}
			r := image.Rect(0, 0, int(binary.BigEndian.Uint16(buf[5:])), int(binary.BigEndian.Uint16(buf[7:]))).
				Add(image.Pt(int(binary.BigEndian.Uint16(buf[1:])), int(binary.BigEndian.Uint16(buf[3:]))))
			s.mu.Lock()
			s.requests++
			if buf[0] == 0 {
				c.update = 2
				c.forced = c.forced.Union(r)
			} else if c.update == 0 {
				c.update = 1
			}
			s.mu.Unlock()
		case msgKeyEvent:
			if _, err := io.ReadFull(c.c, buf[:7]); err != nil {
				return err
			}
			s.input(clientEvent{kind: "key", down: buf[0] != 0, keysym: binary.BigEndian.Uint32(buf[3:])})
		case msgPointerEvent:
			if _, err := io.ReadFull(c.c, buf[:5]); err != nil {
				return err
			}
			s.input(clientEvent{kind: "pointer", buttons: buf[0],
				x: int(binary.BigEndian.Uint16(buf[1:])), y: int(binary.BigEndian.Uint16(buf[3:]))})
		case msgQEMU:
			if _, err := io.ReadFull(c.c, buf[:11]); err != nil {
				return err
			}
			if buf[0] != qemuExtKeyEvent {
				return fmt.Errorf("qemu submessage %d", buf[0])
			}
			s.input(clientEvent{kind: "extkey", down: binary.BigEndian.Uint16(buf[1:]) != 0,
				keysym: binary.BigEndian.Uint32(buf[3:]), keycode: binary.BigEndian.Uint32(buf[7:])})
		default:
			return fmt.Errorf("client message type %d", t)
		}
	}
}

func (s *fakeServer) input(ev clientEvent) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	f := s.onInput
	s.mu.Unlock()
	if f != nil {
		f(ev)
	}
}

func fillRect(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Rect)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}
