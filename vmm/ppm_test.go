package vmm

import (
	"image/color"
	"testing"
)

func TestDecodePPM(t *testing.T) {
	in := append([]byte("P6\n# made by hand\n2 1\n255\n"), 255, 0, 0, 1, 2, 3)
	img, err := decodePPM(in)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != 2 || img.Bounds().Dy() != 1 {
		t.Fatalf("size %v", img.Bounds())
	}
	if got := img.RGBAAt(1, 0); got != (color.RGBA{1, 2, 3, 255}) {
		t.Fatalf("pixel %v", got)
	}
	for _, bad := range []string{"P5\n1 1\n255\n\x00", "P6\n2 1\n255\n\x00\x00", "P6\nx 1\n255\n", "P6\n1 1\n65535\n"} {
		if _, err := decodePPM([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
