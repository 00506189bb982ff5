package screen

import (
	"image"
	"image/color"

	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// font is the face all text is drawn with.
var font = basicfont.Face7x13

// GlyphSize is the size of a drawn glyph box: the font's 6×13 box scaled by
// GlyphScale. The glyph occupies the left part of its cell.
var GlyphSize = image.Pt(font.Width*GlyphScale, (font.Ascent+font.Descent)*GlyphScale)

// DrawGlyph draws rune r with its glyph box's top-left corner at at: every
// set pixel of the font's mask becomes a GlyphScale×GlyphScale square of
// colour c; unset pixels are left alone. Runes the font lacks draw its
// replacement glyph. It returns the glyph box.
func DrawGlyph(img *image.RGBA, at image.Point, r rune, c color.RGBA) image.Rectangle {
	box := image.Rectangle{Min: at, Max: at.Add(GlyphSize)}
	_, mask, mp, _, _ := font.Glyph(fixed.P(0, font.Ascent), r)
	if mask == nil {
		return box
	}
	alpha := mask.(*image.Alpha)
	for y := 0; y < font.Ascent+font.Descent; y++ {
		for x := 0; x < font.Width; x++ {
			if alpha.AlphaAt(mp.X+x, mp.Y+y).A < 0x80 {
				continue
			}
			sq := image.Rect(0, 0, GlyphScale, GlyphScale).Add(at.Add(image.Pt(x*GlyphScale, y*GlyphScale)))
			fill(img, sq, c)
		}
	}
	return box
}

// DrawString draws s on one line starting with the glyph box of its first
// rune at at, advancing CellWidth per rune, and returns the covered area.
func DrawString(img *image.RGBA, at image.Point, s string, c color.RGBA) image.Rectangle {
	var r image.Rectangle
	for _, ch := range s {
		r = r.Union(DrawGlyph(img, at, ch, c))
		at.X += CellWidth
	}
	return r
}

// fill paints rectangle r of img (clipped to it) with c.
func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) image.Rectangle {
	r = r.Intersect(img.Rect)
	if r.Empty() {
		return r
	}
	px := [4]uint8{c.R, c.G, c.B, c.A}
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := img.Pix[img.PixOffset(r.Min.X, y):img.PixOffset(r.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			copy(row[i:i+4], px[:])
		}
	}
	return r
}
