package player

import (
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/actions"
)

func TestAutoScreenshotSize(t *testing.T) {
	cases := []struct {
		w, h   int
		sw, sh int
	}{
		{1920, 1080, 1366, 768}, // 16:9 -> FWXGA
		{2560, 1440, 1366, 768},
		{1366, 768, 1366, 768},  // already FWXGA: native
		{1920, 1200, 1280, 800}, // 16:10 -> WXGA
		{1440, 900, 1280, 800},
		{1280, 800, 1280, 800},  // WXGA itself: native
		{1600, 1200, 1024, 768}, // 4:3 -> XGA
		{1024, 768, 1024, 768},
		{800, 600, 800, 600},     // smaller than XGA: native
		{1280, 1024, 1280, 1024}, // 5:4 matches nothing: native
		{3840, 2160, 1366, 768},
		{1025, 760, 1025, 760}, // aspect within 0.02 of XGA but XGA is taller: native (no upscaling)
	}
	for _, c := range cases {
		s, err := NewScaler(c.w, c.h, ScreenshotSize{Mode: SizeAuto})
		if err != nil {
			t.Fatalf("%dx%d: %v", c.w, c.h, err)
		}
		if sw, sh := s.ScreenshotSize(); sw != c.sw || sh != c.sh {
			t.Errorf("auto %dx%d -> %dx%d, want %dx%d", c.w, c.h, sw, sh, c.sw, c.sh)
		}
	}
}

func TestParseScreenshotSize(t *testing.T) {
	for in, want := range map[string]ScreenshotSize{
		"":         {Mode: SizeNative},
		"native":   {Mode: SizeNative},
		"AUTO":     {Mode: SizeAuto},
		"1280x800": {Mode: SizeFixed, Width: 1280, Height: 800},
		"1024X768": {Mode: SizeFixed, Width: 1024, Height: 768},
	} {
		got, err := ParseScreenshotSize(in)
		if err != nil || got != want {
			t.Errorf("ParseScreenshotSize(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"big", "0x10", "10x", "x10", "-5x5", "1280x800x2", "99999x1"} {
		if _, err := ParseScreenshotSize(bad); !errors.Is(err, actions.ErrInvalid) {
			t.Errorf("ParseScreenshotSize(%q) = %v, want error", bad, err)
		}
	}
	var v struct {
		Size ScreenshotSize `json:"size"`
	}
	if err := json.Unmarshal([]byte(`{"size":"1366x768"}`), &v); err != nil || v.Size.Width != 1366 {
		t.Errorf("json: %+v %v", v, err)
	}
	b, _ := json.Marshal(v)
	if string(b) != `{"size":"1366x768"}` {
		t.Errorf("json marshal = %s", b)
	}
}

func TestFixedSizeBounds(t *testing.T) {
	if _, err := NewScaler(1280, 800, ScreenshotSize{Mode: SizeFixed, Width: 1366, Height: 768}); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("fixed wider than native: %v", err)
	}
	if _, err := NewScaler(1280, 800, ScreenshotSize{Mode: SizeFixed, Width: 1280, Height: 801}); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("fixed taller than native: %v", err)
	}
	s, err := NewScaler(1280, 800, ScreenshotSize{Mode: SizeFixed, Width: 1000, Height: 700})
	if err != nil || !s.Scaled() {
		t.Errorf("fixed 1000x700 on 1280x800: %v", err)
	}
}

// TestRoundTrip checks every screenshot pixel maps to a native pixel and back
// to itself, and every native pixel maps into the screenshot.
func TestRoundTrip(t *testing.T) {
	sizes := []struct {
		w, h int
		size ScreenshotSize
	}{
		{1920, 1080, ScreenshotSize{Mode: SizeAuto}},
		{1920, 1200, ScreenshotSize{Mode: SizeAuto}},
		{1600, 1200, ScreenshotSize{Mode: SizeAuto}},
		{1440, 900, ScreenshotSize{Mode: SizeAuto}},
		{3840, 2160, ScreenshotSize{Mode: SizeAuto}},
		{1280, 800, ScreenshotSize{Mode: SizeNative}},
		{1280, 800, ScreenshotSize{Mode: SizeFixed, Width: 1279, Height: 799}},
		{1280, 800, ScreenshotSize{Mode: SizeFixed, Width: 640, Height: 400}},
		{1280, 800, ScreenshotSize{Mode: SizeFixed, Width: 1, Height: 1}},
		{1366, 768, ScreenshotSize{Mode: SizeFixed, Width: 1000, Height: 333}},
		{1921, 1081, ScreenshotSize{Mode: SizeAuto}},
	}
	for _, c := range sizes {
		s, err := NewScaler(c.w, c.h, c.size)
		if err != nil {
			t.Fatal(err)
		}
		sw, sh := s.ScreenshotSize()
		// Axes are independent, so check each along the other's 0.
		for x := 0; x < sw; x++ {
			nx, _, err := s.ToNative(x, 0)
			if err != nil || nx < 0 || nx >= c.w {
				t.Fatalf("%dx%d %s: ToNative(%d) = %d, %v", c.w, c.h, c.size, x, nx, err)
			}
			if bx, _ := s.FromNative(nx, 0); bx != x {
				t.Fatalf("%dx%d %s: x %d -> native %d -> %d", c.w, c.h, c.size, x, nx, bx)
			}
		}
		for y := 0; y < sh; y++ {
			_, ny, err := s.ToNative(0, y)
			if err != nil || ny < 0 || ny >= c.h {
				t.Fatalf("%dx%d %s: ToNative(0,%d) = %d, %v", c.w, c.h, c.size, y, ny, err)
			}
			if _, by := s.FromNative(0, ny); by != y {
				t.Fatalf("%dx%d %s: y %d -> native %d -> %d", c.w, c.h, c.size, y, ny, by)
			}
		}
		for nx := 0; nx < c.w; nx++ {
			if x, _ := s.FromNative(nx, 0); x < 0 || x >= sw {
				t.Fatalf("%dx%d: FromNative(%d) = %d outside %d", c.w, c.h, nx, x, sw)
			}
		}
		// Corners.
		if nx, ny, _ := s.ToNative(sw-1, sh-1); nx >= c.w || ny >= c.h {
			t.Errorf("%dx%d: last pixel maps to %d,%d", c.w, c.h, nx, ny)
		}
	}
}

func TestToNativeOffScreen(t *testing.T) {
	s, _ := NewScaler(1920, 1080, ScreenshotSize{Mode: SizeAuto})
	for _, p := range [][2]int{{1366, 0}, {0, 768}, {-1, 5}, {5, -1}, {5000, 5000}} {
		_, _, err := s.ToNative(p[0], p[1])
		if !errors.Is(err, actions.ErrOutOfBounds) || !errors.Is(err, actions.ErrInvalid) {
			t.Errorf("ToNative(%v) = %v, want ErrOutOfBounds", p, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{fmt.Sprintf("[%d, %d]", p[0], p[1]), "1366x768", "0 to 1365", "0 to 767"} {
			if !strings.Contains(msg, want) {
				t.Errorf("ToNative(%v) error %q lacks %q", p, msg, want)
			}
		}
	}
	if x, y, err := s.ToNative(1365, 767); err != nil || x != 1919 || y != 1079 {
		t.Errorf("ToNative(last) = %d,%d,%v", x, y, err)
	}
	if x, y, err := s.ToNative(683, 384); err != nil || x != 960 || y != 540 {
		t.Errorf("ToNative(centre) = %d,%d,%v", x, y, err)
	}
}

func TestRegionToNative(t *testing.T) {
	s, _ := NewScaler(1920, 1080, ScreenshotSize{Mode: SizeAuto})
	r, err := s.RegionToNative([4]int{0, 0, 1366, 768})
	if err != nil || r != image.Rect(0, 0, 1920, 1080) {
		t.Errorf("whole screen -> %v, %v", r, err)
	}
	r, err = s.RegionToNative([4]int{0, 0, 683, 384})
	if err != nil || r != image.Rect(0, 0, 960, 540) {
		t.Errorf("quarter -> %v, %v", r, err)
	}
	// A one-pixel region covers every native pixel under it.
	for x := 0; x < 1366; x += 7 {
		r, err := s.RegionToNative([4]int{x, 0, x + 1, 1})
		if err != nil || r.Dx() < 1 {
			t.Fatalf("pixel %d -> %v, %v", x, r, err)
		}
		nx, _, _ := s.ToNative(x, 0)
		if nx < r.Min.X || nx >= r.Max.X {
			t.Errorf("pixel %d: centre %d outside region %v", x, nx, r)
		}
	}
	for _, bad := range [][4]int{{0, 0, 1367, 10}, {0, 0, 10, 769}, {5, 5, 5, 10}, {-1, 0, 5, 5}} {
		if _, err := s.RegionToNative(bad); !errors.Is(err, actions.ErrOutOfBounds) {
			t.Errorf("RegionToNative(%v) = %v, want ErrOutOfBounds", bad, err)
		}
	}
}

// TestZoomUsesNativePixels checks zoom crops the native framebuffer, not the
// downscaled screenshot: at 1:1 output the crop is the native pixels exactly.
func TestZoomUsesNativePixels(t *testing.T) {
	img := coordImage(1920, 1080)
	s, _ := NewScaler(1920, 1080, ScreenshotSize{Mode: SizeAuto})
	region := [4]int{683, 384, 783, 484} // 100x100 screenshot px
	r, _ := s.RegionToNative(region)
	out, err := s.Zoom(img, region, r.Dx(), r.Dy())
	if err != nil {
		t.Fatal(err)
	}
	if out.Rect.Dx() != r.Dx() || out.Rect.Dy() != r.Dy() {
		t.Fatalf("zoom size %v, want %v", out.Rect, r)
	}
	for y := 0; y < r.Dy(); y++ {
		for x := 0; x < r.Dx(); x++ {
			if got, want := out.RGBAAt(x, y), img.RGBAAt(r.Min.X+x, r.Min.Y+y); got != want {
				t.Fatalf("zoom pixel %d,%d = %v, want native %v", x, y, got, want)
			}
		}
	}
	// Default size: fit the screenshot size keeping the crop's aspect.
	out, err = s.Zoom(img, [4]int{0, 0, 683, 384}, 0, 0)
	if err != nil || out.Rect.Dx() != 1365 || out.Rect.Dy() != 768 {
		t.Errorf("default zoom = %v, %v; want 1365x768", out.Rect, err)
	}
	out, err = s.Zoom(img, [4]int{0, 0, 200, 100}, 400, 0)
	if err != nil || out.Rect.Dx() != 400 || out.Rect.Dy() != 200 {
		t.Errorf("zoom width 400 = %v, %v", out.Rect, err)
	}
	out, err = s.Zoom(img, [4]int{0, 0, 200, 100}, 0, 50)
	if err != nil || out.Rect.Dx() != 100 || out.Rect.Dy() != 50 {
		t.Errorf("zoom height 50 = %v, %v", out.Rect, err)
	}
	if _, err := s.Zoom(img, [4]int{0, 0, 2000, 10}, 0, 0); !errors.Is(err, actions.ErrOutOfBounds) {
		t.Errorf("zoom off-screen = %v", err)
	}
}

func TestScreenshotScales(t *testing.T) {
	img := coordImage(1920, 1080)
	s, _ := NewScaler(1920, 1080, ScreenshotSize{Mode: SizeAuto})
	out := s.Screenshot(img)
	if out.Rect.Dx() != 1366 || out.Rect.Dy() != 768 {
		t.Fatalf("screenshot %v", out.Rect)
	}
	for i := 3; i < len(out.Pix); i += 4 {
		if out.Pix[i] != 255 {
			t.Fatal("screenshot not opaque")
		}
	}
	n, _ := NewScaler(1920, 1080, ScreenshotSize{})
	if n.Screenshot(img) != img {
		t.Error("native screenshot should be the snapshot itself")
	}
}
