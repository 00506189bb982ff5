package web

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vnc"
)

// tinyFrame is QEMU 7.2's framebuffer of the tiny guest (vnc/testdata).
func tinyFrame(tb testing.TB) *image.RGBA {
	f, err := os.Open("../vnc/testdata/qemu-7.2-tiny-1280x800.png")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		tb.Fatal(err)
	}
	out := image.NewRGBA(img.Bounds())
	for y := 0; y < out.Rect.Dy(); y++ {
		for x := 0; x < out.Rect.Dx(); x++ {
			out.Set(x, y, img.At(x, y))
		}
	}
	return out
}

// photoFrame is a 1280x800 frame of smooth gradients plus noise: the worst
// case of a desktop (photos, video, anti-aliased text everywhere).
func photoFrame() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	r := rand.New(rand.NewPCG(1, 2))
	for y := 0; y < 800; y++ {
		for x := 0; x < 1280; x++ {
			i := img.PixOffset(x, y)
			n := uint8(r.IntN(24))
			img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = uint8(x/5)+n, uint8(y/4)+n, uint8((x+y)/8)+n, 0xff
		}
	}
	return img
}

// BenchmarkFrameEncode measures the frame formats considered for the
// stream; see the comment at the top of stream.go.
func BenchmarkFrameEncode(b *testing.B) {
	frames := map[string]*image.RGBA{"tiny": tinyFrame(b), "photo": photoFrame()}
	rects := map[string]image.Rectangle{
		"whole":  image.Rect(0, 0, 1280, 800),
		"line":   image.Rect(0, 100, 1280, 126), // a line of text
		"marker": image.Rect(688, 288, 712, 312),
	}
	for fname, img := range frames {
		for rname, r := range rects {
			for _, format := range []string{"jpeg", "png"} {
				b.Run(fname+"/"+rname+"/"+format, func(b *testing.B) {
					var size int
					for b.Loop() {
						var buf bytes.Buffer
						var err error
						if format == "jpeg" {
							err = jpeg.Encode(&buf, img.SubImage(r), &jpeg.Options{Quality: streamJPEGQuality})
						} else {
							err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img.SubImage(r))
						}
						if err != nil {
							b.Fatal(err)
						}
						size = buf.Len()
					}
					b.ReportMetric(float64(size), "bytes/frame")
				})
			}
		}
	}
}

// fakeScreen is a screen whose framebuffer tests change by hand.
type fakeScreen struct {
	mu   sync.Mutex
	img  *image.RGBA
	subs map[chan vnc.Damage]struct{}
	keys []uint32
	ptrs []image.Point
}

func newFakeScreen(w, h int) *fakeScreen {
	return &fakeScreen{img: image.NewRGBA(image.Rect(0, 0, w, h)), subs: map[chan vnc.Damage]struct{}{}}
}

func (f *fakeScreen) SnapshotRaw() *image.RGBA {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := *f.img
	c.Pix = bytes.Clone(f.img.Pix)
	return &c
}

func (f *fakeScreen) Damage() (<-chan vnc.Damage, func()) {
	ch := make(chan vnc.Damage, 1)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.subs, ch)
			f.mu.Unlock()
		})
	}
}

func (f *fakeScreen) Key(keysym uint32, _ uint16, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, keysym)
	return nil
}

func (f *fakeScreen) Pointer(x, y int, _ uint8) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ptrs = append(f.ptrs, image.Pt(x, y))
	return nil
}

// paint fills r with grey v and notifies subscribers.
func (f *fakeScreen) paint(r image.Rectangle, v uint8) {
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

func TestHubDeltasAndKeyFrames(t *testing.T) {
	scr := newFakeScreen(64, 48)
	hs := newHubs(nil)
	v := newViewer(0)
	h := hs.join("vm1", scr, v)
	defer hs.leave(h, v)

	msg, err := h.next(0)
	if err != nil || msg == nil {
		t.Fatalf("first frame: %v %v", msg, err)
	}
	first := msg.seq
	h.mu.Lock()
	key := h.key
	h.mu.Unlock()
	if key != msg {
		t.Error("the first state's message is not its key frame")
	}
	if m, _ := h.next(first); m != nil {
		t.Fatalf("a current viewer got frame %d; a still screen must send nothing", m.seq)
	}

	scr.paint(image.Rect(8, 8, 16, 16), 200)
	waitSeq(t, h, first+1)
	d, _ := h.next(first)
	if d.seq != first+1 || d.pm == nil {
		t.Fatalf("one state behind: got seq %d, want the delta %d", d.seq, first+1)
	}

	// A viewer that missed states gets a key frame of the newest, encoded once.
	time.Sleep(time.Second / MaxStreamFPS)
	scr.paint(image.Rect(20, 20, 30, 30), 90)
	waitSeq(t, h, first+2)
	k1, _ := h.next(first)
	k2, _ := h.next(0)
	h.mu.Lock()
	delta := h.delta
	h.mu.Unlock()
	if k1 != k2 || k1.seq != first+2 || k1 == delta {
		t.Fatalf("stale viewers got %p (seq %d) and %p; want one shared key frame of seq %d", k1, k1.seq, k2, first+2)
	}
}

func waitSeq(t *testing.T, h *hub, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		cur := h.seq
		h.mu.Unlock()
		if cur >= seq {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub at seq %d, want %d", cur, seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
