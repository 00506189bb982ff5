package atspi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
)

// The accessibility port carries frames once the relay's hello is done
// (relay.py): a kind byte, a channel and a payload length (big-endian
// uint32s), then the payload. Channel 0 is the accessibility bus, open from
// the start. The host opens the others on applications' own D-Bus sockets
// (peer-to-peer, as libatspi's clients talk to them): a call to LibreOffice
// then skips the bus daemon's two hops, measured in the guest at 456-468
// calls a second through the bus against 759-824 direct (Python's GDBus,
// GetAttributes, 64 in flight, osworld image under TCG, 2026-12-03).
const (
	frameData  = 'D'
	frameOpen  = 'O' // host to relay: open the channel on the socket at the payload's path
	frameClose = 'C' // either way: the channel is done; from the relay, the payload says why
	frameHead  = 9
	// maxFrame bounds a frame's payload: the relay sends at most 64 KiB
	// at a time, and a guest is hostile.
	maxFrame = 1 << 20
)

// errMuxClosed: the port is gone (the relay ended or the walk closed it).
var errMuxClosed = errors.New("the accessibility port is closed")

// mux splits the port into channels.
type mux struct {
	rw io.ReadWriter

	wmu sync.Mutex // one frame at a time

	mu    sync.Mutex
	chans map[uint32]*muxChan
	next  uint32
	err   error // set once the port's reading has ended
}

// newMux starts reading frames from rw (the port after the hello) and
// returns the mux and its bus channel. Reading ends when rw's Read fails
// (the walk closes the port).
func newMux(rw io.ReadWriter) (*mux, *muxChan) {
	m := &mux{rw: rw, chans: map[uint32]*muxChan{}, next: 1}
	bus := m.add(0)
	go m.read()
	return m, bus
}

// closed is true once the port's reading has ended.
func (m *mux) closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err != nil
}

func (m *mux) add(id uint32) *muxChan {
	pr, pw := io.Pipe()
	c := &muxChan{m: m, id: id, r: pr, w: pw}
	m.chans[id] = c
	return c
}

// open asks the relay for a channel on the application socket at path.
// The relay refuses sockets that are not the user's at-spi2-atk ones; a
// refusal closes the channel with its reason, which its first Read returns.
func (m *mux) open(path string) (*muxChan, error) {
	m.mu.Lock()
	if m.err != nil {
		m.mu.Unlock()
		return nil, m.err
	}
	id := m.next
	m.next++
	c := m.add(id)
	m.mu.Unlock()
	if err := m.write(frameOpen, id, []byte(path)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (m *mux) write(kind byte, id uint32, p []byte) error {
	var h [frameHead]byte
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:], id)
	binary.BigEndian.PutUint32(h[5:], uint32(len(p)))
	m.wmu.Lock()
	defer m.wmu.Unlock()
	if _, err := m.rw.Write(append(h[:], p...)); err != nil {
		return fmt.Errorf("write to the accessibility port: %w", err)
	}
	return nil
}

// read hands each frame's payload to its channel until the port fails,
// then fails every channel.
func (m *mux) read() {
	err := m.readFrames()
	m.mu.Lock()
	m.err = errMuxClosed
	chans := m.chans
	m.chans = map[uint32]*muxChan{}
	m.mu.Unlock()
	for _, c := range chans {
		c.w.CloseWithError(fmt.Errorf("%w: %w", errMuxClosed, err))
	}
}

func (m *mux) readFrames() error {
	var h [frameHead]byte
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(m.rw, h[:]); err != nil {
			return err
		}
		kind, id, n := h[0], binary.BigEndian.Uint32(h[1:]), binary.BigEndian.Uint32(h[5:])
		if n > maxFrame {
			return fmt.Errorf("a frame of %d bytes from the relay (at most %d)", n, maxFrame)
		}
		if int(n) > len(buf) {
			buf = make([]byte, n)
		}
		p := buf[:n]
		if _, err := io.ReadFull(m.rw, p); err != nil {
			return err
		}
		m.mu.Lock()
		c := m.chans[id]
		if kind == frameClose {
			delete(m.chans, id)
		}
		m.mu.Unlock()
		if c == nil {
			continue // a channel the host closed already
		}
		switch kind {
		case frameData:
			// The pipe hands p over before Write returns; a channel
			// closed on the host's side drops it.
			_, _ = c.w.Write(p)
		case frameClose:
			why := string(p)
			if why == "" {
				why = "closed"
			}
			c.w.CloseWithError(fmt.Errorf("the relay closed channel %d: %s", id, why))
		default:
			return fmt.Errorf("a frame of unknown kind %q from the relay", kind)
		}
	}
}

// muxChan is one channel: a stream for a D-Bus connection.
type muxChan struct {
	m    *mux
	id   uint32
	r    *io.PipeReader
	w    *io.PipeWriter
	once sync.Once
}

func (c *muxChan) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write sends p in frames of at most maxFrame bytes.
func (c *muxChan) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n := min(len(p)-done, maxFrame)
		if err := c.m.write(frameData, c.id, p[done:done+n]); err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}

// Close ends the channel on both sides. The bus channel's close ends the
// relay.
func (c *muxChan) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		delete(c.m.chans, c.id)
		c.m.mu.Unlock()
		c.r.CloseWithError(io.ErrClosedPipe)
		_ = c.m.write(frameClose, c.id, nil)
	})
	return nil
}

// peerPath is the socket path of an application's peer-to-peer D-Bus
// address (Application.GetApplicationBusAddress), as at-spi2-atk makes
// them: unix:path=DIR/at-spi2-XXXXXX/socket (at-spi2-core 2.46,
// spi_atk_create_socket) or unix:path=DIR/at-spi2-socket-PID (before). The
// address comes from the guest: anything else is refused, and the relay
// checks again that it is a socket of its user's.
func peerPath(addr string) (string, error) {
	p, ok := strings.CutPrefix(addr, "unix:path=")
	if !ok || strings.ContainsAny(p, ",;%") {
		return "", fmt.Errorf("peer address %q: accepted are unix:path= addresses of at-spi2-atk's sockets", addr)
	}
	base, parent := path.Base(p), path.Base(path.Dir(p))
	if !path.IsAbs(p) || path.Clean(p) != p || !(base == "socket" && strings.HasPrefix(parent, "at-spi2-") || strings.HasPrefix(base, "at-spi2-socket-")) {
		return "", fmt.Errorf("peer address %q: accepted are absolute paths .../at-spi2-XXXXXX/socket or .../at-spi2-socket-PID", addr)
	}
	return p, nil
}
