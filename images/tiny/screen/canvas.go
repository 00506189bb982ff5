package screen

import (
	"image"
	"strings"
)

// Canvas is the guest screen as an image, with the text area's typing state.
// Its methods draw and return the rectangle they changed (empty if none), so
// a caller can copy just that to a framebuffer.
type Canvas struct {
	// Img is the screen. Draw on it only through Canvas methods.
	Img *image.RGBA

	cols, rows int
	// placed holds, for every rune typed since the text area was last
	// cleared, the cell the cursor was in when it was typed ('\n' included).
	placed []placedRune
	cursor image.Point // next cell; X may be cols (wrap pending), Y may be rows
}

type placedRune struct {
	r    rune
	cell image.Point
}

// NewCanvas returns the initial screen of a w×h display: background and
// header, empty text area.
func NewCanvas(w, h int) *Canvas {
	c := &Canvas{Img: image.NewRGBA(image.Rect(0, 0, w, h))}
	c.cols, c.rows = TextGrid(w, h)
	fill(c.Img, c.Img.Rect, Background)
	DrawString(c.Img, HeaderOrigin.Add(image.Pt(0, GlyphOffsetY)), Header(w, h), HeaderColor)
	return c
}

// Size returns the screen size.
func (c *Canvas) Size() image.Point { return c.Img.Rect.Size() }

// Marker draws the marker of a press of button b at p.
func (c *Canvas) Marker(b Button, p image.Point) image.Rectangle {
	return fill(c.Img, MarkerRect(p), MarkerColor(b))
}

// Type applies one typed rune: printable ASCII is drawn at the cursor,
// RuneNewline moves to the next line, RuneBackspace removes the last typed
// rune (clearing its cell). Other runes are ignored.
func (c *Canvas) Type(r rune) image.Rectangle {
	switch {
	case r == RuneBackspace:
		if len(c.placed) == 0 {
			return image.Rectangle{}
		}
		last := c.placed[len(c.placed)-1]
		c.placed = c.placed[:len(c.placed)-1]
		c.cursor = last.cell
		if last.r == RuneNewline {
			return image.Rectangle{}
		}
		return fill(c.Img, CellRect(last.cell.X, last.cell.Y), Background)
	case r == RuneNewline:
		c.placed = append(c.placed, placedRune{r, c.cursor})
		c.cursor = image.Pt(0, c.cursor.Y+1)
		return image.Rectangle{}
	case r < 0x20 || r > 0x7e:
		return image.Rectangle{}
	}
	var damage image.Rectangle
	if c.cursor.X >= c.cols {
		c.cursor = image.Pt(0, c.cursor.Y+1)
	}
	if c.cursor.Y >= c.rows {
		damage = c.Clear()
	}
	cell := CellRect(c.cursor.X, c.cursor.Y)
	fill(c.Img, cell, Background)
	DrawGlyph(c.Img, cell.Min.Add(image.Pt(0, GlyphOffsetY)), r, TextColor)
	c.placed = append(c.placed, placedRune{r, c.cursor})
	c.cursor.X++
	return damage.Union(cell)
}

// TypeString types every rune of s.
func (c *Canvas) TypeString(s string) image.Rectangle {
	var damage image.Rectangle
	for _, r := range s {
		damage = damage.Union(c.Type(r))
	}
	return damage
}

// Clear empties the text area (markers in it included) and moves the cursor
// to its top-left cell.
func (c *Canvas) Clear() image.Rectangle {
	c.placed = c.placed[:0]
	c.cursor = image.Point{}
	return fill(c.Img, TextArea(c.Img.Rect.Dx(), c.Img.Rect.Dy()), Background)
}

// Text returns what the text area holds: the runes typed since it was last
// cleared, less those backspaced, lines separated by '\n'.
func (c *Canvas) Text() string {
	var b strings.Builder
	for _, p := range c.placed {
		b.WriteRune(p.r)
	}
	return b.String()
}

// Cursor returns the cell the next character goes to, as (column, row);
// the column may equal the column count (the line wraps at the next
// character) and the row the row count (the area clears at the next
// character).
func (c *Canvas) Cursor() image.Point { return c.cursor }
