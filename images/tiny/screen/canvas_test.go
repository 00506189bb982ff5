package screen

import (
	"image"
	"image/color"
	"testing"

	"golang.org/x/image/font/basicfont"
)

func count(img *image.RGBA, r image.Rectangle, c color.RGBA) int {
	n := 0
	r = r.Intersect(img.Rect)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if img.RGBAAt(x, y) == c {
				n++
			}
		}
	}
	return n
}

func TestNewCanvas(t *testing.T) {
	c := NewCanvas(1280, 800)
	if got := c.Img.RGBAAt(1279, 799); got != Background {
		t.Errorf("corner = %v, want background", got)
	}
	if n := count(c.Img, c.Img.Rect, HeaderColor); n == 0 {
		t.Error("no header drawn")
	}
	if n := count(c.Img, TextArea(1280, 800), Background); n != TextArea(1280, 800).Dx()*TextArea(1280, 800).Dy() {
		t.Error("text area not blank")
	}
	if cols, rows := TextGrid(1280, 800); cols != 89 || rows != 24 {
		t.Errorf("TextGrid(1280, 800) = %d, %d", cols, rows)
	}
}

func TestMarker(t *testing.T) {
	c := NewCanvas(1280, 800)
	p := image.Pt(640, 400)
	r := c.Marker(ButtonRight, p)
	if r != image.Rect(636, 396, 645, 405) {
		t.Errorf("marker rect %v", r)
	}
	if n := count(c.Img, c.Img.Rect, MarkerRight); n != MarkerSize*MarkerSize {
		t.Errorf("%d marker pixels, want %d", n, MarkerSize*MarkerSize)
	}
	// Centred: symmetric about p on both axes.
	for d := 0; d <= MarkerHalf+1; d++ {
		in := d <= MarkerHalf
		for _, q := range []image.Point{p.Add(image.Pt(d, 0)), p.Sub(image.Pt(d, 0)), p.Add(image.Pt(0, d)), p.Sub(image.Pt(0, d))} {
			if (c.Img.RGBAAt(q.X, q.Y) == MarkerRight) != in {
				t.Errorf("pixel %v: marker %v, want %v", q, !in, in)
			}
		}
	}
	// Clipped at the corner.
	r = c.Marker(ButtonLeft, image.Pt(0, 0))
	if r != image.Rect(0, 0, MarkerHalf+1, MarkerHalf+1) {
		t.Errorf("corner marker rect %v", r)
	}
}

func TestGlyph(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 40, 40))
	box := DrawGlyph(img, image.Pt(3, 4), 'A', TextColor)
	if box != image.Rect(3, 4, 3+12, 4+26) {
		t.Errorf("box %v", box)
	}
	mask := basicfont.Face7x13.Mask.(*image.Alpha)
	set := 0
	base := ('A' - 0x20) * 13
	for y := 0; y < 13; y++ {
		for x := 0; x < 6; x++ {
			if mask.AlphaAt(x, int(base)+y).A >= 0x80 {
				set++
				if img.RGBAAt(3+2*x+1, 4+2*y+1) != TextColor {
					t.Fatalf("font pixel %d,%d not drawn", x, y)
				}
			}
		}
	}
	if set == 0 || count(img, img.Rect, TextColor) != set*GlyphScale*GlyphScale {
		t.Errorf("%d drawn pixels for %d font pixels", count(img, img.Rect, TextColor), set)
	}
}

func TestTyping(t *testing.T) {
	c := NewCanvas(1280, 800)
	c.TypeString("Hi\nyo")
	if got := c.Text(); got != "Hi\nyo" {
		t.Errorf("Text() = %q", got)
	}
	want := NewCanvas(1280, 800)
	DrawGlyph(want.Img, CellRect(0, 0).Min.Add(image.Pt(0, GlyphOffsetY)), 'H', TextColor)
	DrawGlyph(want.Img, CellRect(1, 0).Min.Add(image.Pt(0, GlyphOffsetY)), 'i', TextColor)
	DrawGlyph(want.Img, CellRect(0, 1).Min.Add(image.Pt(0, GlyphOffsetY)), 'y', TextColor)
	DrawGlyph(want.Img, CellRect(1, 1).Min.Add(image.Pt(0, GlyphOffsetY)), 'o', TextColor)
	if !sameImage(c.Img, want.Img) {
		t.Error("typed text differs from glyphs drawn in cells")
	}
	// Backspace over "yo" and the newline, then type again.
	c.TypeString("\b\b\b")
	if got, cur := c.Text(), c.Cursor(); got != "Hi" || cur != image.Pt(2, 0) {
		t.Errorf("after backspaces: %q cursor %v", got, cur)
	}
	c.Type('!')
	want = NewCanvas(1280, 800)
	want.TypeString("Hi!")
	if !sameImage(c.Img, want.Img) {
		t.Error("backspaced cells not cleared")
	}
	c.TypeString("\b\b\b\b\b")
	if c.Text() != "" || !sameImage(c.Img, NewCanvas(1280, 800).Img) {
		t.Error("backspacing everything does not give a blank text area")
	}
}

func TestWrapAndClear(t *testing.T) {
	c := NewCanvas(1280, 800)
	cols, rows := TextGrid(1280, 800)
	line := make([]rune, cols)
	for i := range line {
		line[i] = 'x'
	}
	c.TypeString(string(line))
	if cur := c.Cursor(); cur != image.Pt(cols, 0) {
		t.Fatalf("cursor after a full line %v", cur)
	}
	c.Type('y')
	if cur := c.Cursor(); cur != image.Pt(1, 1) {
		t.Fatalf("cursor after wrap %v", cur)
	}
	c.Type(RuneBackspace)
	if cur := c.Cursor(); cur != image.Pt(0, 1) {
		t.Fatalf("cursor after backspacing the wrapped char %v", cur)
	}
	for i := 1; i < rows; i++ {
		c.Type(RuneNewline)
	}
	if cur := c.Cursor(); cur != image.Pt(0, rows) {
		t.Fatalf("cursor below the last row %v", cur)
	}
	c.Marker(ButtonLeft, TextOrigin.Add(image.Pt(100, 100)))
	c.Marker(ButtonLeft, image.Pt(5, 5)) // outside the text area: stays
	damage := c.Type('z')
	if damage != TextArea(1280, 800) {
		t.Errorf("page clear damage %v", damage)
	}
	want := NewCanvas(1280, 800)
	want.Marker(ButtonLeft, image.Pt(5, 5))
	want.Type('z')
	if !sameImage(c.Img, want.Img) || c.Text() != "z" {
		t.Error("page clear did not restart typing in a blank text area")
	}
}

func sameImage(a, b *image.RGBA) bool {
	if a.Rect != b.Rect {
		return false
	}
	for i := range a.Pix {
		if a.Pix[i] != b.Pix[i] {
			return false
		}
	}
	return true
}

func TestLogLines(t *testing.T) {
	cases := []struct{ got, want string }{
		{KeyLine(42, 1), "key down 42 leftshift\n"},
		{KeyLine(42, 0), "key up 42 leftshift\n"},
		{KeyLine(30, 2), "key repeat 30 a\n"},
		{ButtonLine(ButtonLeft, true, image.Pt(640, 400)), "button down left 640 400\n"},
		{ButtonLine(ButtonMiddle, false, image.Pt(0, 799)), "button up middle 0 799\n"},
		{MotionLine(image.Pt(100, 200)), "motion 100 200\n"},
		{WheelLine(-1, false), "wheel -1\n"},
		{WheelLine(1, true), "hwheel 1\n"},
		{TypedLine('A'), "char A\n"},
		{TypedLine(' '), "char  \n"},
		{TypedLine(RuneNewline), "newline\n"},
		{TypedLine(RuneBackspace), "backspace\n"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
