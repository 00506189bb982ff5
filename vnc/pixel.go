package vnc

import (
	"encoding/binary"
	"fmt"
	"slices"
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

// unmarshalPixelFormat parses a 16-byte PIXEL_FORMAT structure.
func unmarshalPixelFormat(b [16]byte) PixelFormat {
	return PixelFormat{
		BPP: b[0], Depth: b[1], BigEndian: b[2] != 0, TrueColor: b[3] != 0,
		RedMax:   binary.BigEndian.Uint16(b[4:]),
		GreenMax: binary.BigEndian.Uint16(b[6:]),
		BlueMax:  binary.BigEndian.Uint16(b[8:]),
		RedShift: b[10], GreenShift: b[11], BlueShift: b[12],
	}
}

// encoder turns opaque RGBA pixels into a pixel format a viewer asked the
// Server for: 32 bpp true colour with 8-bit channels (max 255) at any
// shifts up to 24, either byte order. The depth field is not checked:
// clients announce 24 or 32 for the same layout. Bits no channel uses are
// set, as in QEMU's x8r8g8b8 surface (its raw frames carry 0xff there), so
// a frame in WireFormat is byte for byte what QEMU sends.
type encoder struct {
	pf   PixelFormat
	pad  uint32 // bits no channel uses
	kind convKind
}

// newEncoder checks that pf is one the server encodes.
func newEncoder(pf PixelFormat) (encoder, error) {
	if pf.BPP != 32 || !pf.TrueColor || pf.RedMax != 255 || pf.GreenMax != 255 || pf.BlueMax != 255 ||
		pf.RedShift > 24 || pf.GreenShift > 24 || pf.BlueShift > 24 {
		return encoder{}, fmt.Errorf("%+v: %w (need 32 bpp true colour with 8-bit channels)", pf, ErrUnsupportedPixelFormat)
	}
	e := encoder{pf: pf, pad: ^(uint32(0xff)<<pf.RedShift | uint32(0xff)<<pf.GreenShift | uint32(0xff)<<pf.BlueShift)}
	if pf.RedShift%8 == 0 && pf.GreenShift%8 == 0 && pf.BlueShift%8 == 0 {
		if c, err := newConverter(pf); err == nil {
			// The same memory layouts the client converts quickly.
			e.kind = c.kind
		}
	}
	return e, nil
}

// appendRow appends the RGBA pixels of src to b in e's format.
func (e encoder) appendRow(b, src []byte) []byte {
	n := len(src) / 4 * 4
	off := len(b)
	b = slices.Grow(b, n)[:off+n]
	dst := b[off:]
	switch e.kind {
	case convBGRX: // B, G, R, X in memory: swap R and B.
		for i := 0; i < n; i += 4 {
			v := binary.LittleEndian.Uint32(src[i:])
			binary.LittleEndian.PutUint32(dst[i:], (v>>16)&0xff|v&0xff00|(v&0xff)<<16|0xff000000)
		}
	case convRGBX: // R, G, B, X in memory: RGBA as it is, X set.
		for i := 0; i < n; i += 4 {
			binary.LittleEndian.PutUint32(dst[i:], binary.LittleEndian.Uint32(src[i:])|0xff000000)
		}
	default:
		pf := e.pf
		for i := 0; i < n; i += 4 {
			v := uint32(src[i])<<pf.RedShift | uint32(src[i+1])<<pf.GreenShift | uint32(src[i+2])<<pf.BlueShift | e.pad
			if pf.BigEndian {
				binary.BigEndian.PutUint32(dst[i:], v)
			} else {
				binary.LittleEndian.PutUint32(dst[i:], v)
			}
		}
	}
	return b
}
