package vnc

import (
	"encoding/binary"
	"image"
)

// Client-to-server message types (RFC 6143 section 7.5, QEMU extension 255).
const (
	msgSetPixelFormat = 0
	msgSetEncodings   = 2
	msgUpdateRequest  = 3
	msgKeyEvent       = 4
	msgPointerEvent   = 5
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

// Each append function adds one complete client message to b, so a message
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
