package replay

import (
	"bytes"
	"fmt"
	"image"
	"image/draw"
	_ "image/jpeg" // an agent may have asked for JPEG screenshots
	_ "image/png"
)

// The distance between a recorded screenshot and a replayed one.
const (
	// Mismatch is the fraction of pixels whose largest channel difference
	// exceeds MismatchTolerance: 0 for equal pictures, 1 when every pixel
	// differs or the sizes differ.
	Mismatch = "mismatch"
	// MismatchTolerance is the channel difference (of 255) a pixel may
	// have and still match: anti-aliasing and most JPEG noise stay under
	// it.
	MismatchTolerance = 32
	// DefaultThreshold is the distance past which a step diverged: 512
	// pixels of a 1280x800 screen. Measured on the desktop image
	// (testdata/README.md): a terminal window that did not open is 0.30,
	// one line of a command's output 0.00089 (910 pixels), a moved
	// pointer 0.00019, the same screen as JPEG against PNG 0.0014 (replay
	// asks for the recorded format, so that case compares equal
	// encodings); 1% would miss a whole line of output.
	DefaultThreshold = 0.0005
)

// MismatchDistance is the Mismatch distance of two pictures.
func MismatchDistance(a, b image.Image) float64 {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 1
	}
	ra, rb := toRGBA(a), toRGBA(b)
	w, h := ra.Rect.Dx(), ra.Rect.Dy()
	if w == 0 || h == 0 {
		return 0
	}
	differ := 0
	for y := range h {
		pa := ra.Pix[y*ra.Stride : y*ra.Stride+4*w]
		pb := rb.Pix[y*rb.Stride : y*rb.Stride+4*w]
		for i := 0; i < len(pa); i += 4 {
			if absDiff(pa[i], pb[i]) > MismatchTolerance || absDiff(pa[i+1], pb[i+1]) > MismatchTolerance ||
				absDiff(pa[i+2], pb[i+2]) > MismatchTolerance {
				differ++
			}
		}
	}
	return float64(differ) / float64(w*h)
}

// DecodedDistance decodes two encoded pictures (PNG or JPEG) and returns
// their Mismatch distance.
func DecodedDistance(a, b []byte) (float64, error) {
	ia, _, err := image.Decode(bytes.NewReader(a))
	if err != nil {
		return 0, fmt.Errorf("decode recorded picture: %w", err)
	}
	ib, _, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("decode replayed picture: %w", err)
	}
	return MismatchDistance(ia, ib), nil
}

func absDiff(a, b uint8) uint8 {
	if a > b {
		return a - b
	}
	return b - a
}

// toRGBA returns img as an *image.RGBA with its origin at 0,0 (screenshots
// decode as NRGBA or RGBA; alpha is opaque either way).
func toRGBA(img image.Image) *image.RGBA {
	if r, ok := img.(*image.RGBA); ok && r.Rect.Min == (image.Point{}) {
		return r
	}
	b := img.Bounds()
	r := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	draw.Draw(r, r.Rect, img, b.Min, draw.Src)
	return r
}
