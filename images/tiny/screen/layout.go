package screen

import (
	"fmt"
	"image"
	"image/color"
)

// Files the guest keeps for tests to read through the guest agent.
const (
	// InputLogPath is the input log; see the package documentation.
	InputLogPath = "/run/deskfarm/input.log"
	// TextPath holds the text area's current text.
	TextPath = "/run/deskfarm/text"
	// ScreenPath holds the framebuffer size the guest draws on, "WxH\n".
	ScreenPath = "/run/deskfarm/screen"
)

// Colours. All are opaque; the guest's 32 bpp framebuffer keeps 8 bits per
// component, so a screenshot shows these exact values.
var (
	Background  = color.RGBA{0x10, 0x20, 0x40, 0xff}
	HeaderColor = color.RGBA{0x90, 0xa0, 0xb0, 0xff}
	TextColor   = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// Marker geometry: a press draws the square
// [x-MarkerHalf, x+MarkerHalf] × [y-MarkerHalf, y+MarkerHalf], clipped to the
// screen.
const (
	MarkerHalf = 4
	MarkerSize = 2*MarkerHalf + 1
)

// Text layout, in pixels.
const (
	// GlyphScale magnifies basicfont.Face7x13: each font pixel is a
	// GlyphScale×GlyphScale square.
	GlyphScale = 2
	// CellWidth is the horizontal advance of one character (7 font pixels).
	CellWidth = 7 * GlyphScale
	// CellHeight is the distance between text lines (15 font pixels: the
	// 13-pixel glyph box and one blank font pixel above and below it).
	CellHeight = 15 * GlyphScale
	// GlyphOffsetY is where the glyph box starts inside its cell.
	GlyphOffsetY = 1 * GlyphScale
	// TextMargin is the blank border left of, right of and below the text area.
	TextMargin = 16
)

// Positions of the header and of the text area's top-left cell.
var (
	HeaderOrigin = image.Point{X: TextMargin, Y: 8}
	TextOrigin   = image.Point{X: TextMargin, Y: 8 + CellHeight + 10}
)

// Header returns the header line drawn on a w×h screen.
func Header(w, h int) string {
	return fmt.Sprintf("deskfarm tiny %dx%d", w, h)
}

// TextGrid returns how many character cells fit on a line and how many lines
// fit in the text area of a w×h screen (at least 1 each).
func TextGrid(w, h int) (cols, rows int) {
	cols = (w - TextOrigin.X - TextMargin) / CellWidth
	rows = (h - TextOrigin.Y - TextMargin) / CellHeight
	return max(cols, 1), max(rows, 1)
}

// CellRect is the rectangle of the text cell in column col and row row.
func CellRect(col, row int) image.Rectangle {
	min := TextOrigin.Add(image.Pt(col*CellWidth, row*CellHeight))
	return image.Rectangle{Min: min, Max: min.Add(image.Pt(CellWidth, CellHeight))}
}

// TextArea is the rectangle covered by all text cells of a w×h screen.
func TextArea(w, h int) image.Rectangle {
	cols, rows := TextGrid(w, h)
	return image.Rectangle{Min: TextOrigin, Max: TextOrigin.Add(image.Pt(cols*CellWidth, rows*CellHeight))}
}

// MarkerRect is the square a press at p draws, before clipping.
func MarkerRect(p image.Point) image.Rectangle {
	return image.Rect(p.X-MarkerHalf, p.Y-MarkerHalf, p.X+MarkerHalf+1, p.Y+MarkerHalf+1)
}
