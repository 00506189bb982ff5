package vnc

import (
	"encoding/binary"
	"fmt"
	"image"
	"io"
)

// Client-to-server message types (RFC 6143 section 7.5, QEMU extension 255).
const (
	msgSetPixelFormat = 0
	msgSetEncodings   = 2
	msgUpdateRequest  = 3
	msgKeyEvent       = 4
	msgPointerEvent   = 5
	msgClientCutText  = 6
	msgQEMU           = 255

	qemuExtKeyEvent = 0 // submessage of msgQEMU
)

// Server-to-client message types.
const (
	msgFramebufferUpdate = 0
	msgSetColourMap      = 1
	msgBell              = 2
	msgServerCutText     = 3
)

// Each append function below adds one complete client message to b, so a message
// always goes out in a single Write.

func appendSetPixelFormat(b []byte, pf PixelFormat) []byte {
	f := pf.marshal()
	b = append(b, msgSetPixelFormat, 0, 0, 0)
	return append(b, f[:]...)
}

func appendSetEncodings(b []byte, encs []int32) []byte {
	b = append(b, msgSetEncodings, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(encs)))
	for _, e := range encs {
		b = binary.BigEndian.AppendUint32(b, uint32(e))
	}
	return b
}

func appendUpdateRequest(b []byte, incremental bool, r image.Rectangle) []byte {
	inc := byte(0)
	if incremental {
		inc = 1
	}
	b = append(b, msgUpdateRequest, inc)
	b = binary.BigEndian.AppendUint16(b, uint16(r.Min.X))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Min.Y))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Dx()))
	return binary.BigEndian.AppendUint16(b, uint16(r.Dy()))
}

func appendKeyEvent(b []byte, keysym uint32, down bool) []byte {
	b = append(b, msgKeyEvent, boolByte(down), 0, 0)
	return binary.BigEndian.AppendUint32(b, keysym)
}

// appendExtKeyEvent adds QEMU's extended key event: type 255, submessage 0,
// u16 down-flag, u32 keysym, u32 keycode (QEMU's key number, see qemuKeycode).
func appendExtKeyEvent(b []byte, keysym, keycode uint32, down bool) []byte {
	b = append(b, msgQEMU, qemuExtKeyEvent, 0, boolByte(down))
	b = binary.BigEndian.AppendUint32(b, keysym)
	return binary.BigEndian.AppendUint32(b, keycode)
}

func appendPointerEvent(b []byte, buttons uint8, x, y int) []byte {
	b = append(b, msgPointerEvent, buttons)
	b = binary.BigEndian.AppendUint16(b, uint16(x))
	return binary.BigEndian.AppendUint16(b, uint16(y))
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// qemuKeycode maps a PC/XT set-1 make code as actions passes it (0xE0-prefixed
// keys as 0xE0xx) to the keycode of QEMU's extended key event: QEMU's "key
// number", which is the make code for plain keys and 0x80|code for
// 0xE0-prefixed ones (qemu_input_key_number_to_qcode; ui/vnc.c's do_key_event
// tests 0x9d for Right Ctrl and 0xc8 for Up). ok is false for codes that have
// no key number (0, break codes, other prefixes such as Pause's 0xE1).
func qemuKeycode(scancode uint16) (keycode uint32, ok bool) {
	switch {
	case scancode == 0:
		return 0, false
	case scancode < 0x80:
		return uint32(scancode), true
	case scancode&0xff00 == 0xe000 && scancode&0xff != 0 && scancode&0xff < 0x80:
		return 0x80 | uint32(scancode&0x7f), true
	}
	return 0, false
}

// Server side: the messages Server writes and the client messages it reads.

// appendServerInit adds the ServerInit message (RFC 6143 section 7.3.2).
func appendServerInit(b []byte, size image.Point, pf PixelFormat, name string) []byte {
	f := pf.marshal()
	b = binary.BigEndian.AppendUint16(b, uint16(size.X))
	b = binary.BigEndian.AppendUint16(b, uint16(size.Y))
	b = append(b, f[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	return append(b, name...)
}

// appendUpdateHeader starts a FramebufferUpdate of n rectangles.
func appendUpdateHeader(b []byte, n int) []byte {
	b = append(b, msgFramebufferUpdate, 0)
	return binary.BigEndian.AppendUint16(b, uint16(n))
}

// appendRectHeader adds one rectangle header of a FramebufferUpdate.
func appendRectHeader(b []byte, r image.Rectangle, enc int32) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(r.Min.X))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Min.Y))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Dx()))
	b = binary.BigEndian.AppendUint16(b, uint16(r.Dy()))
	return binary.BigEndian.AppendUint32(b, uint32(enc))
}

// maxClientCutText bounds the ClientCutText a server reads (and drops): a
// person pasting into the viewer, not a way to stream data in.
const maxClientCutText = 1 << 20

// clientMessage is one parsed client-to-server message. Which fields are
// set depends on Type.
type clientMessage struct {
	Type uint8

	PixelFormat PixelFormat // SetPixelFormat
	Encodings   []int32     // SetEncodings; reused by the next message

	Incremental bool            // FramebufferUpdateRequest
	Rect        image.Rectangle // FramebufferUpdateRequest

	Down    bool   // KeyEvent, QEMU extended key event
	Keysym  uint32 // KeyEvent, QEMU extended key event
	Keycode uint32 // QEMU extended key event

	Buttons uint8 // PointerEvent
	X, Y    int   // PointerEvent

	CutTextLen int // ClientCutText (the text is read and dropped)
}

// readClientMessage reads one whole client message from r into m. A stream
// that ends between messages is io.EOF; one that ends inside a message is
// io.ErrUnexpectedEOF. Messages this server cannot parse wrap ErrProtocol.
func readClientMessage(r io.Reader, m *clientMessage) error {
	var b [19]byte
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return err // io.EOF at a message boundary is a clean end
	}
	m.Type = b[0]
	body := func(n int) ([]byte, error) {
		if err := readFull(r, b[:n]); err != nil {
			return nil, fmt.Errorf("client message type %d: %w", m.Type, err)
		}
		return b[:n], nil
	}
	switch m.Type {
	case msgSetPixelFormat:
		p, err := body(19)
		if err != nil {
			return err
		}
		m.PixelFormat = unmarshalPixelFormat([16]byte(p[3:19]))
	case msgSetEncodings:
		p, err := body(3)
		if err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(p[1:]))
		encs := make([]byte, 4*n)
		if err := readFull(r, encs); err != nil {
			return fmt.Errorf("set encodings (%d): %w", n, err)
		}
		m.Encodings = m.Encodings[:0]
		for i := range n {
			m.Encodings = append(m.Encodings, int32(binary.BigEndian.Uint32(encs[4*i:])))
		}
	case msgUpdateRequest:
		p, err := body(9)
		if err != nil {
			return err
		}
		x, y := int(binary.BigEndian.Uint16(p[1:])), int(binary.BigEndian.Uint16(p[3:]))
		w, h := int(binary.BigEndian.Uint16(p[5:])), int(binary.BigEndian.Uint16(p[7:]))
		m.Incremental, m.Rect = p[0] != 0, image.Rect(x, y, x+w, y+h)
	case msgKeyEvent:
		p, err := body(7)
		if err != nil {
			return err
		}
		m.Down, m.Keysym = p[0] != 0, binary.BigEndian.Uint32(p[3:])
	case msgPointerEvent:
		p, err := body(5)
		if err != nil {
			return err
		}
		m.Buttons = p[0]
		m.X, m.Y = int(binary.BigEndian.Uint16(p[1:])), int(binary.BigEndian.Uint16(p[3:]))
	case msgClientCutText:
		p, err := body(7)
		if err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(p[3:]))
		if n > maxClientCutText {
			return fmt.Errorf("client cut text of %d bytes exceeds %d: %w", n, maxClientCutText, ErrProtocol)
		}
		if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return fmt.Errorf("client cut text: %w", unexpected(err))
		}
		m.CutTextLen = int(n)
	case msgQEMU:
		// Only the extended key event (submessage 0, 12 bytes in all) is
		// parsed; the audio submessage is for clients QEMU offered audio to.
		p, err := body(11)
		if err != nil {
			return err
		}
		if p[0] != qemuExtKeyEvent {
			return fmt.Errorf("QEMU client message submessage %d: %w", p[0], ErrProtocol)
		}
		m.Down = binary.BigEndian.Uint16(p[1:]) != 0
		m.Keysym, m.Keycode = binary.BigEndian.Uint32(p[3:]), binary.BigEndian.Uint32(p[7:])
	default:
		return fmt.Errorf("client message type %d: %w: not one this server parses", m.Type, ErrProtocol)
	}
	return nil
}
