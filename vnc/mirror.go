package vnc

import (
	"fmt"
	"image"
	"sync"
)

// Damage says what one change to the mirror touched.
type Damage struct {
	// Rect bounds the pixels that changed, in framebuffer coordinates; empty
	// when only the cursor changed.
	Rect image.Rectangle
	// Resized is set when the framebuffer changed size; Rect then covers the
	// whole new framebuffer.
	Resized bool
	// Cursor is set when the cursor image changed.
	Cursor bool
}

// Empty reports whether d records no change.
func (d Damage) Empty() bool { return d.Rect.Empty() && !d.Resized && !d.Cursor }

func (d Damage) union(o Damage) Damage {
	return Damage{Rect: d.Rect.Union(o.Rect), Resized: d.Resized || o.Resized, Cursor: d.Cursor || o.Cursor}
}

// cursor is the server-defined pointer image.
type cursor struct {
	img *image.RGBA // alpha 0 or 0xff from the mask; nil if none
	hot image.Point
}

// mirror is the client's copy of the server framebuffer and cursor. Updates
// are applied under the write lock one whole message at a time, so a
// snapshot never shows half a message.
type mirror struct {
	mu  sync.RWMutex
	img *image.RGBA
	cur cursor
	// version counts changes of img's pixels or size (not of the cursor):
	// a FrameCache keys encoded frames by it.
	version uint64
}

func newMirror(w, h int) *mirror {
	return &mirror{img: opaqueBlack(w, h)}
}

func opaqueBlack(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 3; i < len(img.Pix); i += 4 {
		img.Pix[i] = 0xff
	}
	return img
}

func (m *mirror) size() image.Point {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.img.Rect.Size()
}

// resize reallocates the framebuffer if its size differs from w×h.
func (m *mirror) resize(w, h int) Damage {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.img.Rect.Dx() == w && m.img.Rect.Dy() == h {
		return Damage{}
	}
	m.img = opaqueBlack(w, h)
	m.version++
	return Damage{Rect: m.img.Rect, Resized: true}
}

// frameVersion returns the version and size of the framebuffer.
func (m *mirror) frameVersion() (uint64, image.Point) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.version, m.img.Rect.Size()
}

// readFrame calls f with the framebuffer and its version under the read
// lock: updates wait until f returns.
func (m *mirror) readFrame(f func(img *image.RGBA, version uint64)) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f(m.img, m.version)
}

// effect is what applying one update did.
type effect struct {
	Damage
	response bool // the update answered a FramebufferUpdateRequest
	extKey   bool // QEMU acknowledged the extended key event
}

// apply copies u into the mirror, converting pixels with conv.
func (m *mirror) apply(u *Update, conv converter) (effect, error) {
	var eff effect
	eff.response = u.IsResponse()
	m.mu.Lock()
	defer m.mu.Unlock()
	defer func() {
		if !eff.Rect.Empty() || eff.Resized {
			m.version++
		}
	}()
	for i, r := range u.Rects {
		switch r.Encoding {
		case EncodingRaw:
			if r.Empty() {
				continue
			}
			if !r.Rectangle.In(m.img.Rect) {
				return eff, fmt.Errorf("apply rect %d (%v): outside the %v framebuffer: %w", i+1, r.Rectangle, m.img.Rect.Size(), ErrProtocol)
			}
			eff.Rect = eff.Rect.Union(m.blit(r, conv))
		case EncodingDesktopSize:
			if m.img.Rect.Dx() != r.Dx() || m.img.Rect.Dy() != r.Dy() {
				m.img = opaqueBlack(r.Dx(), r.Dy())
				eff.Resized = true
				eff.Rect = m.img.Rect
			}
		case EncodingCursor:
			m.cur = decodeCursor(r, conv)
			eff.Cursor = true
		case EncodingQEMUExtendedKeyEvent:
			eff.extKey = true
		}
	}
	return eff, nil
}

// blit converts one raw rectangle into the mirror and returns the part
// that changed (whole rows of the rectangle).
func (m *mirror) blit(r Rect, conv converter) image.Rectangle {
	w := r.Dx()
	srcStride := w * 4
	first, last := -1, -1
	for y := 0; y < r.Dy(); y++ {
		off := m.img.PixOffset(r.Min.X, r.Min.Y+y)
		if conv.row(m.img.Pix[off:off+srcStride], r.Pixels[y*srcStride:(y+1)*srcStride]) {
			if first < 0 {
				first = y
			}
			last = y
		}
	}
	if first < 0 {
		return image.Rectangle{}
	}
	return image.Rect(r.Min.X, r.Min.Y+first, r.Max.X, r.Min.Y+last+1)
}

func decodeCursor(r Rect, conv converter) cursor {
	w, h := r.Dx(), r.Dy()
	if w == 0 || h == 0 {
		return cursor{}
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	conv.row(img.Pix, r.Pixels)
	bpr := (w + 7) / 8
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			a := uint8(0)
			if r.Mask[y*bpr+x/8]&(0x80>>(x%8)) != 0 {
				a = 0xff
			}
			img.Pix[img.PixOffset(x, y)+3] = a
		}
	}
	return cursor{img: img, hot: r.Min}
}

// snapshot returns a copy of the framebuffer; with pointer set, the cursor
// is drawn with its hotspot at *pointer.
func (m *mirror) snapshot(pointer *image.Point) *image.RGBA {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := &image.RGBA{Pix: make([]byte, len(m.img.Pix)), Stride: m.img.Stride, Rect: m.img.Rect}
	copy(out.Pix, m.img.Pix)
	if pointer == nil || m.cur.img == nil {
		return out
	}
	origin := pointer.Sub(m.cur.hot)
	area := m.cur.img.Rect.Add(origin).Intersect(out.Rect)
	for y := area.Min.Y; y < area.Max.Y; y++ {
		for x := area.Min.X; x < area.Max.X; x++ {
			s := m.cur.img.PixOffset(x-origin.X, y-origin.Y)
			if m.cur.img.Pix[s+3] == 0 {
				continue
			}
			copy(out.Pix[out.PixOffset(x, y):][:4], m.cur.img.Pix[s:s+4])
		}
	}
	return out
}

// cursorImage returns a copy of the cursor image and its hotspot, or nil.
func (m *mirror) cursorImage() (*image.RGBA, image.Point) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.cur.img == nil {
		return nil, image.Point{}
	}
	c := *m.cur.img
	c.Pix = append([]byte(nil), c.Pix...)
	return &c, m.cur.hot
}
