package desk

import (
	"bytes"
	"context"
	"image"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/vnc"
)

// fakeDisplay is a Display whose framebuffer tests paint by hand. It keeps
// what a guest would: the keys held down and the button mask.
type fakeDisplay struct {
	mu      sync.Mutex
	img     *image.RGBA
	subs    map[chan vnc.Damage]struct{}
	held    map[uint32]bool
	buttons uint8
	ptr     image.Point
	// noPtr: no pointer event was sent yet, so CursorPos cannot say (as
	// vnc.Client's, -1, -1); Pointer clears it.
	noPtr  bool
	closed bool
	broken error // when set, input fails with it, as a socket whose QEMU was killed
	events int   // input events received
}

var _ Display = (*fakeDisplay)(nil)

func newFakeDisplay(w, h int) *fakeDisplay {
	return &fakeDisplay{img: image.NewRGBA(image.Rect(0, 0, w, h)), subs: map[chan vnc.Damage]struct{}{}, held: map[uint32]bool{}}
}

func (f *fakeDisplay) Size() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.img.Rect.Dx(), f.img.Rect.Dy()
}

func (f *fakeDisplay) SnapshotRaw() *image.RGBA {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := *f.img
	c.Pix = bytes.Clone(f.img.Pix)
	return &c
}

func (f *fakeDisplay) Snapshot() *image.RGBA { return f.SnapshotRaw() }

func (f *fakeDisplay) Pointer(x, y int, buttons uint8) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return vnc.ErrClosed
	}
	f.ptr, f.buttons = image.Pt(x, y), buttons
	f.noPtr = false
	f.events++
	return nil
}

func (f *fakeDisplay) Key(keysym uint32, _ uint16, down bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return vnc.ErrClosed
	}
	if f.broken != nil {
		return f.broken
	}
	if down {
		f.held[keysym] = true
	} else {
		delete(f.held, keysym)
	}
	f.events++
	return nil
}

func (f *fakeDisplay) Settle(ctx context.Context, _, _ time.Duration) (time.Duration, error) {
	return 0, ctx.Err()
}

func (f *fakeDisplay) CursorPos() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noPtr {
		return -1, -1
	}
	return f.ptr.X, f.ptr.Y
}

func (f *fakeDisplay) Damage() (<-chan vnc.Damage, func()) {
	ch := make(chan vnc.Damage, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		close(ch)
		return ch, func() {}
	}
	f.subs[ch] = struct{}{}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.subs[ch]; ok {
			delete(f.subs, ch)
			close(ch)
		}
	}
}

func (f *fakeDisplay) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		for ch := range f.subs {
			close(ch)
		}
		clear(f.subs)
	}
	return nil
}

// guest returns what the guest holds: keysyms and the button mask.
func (f *fakeDisplay) guest() (keys int, buttons uint8) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held), f.buttons
}

func (f *fakeDisplay) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// paint fills r with grey v and notifies subscribers.
func (f *fakeDisplay) paint(r image.Rectangle, v uint8) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			i := f.img.PixOffset(x, y)
			f.img.Pix[i], f.img.Pix[i+1], f.img.Pix[i+2], f.img.Pix[i+3] = v, v, v, 0xff
		}
	}
	for ch := range f.subs {
		select {
		case ch <- vnc.Damage{Rect: r}:
		default: // the fake does not merge: tests paint slower than the hub reads
		}
	}
}
