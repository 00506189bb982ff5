package desk

import (
	"bytes"
	"image"
	"image/jpeg"
	"image/png"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"
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
// stream; see the comment at the top of hub.go.
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
							err = jpeg.Encode(&buf, img.SubImage(r), &jpeg.Options{Quality: StreamJPEGQuality})
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

func testDesk(t *testing.T, disp *fakeDisplay) *Desk {
	t.Helper()
	d := newDesk("vm1", disp, DefaultMaxExecutors, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { d.close(&ClosedError{VM: "vm1", Reason: "test over"}) })
	return d
}

// waitFrame waits for v's next frame.
func waitFrame(t *testing.T, v *Viewer) *Frame {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		f, err := v.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f != nil {
			return f
		}
		select {
		case <-v.Wake():
		case <-deadline:
			t.Fatal("no frame in 5s")
		}
	}
}

func rectOf(f *Frame) image.Rectangle {
	u := func(i int) int { return int(f.Data[i])<<8 | int(f.Data[i+1]) }
	return image.Rect(u(5), u(7), u(5)+u(9), u(7)+u(11))
}

func TestHubDeltasAndKeyFrames(t *testing.T) {
	disp := newFakeDisplay(64, 48)
	d := testDesk(t, disp)
	v, err := d.Watch(0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()

	first := waitFrame(t, v)
	if first.Kind() != FrameKey || rectOf(first) != image.Rect(0, 0, 64, 48) {
		t.Fatalf("first frame: kind %d rect %v, want a key frame of the whole screen", first.Kind(), rectOf(first))
	}
	if f, _ := v.Next(); f != nil {
		t.Fatalf("a current viewer got frame %d; a still screen must send nothing", f.Seq)
	}

	disp.paint(image.Rect(8, 8, 16, 16), 200)
	delta := waitFrame(t, v)
	if delta.Kind() != FrameDelta || rectOf(delta) != image.Rect(8, 8, 16, 16) {
		t.Fatalf("one state behind: kind %d rect %v, want the delta of the painted square", delta.Kind(), rectOf(delta))
	}

	// A viewer that missed states (slow, or joining late) gets one key frame
	// of the newest state, encoded once for all such viewers.
	slow, _ := d.Watch(0)
	defer slow.Close()
	var latest *Frame
	for _, r := range []image.Rectangle{image.Rect(20, 20, 30, 30), image.Rect(40, 4, 50, 10)} {
		disp.paint(r, 90)
		if latest = waitFrame(t, v); rectOf(latest) != r {
			t.Fatalf("frame of %v after painting %v", rectOf(latest), r)
		}
	}
	k := waitFrame(t, slow)
	if k.Kind() != FrameKey || k.Seq != latest.Seq {
		t.Fatalf("stale viewer got kind %d of seq %d, want a key frame of the newest state %d", k.Kind(), k.Seq, latest.Seq)
	}
	late, _ := d.Watch(0)
	defer late.Close()
	if k2 := waitFrame(t, late); k2 != k {
		t.Errorf("two stale viewers got two encodings of one state's key frame: %d %p %d %p", k.Seq, k, k2.Seq, k2)
	}
}
