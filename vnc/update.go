package vnc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"slices"
)

// RFB encodings and pseudo-encodings. The client advertises Raw,
// DesktopSize, Cursor and QEMUExtendedKeyEvent; the others are named only so
// errors can say what arrived.
const (
	EncodingRaw                  int32 = 0
	EncodingCopyRect             int32 = 1
	EncodingRRE                  int32 = 2
	EncodingHextile              int32 = 5
	EncodingTight                int32 = 7
	EncodingZRLE                 int32 = 16
	EncodingDesktopSize          int32 = -223
	EncodingCursor               int32 = -239 // "rich cursor"
	EncodingPointerTypeChange    int32 = -257 // QEMU
	EncodingQEMUExtendedKeyEvent int32 = -258
	EncodingQEMUAudio            int32 = -259
	EncodingLEDState             int32 = -261
	EncodingExtendedDesktopSize  int32 = -308
	EncodingAlphaCursor          int32 = -314
)

// advertisedEncodings are sent in SetEncodings, in order of preference.
var advertisedEncodings = []int32{EncodingRaw, EncodingDesktopSize, EncodingCursor, EncodingQEMUExtendedKeyEvent}

func encodingName(e int32) string {
	switch e {
	case EncodingRaw:
		return "Raw"
	case EncodingCopyRect:
		return "CopyRect"
	case EncodingRRE:
		return "RRE"
	case EncodingHextile:
		return "Hextile"
	case EncodingTight:
		return "Tight"
	case EncodingZRLE:
		return "ZRLE"
	case EncodingDesktopSize:
		return "DesktopSize"
	case EncodingCursor:
		return "Cursor"
	case EncodingPointerTypeChange:
		return "PointerTypeChange"
	case EncodingQEMUExtendedKeyEvent:
		return "QEMUExtendedKeyEvent"
	case EncodingQEMUAudio:
		return "QEMUAudio"
	case EncodingLEDState:
		return "LEDState"
	case EncodingExtendedDesktopSize:
		return "ExtendedDesktopSize"
	case EncodingAlphaCursor:
		return "AlphaCursor"
	}
	return "unknown"
}

// MaxFramebufferSide bounds each side of a framebuffer, on both sides of
// RFB: the client refuses a ServerInit or DesktopSize beyond it, and the
// Server refuses to serve a larger frame, both with an error wrapping
// ErrFramebufferTooLarge. QEMU's own limit is far below (VNC_MAX_WIDTH and
// VNC_MAX_HEIGHT in ui/vnc.h: 2560x2048, later 5120x2160); at this size one
// full frame is 256 MiB, the most one update may carry (maxUpdateBytes).
const MaxFramebufferSide = 8192

// checkFramebufferSize reports a size either side of RFB refuses.
func checkFramebufferSize(w, h int) error {
	if w < 1 || h < 1 {
		return fmt.Errorf("framebuffer %dx%d: %w", w, h, ErrProtocol)
	}
	if w > MaxFramebufferSide || h > MaxFramebufferSide {
		return fmt.Errorf("framebuffer %dx%d: %w: the limit is %dx%d", w, h, ErrFramebufferTooLarge, MaxFramebufferSide, MaxFramebufferSide)
	}
	return nil
}

// Limits that keep a corrupt stream from making the parser allocate
// without bound.
const (
	// maxCursorSide bounds a cursor's width and height.
	maxCursorSide = 1024
	// maxUpdateBytes bounds the pixel data of one FramebufferUpdate.
	maxUpdateBytes = 256 << 20
	// readChunk is the largest single read of pixel data; data is read in
	// chunks so a truncated stream fails before a large allocation.
	readChunk = 1 << 20
)

// Rect is one rectangle of a FramebufferUpdate.
type Rect struct {
	// Rectangle is where the pixels go, for Raw. For DesktopSize its size is
	// the new framebuffer size; for Cursor its Min is the hotspot and its
	// size the cursor's; for QEMUExtendedKeyEvent it carries nothing.
	image.Rectangle
	Encoding int32
	// Pixels holds Dx()*Dy() pixels in the connection's pixel format, row
	// after row (Raw and Cursor). It aliases the Update's buffer.
	Pixels []byte
	// Mask is the cursor's bitmask: (Dx()+7)/8 bytes per row, most
	// significant bit first, 1 where the cursor is opaque (Cursor only).
	Mask []byte

	pixOff, maskOff int
}

// Update is one parsed FramebufferUpdate message. Its buffer is reused by
// the next ReadUpdate into the same Update.
type Update struct {
	Rects []Rect
	buf   []byte
}

// IsResponse reports whether u answers a FramebufferUpdateRequest: it has a
// pixel rectangle, or no rectangle at all. Updates holding only
// pseudo-rectangles are sent by QEMU on its own.
func (u *Update) IsResponse() bool {
	if len(u.Rects) == 0 {
		return true
	}
	for _, r := range u.Rects {
		if r.Encoding == EncodingRaw {
			return true
		}
	}
	return false
}

// ReadUpdate parses the body of a FramebufferUpdate message (everything
// after the message-type byte) from r into u. pf is the connection's pixel
// format and size the framebuffer size before the message; a DesktopSize
// rectangle changes the size that later rectangles are checked against.
// Rectangles of encodings the client does not advertise are an error
// wrapping ErrUnsupportedEncoding; a stream that ends early is an error
// wrapping io.ErrUnexpectedEOF.
func ReadUpdate(r io.Reader, pf PixelFormat, size image.Point, u *Update) error {
	u.Rects = u.Rects[:0]
	u.buf = u.buf[:0]
	bpp := pf.BytesPerPixel()
	if bpp != 1 && bpp != 2 && bpp != 4 {
		return fmt.Errorf("framebuffer update: %+v: %w", pf, ErrUnsupportedPixelFormat)
	}
	var hdr [3]byte // padding, number-of-rectangles
	if err := readFull(r, hdr[:]); err != nil {
		return fmt.Errorf("framebuffer update header: %w", err)
	}
	n := int(binary.BigEndian.Uint16(hdr[1:]))
	for i := 0; i < n; i++ {
		var rh [12]byte
		if err := readFull(r, rh[:]); err != nil {
			return fmt.Errorf("framebuffer update rect %d of %d: header: %w", i+1, n, err)
		}
		x, y := int(binary.BigEndian.Uint16(rh[0:])), int(binary.BigEndian.Uint16(rh[2:]))
		w, h := int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))
		rect := Rect{Rectangle: image.Rect(x, y, x+w, y+h), Encoding: int32(binary.BigEndian.Uint32(rh[8:]))}
		where := func() string {
			return fmt.Sprintf("framebuffer update rect %d of %d (%s %dx%d at %d,%d)", i+1, n, encodingName(rect.Encoding), w, h, x, y)
		}
		switch rect.Encoding {
		case EncodingRaw:
			if w > 0 && h > 0 && !rect.Rectangle.In(image.Rectangle{Max: size}) {
				return fmt.Errorf("%s: outside the %dx%d framebuffer: %w", where(), size.X, size.Y, ErrProtocol)
			}
			off, err := u.read(r, w*h*bpp)
			if err != nil {
				return fmt.Errorf("%s: pixels: %w", where(), err)
			}
			rect.pixOff = off
		case EncodingDesktopSize:
			if err := checkFramebufferSize(w, h); err != nil {
				return fmt.Errorf("%s: %w", where(), err)
			}
			size = image.Pt(w, h)
		case EncodingCursor:
			if w > maxCursorSide || h > maxCursorSide {
				return fmt.Errorf("%s: cursor larger than %d pixels: %w", where(), maxCursorSide, ErrProtocol)
			}
			off, err := u.read(r, w*h*bpp)
			if err != nil {
				return fmt.Errorf("%s: pixels: %w", where(), err)
			}
			rect.pixOff = off
			if off, err = u.read(r, (w+7)/8*h); err != nil {
				return fmt.Errorf("%s: mask: %w", where(), err)
			}
			rect.maskOff = off
		case EncodingQEMUExtendedKeyEvent:
			// Acknowledgement only; no data.
		default:
			return fmt.Errorf("%s: %w: %d (%s); advertised: Raw, DesktopSize, Cursor, QEMUExtendedKeyEvent",
				where(), ErrUnsupportedEncoding, rect.Encoding, encodingName(rect.Encoding))
		}
		u.Rects = append(u.Rects, rect)
	}
	// Slices are cut only now: the buffer may have moved while growing.
	for i := range u.Rects {
		r := &u.Rects[i]
		switch r.Encoding {
		case EncodingRaw:
			r.Pixels = u.buf[r.pixOff : r.pixOff+r.Dx()*r.Dy()*bpp]
		case EncodingCursor:
			r.Pixels = u.buf[r.pixOff : r.pixOff+r.Dx()*r.Dy()*bpp]
			r.Mask = u.buf[r.maskOff : r.maskOff+(r.Dx()+7)/8*r.Dy()]
		}
	}
	return nil
}

// read appends n bytes from r to u.buf and returns where they start.
func (u *Update) read(r io.Reader, n int) (int, error) {
	off := len(u.buf)
	if off+n > maxUpdateBytes {
		return 0, fmt.Errorf("update larger than %d MiB: %w", maxUpdateBytes>>20, ErrProtocol)
	}
	for n > 0 {
		c := min(n, readChunk)
		l := len(u.buf)
		u.buf = slices.Grow(u.buf, c)[:l+c]
		if err := readFull(r, u.buf[l:]); err != nil {
			return 0, err
		}
		n -= c
	}
	return off, nil
}

// readFull is io.ReadFull that reports a stream ending mid-message as
// io.ErrUnexpectedEOF, never as a bare io.EOF.
func readFull(r io.Reader, b []byte) error {
	_, err := io.ReadFull(r, b)
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// unexpected turns io.EOF into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
