package vnc

import (
	"encoding/binary"
	"fmt"
)

// PixelFormat is an RFB pixel format (RFC 6143 section 7.4).
type PixelFormat struct {
	BPP, Depth                      uint8
	BigEndian, TrueColor            bool
	RedMax, GreenMax, BlueMax       uint16
	RedShift, GreenShift, BlueShift uint8
}

// WireFormat is the pixel format the client asks the server for: 32 bpp
// little-endian true colour, red at bit 16, green at 8, blue at 0. It is
// QEMU's own surface format (x8r8g8b8), so QEMU sends rows with memcpy.
var WireFormat = PixelFormat{
	BPP: 32, Depth: 24, BigEndian: false, TrueColor: true,
	RedMax: 255, GreenMax: 255, BlueMax: 255,
	RedShift: 16, GreenShift: 8, BlueShift: 0,
}

// BytesPerPixel is BPP/8.
func (pf PixelFormat) BytesPerPixel() int { return int(pf.BPP) / 8 }

// marshal returns the 16-byte PIXEL_FORMAT structure.
func (pf PixelFormat) marshal() [16]byte {
	var b [16]byte
	b[0], b[1] = pf.BPP, pf.Depth
	if pf.BigEndian {
		b[2] = 1
	}
	if pf.TrueColor {
		b[3] = 1
	}
	binary.BigEndian.PutUint16(b[4:], pf.RedMax)
	binary.BigEndian.PutUint16(b[6:], pf.GreenMax)
	binary.BigEndian.PutUint16(b[8:], pf.BlueMax)
	b[10], b[11], b[12] = pf.RedShift, pf.GreenShift, pf.BlueShift
	return b
}

// converter turns pixels of a 32 bpp true-colour format with 8-bit channels
// on byte boundaries into opaque RGBA.
type converter struct {
	r, g, b int // byte index of each channel within a pixel
	kind    convKind
}

type convKind int

const (
	convGeneric convKind = iota
	convBGRX             // little-endian x8r8g8b8: B, G, R, X in memory (WireFormat)
	convRGBX             // R, G, B, X in memory
)

// newConverter checks that pf is one this client decodes.
func newConverter(pf PixelFormat) (converter, error) {
	if pf.BPP != 32 || !pf.TrueColor || pf.RedMax != 255 || pf.GreenMax != 255 || pf.BlueMax != 255 ||
		pf.RedShift%8 != 0 || pf.GreenShift%8 != 0 || pf.BlueShift%8 != 0 ||
		pf.RedShift > 24 || pf.GreenShift > 24 || pf.BlueShift > 24 {
		return converter{}, fmt.Errorf("%+v: %w (need 32 bpp true colour, 8-bit channels on byte boundaries)", pf, ErrUnsupportedPixelFormat)
	}
	idx := func(shift uint8) int {
		if pf.BigEndian {
			return 3 - int(shift)/8
		}
		return int(shift) / 8
	}
	c := converter{r: idx(pf.RedShift), g: idx(pf.GreenShift), b: idx(pf.BlueShift)}
	if c.r == c.g || c.g == c.b || c.r == c.b {
		return converter{}, fmt.Errorf("%+v: %w (channels overlap)", pf, ErrUnsupportedPixelFormat)
	}
	switch {
	case c.r == 2 && c.g == 1 && c.b == 0:
		c.kind = convBGRX
	case c.r == 0 && c.g == 1 && c.b == 2:
		c.kind = convRGBX
	}
	return c, nil
}

// row converts src (wire pixels) into dst (RGBA, same pixel count) and
// reports whether any dst pixel changed.
func (c converter) row(dst, src []byte) bool {
	changed := false
	switch c.kind {
	case convBGRX:
		for i := 0; i+4 <= len(src) && i+4 <= len(dst); i += 4 {
			v := binary.LittleEndian.Uint32(src[i:])
			p := (v>>16)&0xff | v&0xff00 | (v&0xff)<<16 | 0xff000000
			if binary.LittleEndian.Uint32(dst[i:]) != p {
				binary.LittleEndian.PutUint32(dst[i:], p)
				changed = true
			}
		}
	case convRGBX:
		for i := 0; i+4 <= len(src) && i+4 <= len(dst); i += 4 {
			p := binary.LittleEndian.Uint32(src[i:]) | 0xff000000
			if binary.LittleEndian.Uint32(dst[i:]) != p {
				binary.LittleEndian.PutUint32(dst[i:], p)
				changed = true
			}
		}
	default:
		for i := 0; i+4 <= len(src) && i+4 <= len(dst); i += 4 {
			r, g, b := src[i+c.r], src[i+c.g], src[i+c.b]
			if dst[i] != r || dst[i+1] != g || dst[i+2] != b || dst[i+3] != 0xff {
				dst[i], dst[i+1], dst[i+2], dst[i+3] = r, g, b, 0xff
				changed = true
			}
		}
	}
	return changed
}
