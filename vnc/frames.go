package vnc

import (
	"image"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Shared full frames (issue 9): every viewer of a VM asks for the whole
// screen when it connects and after a resize, and every takeover page, the
// OSWorld VNC port and any RFB proxy client is a viewer. Encoding the
// frame once per pixel format and framebuffer version, and writing the same
// bytes to each of them, turns N snapshots and encodes of a whole screen
// into one (BenchmarkServerFullFrames in docs/benchmarks.md). Incremental
// updates stay per connection: each viewer has its own damage.

// VersionedFrames is a framebuffer that counts its changes, what a
// FrameCache reads. *Client is one.
type VersionedFrames interface {
	// FrameVersion returns the framebuffer's version and size without
	// copying it. The version changes with every change of pixels or size.
	FrameVersion() (version uint64, size image.Point)
	// ReadFrame calls f with the framebuffer (origin (0, 0)) and its
	// version, which stay unchanged until f returns. f must neither keep
	// nor modify img.
	ReadFrame(f func(img *image.RGBA, version uint64))
}

// SharedFrameSource is a FrameSource whose viewers share encoded full
// frames: a Server asks its FrameCache for a whole-screen update instead of
// snapshotting and encoding the frame itself. *Client is one, and so is
// any type that embeds it.
type SharedFrameSource interface {
	FrameSource
	// FullFrames returns the source's cache: the same one on every call.
	FullFrames() *FrameCache
}

const (
	// maxSharedFormats bounds the pixel formats a FrameCache keeps a frame
	// for. Viewers in use ask for two: noVNC's RGBX and QEMU's x8r8g8b8
	// (WireFormat, which this package's Client and most native viewers
	// keep); the least recently used format goes first.
	maxSharedFormats = 4
	// sharedFrameIdle is how long an encoded frame nobody asked for again
	// is kept. Viewers ask for full frames when they connect or the screen
	// resizes and then go incremental, so a frame is reused within moments
	// or not at all; this keeps an idle VM from holding a frame per format.
	sharedFrameIdle = 5 * time.Second
)

// FrameCache holds the latest encoded full frame of one source per pixel
// format, keyed by the source's version. The first Server that asks at a
// new version encodes the frame; Servers that ask meanwhile wait for that
// encode, and those that ask later at the same version reuse its bytes.
// No lock is held while a frame is encoded or written. Frames of an old
// version, of another size or unused for a few seconds are dropped, so it
// holds at most one frame per format (at most four formats). Safe for
// concurrent use.
type FrameCache struct {
	src  VersionedFrames
	idle time.Duration // sharedFrameIdle; tests shorten it

	mu     sync.Mutex
	frames []*sharedFrame // most recently used first

	encodes atomic.Int64 // frames encoded, for tests
}

// NewFrameCache returns an empty cache of src's full frames.
func NewFrameCache(src VersionedFrames) *FrameCache {
	return &FrameCache{src: src, idle: sharedFrameIdle}
}

// sharedFrame is one full frame in one pixel format. Its fields after ready
// are written once, by the encoding Server, before ready is closed.
type sharedFrame struct {
	pf    PixelFormat
	since uint64        // the frame shows at least this version (under FrameCache.mu)
	ready chan struct{} // closed once encoded
	idle  *time.Timer   // drops the frame when unused (under FrameCache.mu)

	version uint64
	size    image.Point
	// msgs are what a Server writes, one Write each: the first is a whole
	// FramebufferUpdate with the first band, each later one the next band
	// (a raw rectangle of whole rows, at most maxBandPixels).
	msgs [][]byte
	err  error
}

// frame returns the source's whole framebuffer encoded with enc, at the
// version the source had when frame was called or later. It waits for an
// encode that another Server started; it encodes itself if none is under
// way or done at that version.
func (fc *FrameCache) frame(enc encoder) (*sharedFrame, error) {
	v, _ := fc.src.FrameVersion()
	fc.mu.Lock()
	for i, f := range fc.frames {
		if f.pf != enc.pf {
			continue
		}
		if f.since >= v { // encoded or being encoded at v or later
			fc.frames = slices.Insert(slices.Delete(fc.frames, i, i+1), 0, f)
			if f.idle != nil {
				f.idle.Reset(fc.idle)
			}
			fc.mu.Unlock()
			<-f.ready
			return f, f.err
		}
		fc.dropLocked(i) // stale: those waiting on it still get it
		break
	}
	f := &sharedFrame{pf: enc.pf, since: v, ready: make(chan struct{})}
	fc.frames = slices.Insert(fc.frames, 0, f)
	for len(fc.frames) > maxSharedFormats {
		fc.dropLocked(len(fc.frames) - 1)
	}
	fc.mu.Unlock()

	fc.encodes.Add(1)
	fc.src.ReadFrame(func(img *image.RGBA, version uint64) {
		f.version, f.size = version, img.Rect.Size()
		if f.err = checkFramebufferSize(f.size.X, f.size.Y); f.err != nil {
			return
		}
		f.msgs = encodeFullFrame(enc, img)
	})

	fc.mu.Lock()
	if i := slices.Index(fc.frames, f); i >= 0 {
		if f.err != nil {
			fc.dropLocked(i)
		} else {
			f.since = max(f.since, f.version)
			f.idle = time.AfterFunc(fc.idle, func() { fc.drop(f) })
			// A frame of another size is of no use any more; frames still
			// being encoded are left to their encoders.
			fc.frames = slices.DeleteFunc(fc.frames, func(o *sharedFrame) bool {
				done := o.idle != nil
				if done && o.size != f.size {
					o.idle.Stop()
					return true
				}
				return false
			})
		}
	}
	fc.mu.Unlock()
	close(f.ready)
	return f, f.err
}

// dropLocked removes frames[i]. Called with mu held.
func (fc *FrameCache) dropLocked(i int) {
	if t := fc.frames[i].idle; t != nil {
		t.Stop()
	}
	fc.frames = slices.Delete(fc.frames, i, i+1)
}

// drop removes f if it is still cached.
func (fc *FrameCache) drop(f *sharedFrame) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if i := slices.Index(fc.frames, f); i >= 0 {
		fc.dropLocked(i)
	}
}

// cached returns how many frames the cache holds, for tests.
func (fc *FrameCache) cached() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return len(fc.frames)
}

// bands cuts r into rectangles of whole rows of at most maxBandPixels.
func bands(r image.Rectangle) []image.Rectangle {
	var out []image.Rectangle
	if r.Empty() {
		return nil
	}
	rows := max(1, maxBandPixels/r.Dx())
	for y := r.Min.Y; y < r.Max.Y; y += rows {
		out = append(out, image.Rect(r.Min.X, y, r.Max.X, min(y+rows, r.Max.Y)))
	}
	return out
}

// appendBand appends band's raw rectangle (header and pixels of img) to b
// in enc's format.
func appendBand(b []byte, enc encoder, img *image.RGBA, band image.Rectangle) []byte {
	b = appendRectHeader(b, band, EncodingRaw)
	for y := band.Min.Y; y < band.Max.Y; y++ {
		b = enc.appendRow(b, img.Pix[img.PixOffset(band.Min.X, y):img.PixOffset(band.Max.X, y)])
	}
	return b
}

// encodeFullFrame returns the FramebufferUpdate of all of img as messages
// of one band each, the first one with the update's header.
func encodeFullFrame(enc encoder, img *image.RGBA) [][]byte {
	bs := bands(img.Rect)
	msgs := make([][]byte, len(bs))
	for i, band := range bs {
		n := 12 + band.Dx()*band.Dy()*4
		var b []byte
		if i == 0 {
			b = appendUpdateHeader(make([]byte, 0, 4+n), len(bs))
		} else {
			b = make([]byte, 0, n)
		}
		msgs[i] = appendBand(b, enc, img, band)
	}
	return msgs
}
