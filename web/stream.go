package web

// Live frames for browsers: GET /v1/vms/{id}/stream upgrades to a websocket
// that carries the VM's desktop as binary frame messages.
//
// Frame format, chosen by measurement: BenchmarkFrameEncode (stream_test.go)
// on this 2-core host, 1280x800, Go's image/jpeg at q80 and image/png at
// BestSpeed, CPU time and bytes per frame:
//
//	                        JPEG              PNG
//	tiny, whole frame       15.5 ms  19 KB    11.7 ms    6 KB
//	photo-like, whole       31.2 ms 209 KB    93.0 ms 1538 KB
//	tiny, a text line        0.47 ms  1 KB     0.93 ms  0.3 KB
//	photo-like, text line    0.94 ms  8 KB     2.9 ms   51 KB
//	click marker 24x24       0.02 ms 0.6 KB    0.23 ms  0.1 KB
//
// Whole frames at the 20 fps the live view needs would cost 30-60% of a
// core per watched VM however small the change; PNG is 3x slower than JPEG
// on photo-like content. Damaged-rectangle JPEG costs in proportion to the
// change (typing or clicking: well under 1 ms a frame).
//
// So a frame is the damaged rectangle as JPEG ("delta"), and a viewer that
// joins or skips a delta gets a whole-frame JPEG ("key frame") of the same
// framebuffer state instead; key frames are encoded lazily, once per state,
// and shared. Each message is encoded once for all viewers
// (websocket.PreparedMessage). Message layout, big endian:
//
//	byte 0      kind: 1 key frame, 2 delta
//	bytes 1-4   framebuffer width, height (uint16 each)
//	bytes 5-12  rectangle x, y, w, h (uint16 each)
//	bytes 13-   JPEG of the rectangle
//
// Frames are driven by vnc.Client damage notifications, coalesced to at
// most MaxStreamFPS; a still desktop sends nothing. Each viewer has one
// writer goroutine that always sends the newest state ("latest frame"
// slot), so a slow viewer skips states and never holds up others, the hub
// or the agent.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/vnc"
)

// Streaming limits.
const (
	// MaxStreamFPS caps the frames a hub publishes per second.
	MaxStreamFPS = 30
	// streamJPEGQuality is the JPEG quality of frames.
	streamJPEGQuality = 80
	// wsWriteTimeout bounds one websocket write; a viewer that cannot take
	// a frame in this time is dropped.
	wsWriteTimeout = 5 * time.Second
	// wsPongWait is how long a viewer may stay silent (no pong) before it
	// is taken for dead; pings go every wsPingEvery.
	wsPongWait  = 30 * time.Second
	wsPingEvery = 10 * time.Second
)

// Frame message kinds.
const (
	frameKey   = 1
	frameDelta = 2
	frameHdr   = 13
)

// screen is what the viewers need from a VM's display: *vnc.Client through
// clientScreen, or a fake in tests.
type screen interface {
	SnapshotRaw() *image.RGBA
	// Damage subscribes to framebuffer changes; the channel closes when the
	// display does; cancel ends the subscription.
	Damage() (c <-chan vnc.Damage, cancel func())
	Key(keysym uint32, scancode uint16, down bool) error
	Pointer(x, y int, buttons uint8) error
}

type clientScreen struct{ *vnc.Client }

func (c clientScreen) Damage() (<-chan vnc.Damage, func()) {
	s := c.Subscribe()
	return s.C, s.Close
}

// upgrader accepts websockets from pages of this server only.
var upgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 64 << 10,
	Subprotocols:    []string{"binary"},
	CheckOrigin:     checkOrigin, // security.go
}

// frameMsg is one encoded state of the framebuffer.
type frameMsg struct {
	seq   uint64
	pm    *websocket.PreparedMessage
	bytes int
}

// hub publishes one VM's frames to its viewers.
type hub struct {
	id  string
	scr screen
	log *slog.Logger

	keyMu sync.Mutex // serialises key frame encoding

	mu      sync.Mutex
	viewers map[*viewer]struct{}
	seq     uint64
	frame   *image.RGBA // the state numbered seq
	delta   *frameMsg   // the delta that led to seq, nil if none
	key     *frameMsg   // key frame of seq, once encoded
	ended   bool
	stop    func()
	done    chan struct{}
}

// hubs holds the running hubs, one per VM with viewers.
type hubs struct {
	log *slog.Logger
	mu  sync.Mutex
	m   map[string]*hub
}

func newHubs(log *slog.Logger) *hubs { return &hubs{log: log, m: map[string]*hub{}} }

// join adds v to vm id's hub, starting the hub if needed.
func (hs *hubs) join(id string, scr screen, v *viewer) *hub {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h := hs.m[id]
	if h == nil || h.isEnded() || h.scr != scr {
		h = startHub(id, scr, hs.log)
		hs.m[id] = h
	}
	h.mu.Lock()
	h.viewers[v] = struct{}{}
	h.mu.Unlock()
	return h
}

// leave removes v; the last viewer to leave stops the hub.
func (hs *hubs) leave(h *hub, v *viewer) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	h.mu.Lock()
	delete(h.viewers, v)
	empty := len(h.viewers) == 0
	h.mu.Unlock()
	if empty {
		if hs.m[h.id] == h {
			delete(hs.m, h.id)
		}
		h.stop()
	}
}

func startHub(id string, scr screen, log *slog.Logger) *hub {
	ch, cancel := scr.Damage()
	h := &hub{id: id, scr: scr, log: log, viewers: map[*viewer]struct{}{}, done: make(chan struct{})}
	var once sync.Once
	h.stop = func() { once.Do(cancel) }
	// The first state: the whole framebuffer, so viewers have a key frame.
	h.publish(image.Rectangle{}, true)
	go h.run(ch)
	return h
}

func (h *hub) isEnded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended
}

// run publishes damage, at most MaxStreamFPS times a second, until the
// subscription closes.
func (h *hub) run(ch <-chan vnc.Damage) {
	defer func() {
		h.mu.Lock()
		h.ended = true
		vs := make([]*viewer, 0, len(h.viewers))
		for v := range h.viewers {
			vs = append(vs, v)
		}
		h.mu.Unlock()
		for _, v := range vs {
			v.end()
		}
		close(h.done)
	}()
	interval := time.Second / MaxStreamFPS
	var last time.Time
	for {
		d, ok := <-ch
		if !ok {
			return
		}
		if wait := interval - time.Since(last); wait > 0 {
			time.Sleep(wait)
			// Whatever came meanwhile is merged into one pending Damage.
			select {
			case more, ok := <-ch:
				if !ok {
					return
				}
				d = vnc.Damage{Rect: d.Rect.Union(more.Rect), Resized: d.Resized || more.Resized, Cursor: d.Cursor || more.Cursor}
			default:
			}
		}
		last = time.Now()
		h.publish(d.Rect, d.Resized)
	}
}

// publish snapshots the framebuffer and makes the new state's delta (the
// damaged rect r) or, when full, its key frame.
func (h *hub) publish(r image.Rectangle, full bool) {
	img := h.scr.SnapshotRaw()
	h.mu.Lock()
	prev := h.frame
	h.mu.Unlock()
	if prev == nil || prev.Rect != img.Rect {
		full = true
	}
	r = r.Intersect(img.Rect)
	if full || r == img.Rect {
		r, full = img.Rect, true
	}
	if r.Empty() {
		return // only the cursor changed: the stream does not show it
	}
	kind := byte(frameDelta)
	if full {
		kind = frameKey
	}
	h.mu.Lock()
	seq := h.seq + 1
	h.mu.Unlock()
	msg, err := encodeFrame(img, r, kind, seq)
	if err != nil {
		h.log.Warn("encode frame", "vm", h.id, "op", "stream", "err", err)
		return
	}
	h.mu.Lock()
	h.seq, h.frame, h.delta, h.key = seq, img, msg, nil
	if full {
		h.key = msg
	}
	for v := range h.viewers {
		v.poke()
	}
	h.mu.Unlock()
}

// next returns what a viewer that shows state seq should get, or nil when
// it is current.
func (h *hub) next(seq uint64) (*frameMsg, error) {
	h.mu.Lock()
	cur, delta := h.seq, h.delta
	h.mu.Unlock()
	switch {
	case cur == seq:
		return nil, nil
	case delta != nil && delta.seq == seq+1 && seq != 0:
		return delta, nil
	}
	return h.keyframe()
}

// keyframe returns the key frame of the current state, encoding it once.
func (h *hub) keyframe() (*frameMsg, error) {
	h.keyMu.Lock()
	defer h.keyMu.Unlock()
	h.mu.Lock()
	seq, img, key := h.seq, h.frame, h.key
	h.mu.Unlock()
	if key != nil && key.seq == seq {
		return key, nil
	}
	key, err := encodeFrame(img, img.Rect, frameKey, seq)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.seq == seq {
		h.key = key
	}
	h.mu.Unlock()
	return key, nil
}

// encodeFrame encodes rect r of img as a frame message.
func encodeFrame(img *image.RGBA, r image.Rectangle, kind byte, seq uint64) (*frameMsg, error) {
	var buf bytes.Buffer
	buf.Grow(frameHdr + r.Dx()*r.Dy()/4)
	var hdr [frameHdr]byte
	hdr[0] = kind
	for i, v := range []int{img.Rect.Dx(), img.Rect.Dy(), r.Min.X, r.Min.Y, r.Dx(), r.Dy()} {
		binary.BigEndian.PutUint16(hdr[1+2*i:], uint16(v))
	}
	buf.Write(hdr[:])
	if err := jpeg.Encode(&buf, img.SubImage(r), &jpeg.Options{Quality: streamJPEGQuality}); err != nil {
		return nil, fmt.Errorf("encode %v of the framebuffer as jpeg: %w", r, err)
	}
	pm, err := websocket.NewPreparedMessage(websocket.BinaryMessage, buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("prepare frame message: %w", err)
	}
	return &frameMsg{seq: seq, pm: pm, bytes: buf.Len()}, nil
}

// viewer is one websocket watching a hub.
type viewer struct {
	wake   chan struct{} // the one-slot "new state" signal
	done   chan struct{}
	once   sync.Once
	minGap time.Duration // at most one frame per minGap (the wall's low rate)
}

func newViewer(fps int) *viewer {
	v := &viewer{wake: make(chan struct{}, 1), done: make(chan struct{})}
	if fps > 0 && fps < MaxStreamFPS {
		v.minGap = time.Second / time.Duration(fps)
	}
	return v
}

func (v *viewer) poke() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

func (v *viewer) end() { v.once.Do(func() { close(v.done) }) }

// stream serves GET /v1/vms/{id}/stream?fps=N: the frame websocket.
func (s *server) stream(w http.ResponseWriter, r *http.Request) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := vmID(r)
	fps := 0
	if q := r.URL.Query().Get("fps"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > MaxStreamFPS {
			return invalidf("fps", "%q: want 1 to %d", q, MaxStreamFPS)
		}
		fps = n
	}
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // Upgrade answered the client
	}
	s.serveViewer(id, clientScreen{d.Display}, conn, fps)
	return nil
}

// serveViewer streams frames to conn until it or the display goes away.
func (s *server) serveViewer(id string, scr screen, conn *websocket.Conn, fps int) {
	v := newViewer(fps)
	h := s.hubs.join(id, scr, v)
	defer s.hubs.leave(h, v)
	defer conn.Close()
	s.log.Debug("viewer joined", "vm", id, "op", "stream", "remote", conn.RemoteAddr().String(), "fps", fps)

	// Reader: answers pings, notices a closed or dead viewer.
	conn.SetReadLimit(4096)
	conn.SetReadDeadline(time.Now().Add(wsPongWait)) //nolint:errcheck // fails only on a closed conn
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
	go func() {
		defer v.end()
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()

	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	var seq uint64
	var lastSent time.Time
	v.poke() // the first key frame
	for {
		select {
		case <-v.done:
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second)) //nolint:errcheck // best effort
			return
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteTimeout)); err != nil {
				return
			}
			continue
		case <-v.wake:
		}
		if v.minGap > 0 {
			if wait := v.minGap - time.Since(lastSent); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-v.done:
					t.Stop()
					continue
				}
			}
		}
		msg, err := h.next(seq)
		if err != nil {
			s.log.Warn("frame for viewer", "vm", id, "op", "stream", "err", err)
			return
		}
		if msg == nil {
			continue
		}
		conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout)) //nolint:errcheck // fails only on a closed conn
		if err := conn.WritePreparedMessage(msg.pm); err != nil {
			if !errors.Is(err, context.Canceled) {
				s.log.Debug("viewer gone", "vm", id, "op", "stream", "err", err)
			}
			return
		}
		seq, lastSent = msg.seq, time.Now()
	}
}
