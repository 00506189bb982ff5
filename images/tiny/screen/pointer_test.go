package screen

import (
	"image"
	"testing"
)

// Screen sizes the round trip is checked on: deskfarm's defaults, common
// sizes, widths that QEMU's VNC server rounds up, and sizes past its limits.
var roundTripSizes = []image.Point{
	{1280, 800}, {1920, 1080}, {1024, 768}, {800, 600}, {640, 480},
	{1366, 768}, {1000, 700}, {1281, 801}, {17, 9}, {1, 1},
	{2560, 1600}, {2560, 2048},
}

func TestPointerRoundTrip(t *testing.T) {
	for _, sz := range roundTripSizes {
		w, h := sz.X, sz.Y
		for x := 0; x < w; x++ {
			ax, _ := AbsPoint(image.Pt(x, 0), w, h)
			if got := Pointer(ax, 0, w, h).X; got != x {
				t.Fatalf("%dx%d: x %d -> abs %d -> %d", w, h, x, ax, got)
			}
		}
		for y := 0; y < h; y++ {
			_, ay := AbsPoint(image.Pt(0, y), w, h)
			if got := Pointer(0, ay, w, h).Y; got != y {
				t.Fatalf("%dx%d: y %d -> abs %d -> %d", w, h, y, ay, got)
			}
		}
	}
}

// TestAbsFromPixelMatchesQEMU checks values worked out by hand from
// qemu_input_scale_axis(value, 0, n, 0, 0x7fff) = value * 32767 / n.
func TestAbsFromPixelMatchesQEMU(t *testing.T) {
	cases := []struct{ p, n, want int }{
		{0, 1280, 0},
		{1, 1280, 25},      // 32767/1280 = 25.6
		{640, 1280, 16383}, // 16383.5
		{1279, 1280, 32741},
		{1280, 1280, 32767},
		{400, 800, 16383},
		{1919, 1920, 32749}, // 32749.93
		{1365, 1376, 32505}, // 1366 wide: the VNC extent is 1376
	}
	for _, c := range cases {
		if got := AbsFromPixel(c.p, c.n); got != c.want {
			t.Errorf("AbsFromPixel(%d, %d) = %d, want %d", c.p, c.n, got, c.want)
		}
	}
}

func TestVNCExtent(t *testing.T) {
	cases := []struct{ w, h, ew, eh int }{
		{1280, 800, 1280, 800},
		{1920, 1080, 1920, 1080},
		{1366, 768, 1376, 768},
		{1, 1, 16, 1},
		{3840, 2160, 2560, 2048},
	}
	for _, c := range cases {
		if ew, eh := VNCExtent(c.w, c.h); ew != c.ew || eh != c.eh {
			t.Errorf("VNCExtent(%d, %d) = %d, %d, want %d, %d", c.w, c.h, ew, eh, c.ew, c.eh)
		}
	}
}

func TestPointerClamps(t *testing.T) {
	cases := []struct {
		ax, ay int
		want   image.Point
	}{
		{0, 0, image.Pt(0, 0)},
		{AbsMax, AbsMax, image.Pt(1279, 799)},
		{-5, AbsMax + 100, image.Pt(0, 799)},
		{AbsMax / 2, AbsMax / 2, image.Pt(640, 400)},
	}
	for _, c := range cases {
		if got := Pointer(c.ax, c.ay, 1280, 800); got != c.want {
			t.Errorf("Pointer(%d, %d) = %v, want %v", c.ax, c.ay, got, c.want)
		}
	}
	// 1366 wide: the VNC client sees 1376 columns; those past 1365 clamp.
	ax, _ := AbsPoint(image.Pt(1370, 0), 1366, 768)
	if got := Pointer(ax, 0, 1366, 768).X; got != 1365 {
		t.Errorf("x 1370 on a 1366 screen -> %d, want 1365", got)
	}
}

func TestButtons(t *testing.T) {
	for code, want := range map[uint16]string{BtnLeft: "left", BtnRight: "right", BtnMiddle: "middle", BtnSide: "side", BtnExtra: "extra"} {
		b, ok := ButtonFromCode(code)
		if !ok || b.String() != want {
			t.Errorf("ButtonFromCode(%#x) = %v, %v, want %s", code, b, ok, want)
		}
	}
	if _, ok := ButtonFromCode(BtnGearUp); ok {
		t.Error("BTN_GEAR_UP is not a button with a marker")
	}
	seen := map[[3]uint8]Button{}
	for _, b := range []Button{ButtonLeft, ButtonMiddle, ButtonRight} {
		c := MarkerColor(b)
		k := [3]uint8{c.R, c.G, c.B}
		if other, dup := seen[k]; dup {
			t.Errorf("%v and %v share colour %v", b, other, c)
		}
		if c == Background || c == TextColor {
			t.Errorf("%v marker colour %v is the background or text colour", b, c)
		}
		seen[k] = b
	}
}
