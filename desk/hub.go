package desk

// The frame hub: the live frames browsers watch (web's GET
// /v1/vms/{id}/stream), encoded once per framebuffer state for all viewers.
//
// Frame format, chosen by measurement: BenchmarkFrameEncode (hub_test.go)
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
// and shared. Message layout, big endian:
//
//	byte 0      kind: 1 key frame, 2 delta
//	bytes 1-4   framebuffer width, height (uint16 each)
//	bytes 5-12  rectangle x, y, w, h (uint16 each)
//	bytes 13-   JPEG of the rectangle
//
// Frames are driven by the display's damage notifications, coalesced to at
// most MaxStreamFPS; a still desktop sends nothing. A viewer holds no queue,
// only "a newer state exists": a slow viewer skips states (and then gets
// the latest key frame) and never holds up others, the hub or the agent.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/jpeg"
	"log/slog"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/vnc"
)

// Streaming limits.
const (
	// MaxStreamFPS caps the frames a hub publishes per second.
	MaxStreamFPS = 30
	// StreamJPEGQuality is the JPEG quality of frames.
	StreamJPEGQuality = 80
)

// Frame kinds (byte 0 of Frame.Data) and the header length.
const (
	FrameKey    = 1
	FrameDelta  = 2
	FrameHeader = 13
)

// Frame is one encoded state of the framebuffer, shared by every viewer:
// treat Data as read-only.
type Frame struct {
	Seq  uint64
	Data []byte
}

// Kind is FrameKey or FrameDelta.
func (f *Frame) Kind() byte { return f.Data[0] }

// hub publishes one desk's frames to its viewers while it has any.
type hub struct {
	id   string
	disp Display
	log  *slog.Logger

	joinMu sync.Mutex // guards run and closed
	run    *hubRun
	closed bool
}

// hubRun is one stretch of a hub with viewers: from the first viewer's
// join to the last one's leave, or the display's close.
type hubRun struct {
	h     *hub
	keyMu sync.Mutex // serialises key frame encoding

	mu      sync.Mutex
	viewers map[*Viewer]struct{}
	seq     uint64
	frame   *image.RGBA // the state numbered seq
	delta   *Frame      // the delta that led to seq, nil if none
	key     *Frame      // key frame of seq, once encoded
	ended   bool
	stop    func()
}

func newHub(id string, disp Display, log *slog.Logger) *hub {
	return &hub{id: id, disp: disp, log: log}
}

// Viewer is one watcher of a desk's frames, e.g. a browser's websocket.
type Viewer struct {
	run    *hubRun
	wake   chan struct{} // the one-slot "new state" signal
	done   chan struct{}
	once   sync.Once
	seq    uint64 // the state the viewer was last given
	minGap time.Duration
}

// Watch adds a viewer that wants at most fps frames a second (0 or
// MaxStreamFPS and above: every state, up to MaxStreamFPS). Close it when
// done.
func (d *Desk) Watch(fps int) (*Viewer, error) {
	if err := d.Err(); err != nil {
		return nil, err
	}
	v := &Viewer{wake: make(chan struct{}, 1), done: make(chan struct{})}
	if fps > 0 && fps < MaxStreamFPS {
		v.minGap = time.Second / time.Duration(fps)
	}
	if err := d.hub.join(v); err != nil {
		return nil, err
	}
	v.poke() // the first key frame
	return v, nil
}

func (h *hub) join(v *Viewer) error {
	h.joinMu.Lock()
	defer h.joinMu.Unlock()
	if h.closed {
		return ErrClosed
	}
	r := h.run
	if r == nil || r.isEnded() {
		r = h.start()
		h.run = r
	}
	r.mu.Lock()
	r.viewers[v] = struct{}{}
	r.mu.Unlock()
	v.run = r
	return nil
}

// close ends every viewer; the display's close ends the run by itself,
// this covers viewers of a run that already stopped.
func (h *hub) close() {
	h.joinMu.Lock()
	h.closed = true
	r := h.run
	h.joinMu.Unlock()
	if r != nil {
		r.end()
	}
}

func (h *hub) start() *hubRun {
	ch, cancel := h.disp.Damage()
	r := &hubRun{h: h, viewers: map[*Viewer]struct{}{}}
	var once sync.Once
	r.stop = func() { once.Do(cancel) }
	// The first state: the whole framebuffer, so viewers have a key frame.
	r.publish(image.Rectangle{}, true)
	go r.loop(ch)
	return r
}

// Close removes the viewer; the last one to leave stops the run.
func (v *Viewer) Close() {
	v.end()
	r := v.run
	h := r.h
	h.joinMu.Lock()
	defer h.joinMu.Unlock()
	r.mu.Lock()
	delete(r.viewers, v)
	empty := len(r.viewers) == 0
	r.mu.Unlock()
	if empty {
		if h.run == r {
			h.run = nil
		}
		r.stop()
	}
}

// Wake receives when a newer state may exist.
func (v *Viewer) Wake() <-chan struct{} { return v.wake }

// Done is closed when the viewer ends: Close, or the desk closed (then
// Desk.Err says why).
func (v *Viewer) Done() <-chan struct{} { return v.done }

// MinGap is the least time between two frames the viewer asked for.
func (v *Viewer) MinGap() time.Duration { return v.minGap }

// Next returns the frame that brings the viewer to the newest state (the
// delta when it is one state behind, else the newest key frame), or nil
// when it is current. The viewer counts as shown that state. One goroutine
// per viewer calls Next.
func (v *Viewer) Next() (*Frame, error) {
	f, err := v.run.next(v.seq)
	if f != nil {
		v.seq = f.Seq
	}
	return f, err
}

func (v *Viewer) poke() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

func (v *Viewer) end() { v.once.Do(func() { close(v.done) }) }

func (r *hubRun) isEnded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// end marks the run ended and ends its viewers.
func (r *hubRun) end() {
	r.mu.Lock()
	r.ended = true
	vs := make([]*Viewer, 0, len(r.viewers))
	for v := range r.viewers {
		vs = append(vs, v)
	}
	r.mu.Unlock()
	for _, v := range vs {
		v.end()
	}
}

// loop publishes damage, at most MaxStreamFPS times a second, until the
// subscription closes.
func (r *hubRun) loop(ch <-chan vnc.Damage) {
	defer r.end()
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
		r.publish(d.Rect, d.Resized)
	}
}

// publish snapshots the framebuffer and makes the new state's delta (the
// damaged rect rect) or, when full, its key frame.
func (r *hubRun) publish(rect image.Rectangle, full bool) {
	img := r.h.disp.SnapshotRaw()
	r.mu.Lock()
	prev := r.frame
	r.mu.Unlock()
	if prev == nil || prev.Rect != img.Rect {
		full = true
	}
	rect = rect.Intersect(img.Rect)
	if full || rect == img.Rect {
		rect, full = img.Rect, true
	}
	if rect.Empty() {
		return // only the cursor changed: the stream does not show it
	}
	kind := byte(FrameDelta)
	if full {
		kind = FrameKey
	}
	r.mu.Lock()
	seq := r.seq + 1
	r.mu.Unlock()
	f, err := encodeFrame(img, rect, kind, seq)
	if err != nil {
		r.h.log.Warn("encode frame", "vm", r.h.id, "op", "stream", "err", err)
		return
	}
	r.mu.Lock()
	r.seq, r.frame, r.delta, r.key = seq, img, f, nil
	if full {
		r.key = f
	}
	for v := range r.viewers {
		v.poke()
	}
	r.mu.Unlock()
}

// next returns what a viewer that shows state seq should get, or nil when
// it is current.
func (r *hubRun) next(seq uint64) (*Frame, error) {
	r.mu.Lock()
	cur, delta := r.seq, r.delta
	r.mu.Unlock()
	switch {
	case cur == seq:
		return nil, nil
	case delta != nil && delta.Seq == seq+1 && seq != 0:
		return delta, nil
	}
	return r.keyframe()
}

// keyframe returns the key frame of the current state, encoding it once.
func (r *hubRun) keyframe() (*Frame, error) {
	r.keyMu.Lock()
	defer r.keyMu.Unlock()
	r.mu.Lock()
	seq, img, key := r.seq, r.frame, r.key
	r.mu.Unlock()
	if key != nil && key.Seq == seq {
		return key, nil
	}
	key, err := encodeFrame(img, img.Rect, FrameKey, seq)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.seq == seq {
		r.key = key
	}
	r.mu.Unlock()
	return key, nil
}

// encodeFrame encodes rect rect of img as a frame message.
func encodeFrame(img *image.RGBA, rect image.Rectangle, kind byte, seq uint64) (*Frame, error) {
	var buf bytes.Buffer
	buf.Grow(FrameHeader + rect.Dx()*rect.Dy()/4)
	var hdr [FrameHeader]byte
	hdr[0] = kind
	for i, v := range []int{img.Rect.Dx(), img.Rect.Dy(), rect.Min.X, rect.Min.Y, rect.Dx(), rect.Dy()} {
		binary.BigEndian.PutUint16(hdr[1+2*i:], uint16(v))
	}
	buf.Write(hdr[:])
	if err := jpeg.Encode(&buf, img.SubImage(rect), &jpeg.Options{Quality: StreamJPEGQuality}); err != nil {
		return nil, fmt.Errorf("encode %v of the framebuffer as jpeg: %w", rect, err)
	}
	return &Frame{Seq: seq, Data: buf.Bytes()}, nil
}
