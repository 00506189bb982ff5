package replay

import (
	"image"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func readPicture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The distance on real screenshots of the desktop image (testdata/README.md):
// what a replay must call the same, and what it must call diverged.
func TestMismatchOnRealScreens(t *testing.T) {
	for _, tc := range []struct {
		a, b     string
		want     float64 // the measured distance
		diverged bool    // past DefaultThreshold
	}{
		{"desktop.png", "desktop.png", 0, false},
		{"terminal-ran.png", "terminal-ran.png", 0, false},
		// The pointer is part of the picture; a moved one is a few
		// hundred pixels.
		{"terminal-ran.png", "terminal-ran-pointer-moved.png", 0.000192, false},
		// One line of a command's output (and the new prompt) diverges.
		{"terminal-typed.png", "terminal-ran.png", 0.000889, true},
		// A terminal that did not open.
		{"desktop.png", "terminal-typed.png", 0.301850, true},
		// JPEG noise on the same screen exceeds the tolerance at text
		// edges: replay asks for the recorded format instead.
		{"desktop.png", "desktop.jpg", 0.001423, true},
	} {
		d, err := DecodedDistance(readPicture(t, tc.a), readPicture(t, tc.b))
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(d-tc.want) > 0.0000015 {
			t.Errorf("%s vs %s: %s %.6f, want %.6f", tc.a, tc.b, Mismatch, d, tc.want)
		}
		if got := d > DefaultThreshold; got != tc.diverged {
			t.Errorf("%s vs %s: distance %.6f diverged=%v at threshold %g, want %v", tc.a, tc.b, d, got, DefaultThreshold, tc.diverged)
		}
		// Symmetric.
		if back, _ := DecodedDistance(readPicture(t, tc.b), readPicture(t, tc.a)); back != d {
			t.Errorf("%s vs %s: %.6f one way, %.6f the other", tc.a, tc.b, d, back)
		}
	}
}

func TestMismatchEdges(t *testing.T) {
	a := image.NewRGBA(image.Rect(0, 0, 10, 10))
	b := image.NewRGBA(image.Rect(0, 0, 10, 10))
	// A channel off by the tolerance matches; one more does not.
	a.Set(0, 0, color.RGBA{100, 100, 100, 255})
	b.Set(0, 0, color.RGBA{100 + MismatchTolerance, 100, 100, 255})
	a.Set(1, 0, color.RGBA{100, 100, 100, 255})
	b.Set(1, 0, color.RGBA{100, 100, 100 - MismatchTolerance - 1, 255})
	if d := MismatchDistance(a, b); d != 0.01 {
		t.Errorf("one pixel of 100 past the tolerance: %v, want 0.01", d)
	}
	// Another size is as far as can be.
	if d := MismatchDistance(a, image.NewRGBA(image.Rect(0, 0, 10, 11))); d != 1 {
		t.Errorf("different sizes: %v, want 1", d)
	}
	// A sub-image is compared from its own origin.
	big := image.NewRGBA(image.Rect(0, 0, 20, 20))
	copy(big.Pix, make([]byte, len(big.Pix)))
	if d := MismatchDistance(big.SubImage(image.Rect(5, 5, 15, 15)), image.NewRGBA(image.Rect(0, 0, 10, 10))); d != 0 {
		t.Errorf("sub-image: %v, want 0", d)
	}
	if _, err := DecodedDistance([]byte("not a picture"), readPicture(t, "desktop.png")); err == nil {
		t.Error("a non-picture decoded")
	}
}
