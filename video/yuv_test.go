package video

import (
	"bytes"
	"image"
	"os/exec"
	"testing"
)

// TestYUVMatchesFFmpeg converts a busy picture both here and with ffmpeg's
// swscale: the planes agree within rounding. swscale's area filter is the
// same 2x2 mean for the chroma as here (its default bicubic blurs chroma
// across blocks, up to 28 levels away on this picture; the luma agrees
// with any filter).
func TestYUVMatchesFFmpeg(t *testing.T) {
	needFFmpeg(t)
	const w, h = 64, 48
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < len(img.Pix); i += 4 {
		p := i / 4
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = byte(p*7), byte(p*13+p/w*5), byte(p*29), 255
	}
	f := newYUVFrame(w, h)
	f.update(img)
	cmd := exec.Command("ffmpeg", "-v", "error", "-f", "rawvideo", "-pix_fmt", "rgba", "-s", "64x48", "-i", "pipe:0",
		"-sws_flags", "area+accurate_rnd", "-pix_fmt", "yuv420p", "-f", "rawvideo", "pipe:1")
	cmd.Stdin = bytes.NewReader(img.Pix)
	want, err := cmd.Output()
	if err != nil || len(want) != len(f.buf) {
		t.Fatalf("ffmpeg: %v, %d bytes for %d", err, len(want), len(f.buf))
	}
	for _, plane := range []struct {
		name     string
		from, to int
	}{{"Y", 0, w * h}, {"U", w * h, w * h * 5 / 4}, {"V", w * h * 5 / 4, w * h * 3 / 2}} {
		worst := 0
		for i := plane.from; i < plane.to; i++ {
			d := int(want[i]) - int(f.buf[i])
			worst = max(worst, d, -d)
		}
		if worst > 2 {
			t.Errorf("%s differs from ffmpeg's by up to %d", plane.name, worst)
		}
	}
}

// TestYUVUpdatesChangedRows changes one pixel: the frame then equals a
// fresh conversion of the new picture.
func TestYUVUpdatesChangedRows(t *testing.T) {
	s := newScreen(40, 30)
	f := newYUVFrame(40, 30)
	f.update(s.Snapshot())
	s.paint()
	img := s.Snapshot()
	f.update(img)
	fresh := newYUVFrame(40, 30)
	fresh.update(img)
	if !bytes.Equal(f.buf, fresh.buf) {
		t.Error("updated frame differs from a fresh conversion")
	}
}
