package screen

import (
	"image"
	"image/color"
)

// AbsMax is the largest ABS_X/ABS_Y value of QEMU's virtio and USB tablets
// (INPUT_EVENT_ABS_MAX in QEMU's include/ui/input.h); the smallest is 0.
const AbsMax = 0x7fff

// Limits of QEMU 7.2's VNC server surface (VNC_MAX_WIDTH, VNC_MAX_HEIGHT in
// ui/vnc.h) and the multiple its width is rounded up to
// (VNC_DIRTY_PIXELS_PER_BIT).
const (
	vncMaxWidth  = 2560
	vncMaxHeight = 2048
	vncWidthStep = 16
)

// VNCExtent returns the width and height that QEMU 7.2's VNC server scales
// pointer positions by for a w×h guest display: pointer_event in ui/vnc.c
// passes the size of its server surface, whose width is vnc_width() =
// MIN(2560, ROUND_UP(w, 16)) and height vnc_height() = MIN(2048, h). The VNC
// client sees a framebuffer of that size.
func VNCExtent(w, h int) (int, int) {
	rw := (w + vncWidthStep - 1) / vncWidthStep * vncWidthStep
	return min(rw, vncMaxWidth), min(h, vncMaxHeight)
}

// AbsFromPixel returns the tablet axis value QEMU sends for position p on an
// axis of extent n: qemu_input_scale_axis(p, 0, n, 0, 0x7fff) in ui/input.c,
// that is floor(p * 0x7fff / n). Host tests that inject absolute events
// themselves (QMP input-send-event) use it with n from [VNCExtent] to hit
// pixel p.
func AbsFromPixel(p, n int) int {
	if n < 1 {
		return AbsMax / 2
	}
	return int(int64(p) * AbsMax / int64(n))
}

// PixelFromAbs inverts [AbsFromPixel]: it returns the position p in [0, n)
// with AbsFromPixel(p, n) == v. Because n < AbsMax each axis value has at
// most one such p, and p = ceil(v * n / 0x7fff). Values no position maps to
// give the next position up.
func PixelFromAbs(v, n int) int {
	if n < 1 {
		return 0
	}
	v = max(0, min(v, AbsMax))
	return int((int64(v)*int64(n) + AbsMax - 1) / AbsMax)
}

// Pointer returns the pixel of a w×h screen that the tablet position
// (absX, absY) denotes: the inverse of QEMU 7.2's VNC scaling ([VNCExtent],
// [AbsFromPixel]), clamped to the screen.
func Pointer(absX, absY, w, h int) image.Point {
	ew, eh := VNCExtent(w, h)
	x := min(PixelFromAbs(absX, ew), w-1)
	y := min(PixelFromAbs(absY, eh), h-1)
	return image.Point{X: max(x, 0), Y: max(y, 0)}
}

// AbsPoint returns the tablet axis values QEMU 7.2 sends for a VNC pointer at
// pixel p of a w×h screen. Pointer(AbsPoint(p, w, h)) == p for every p on
// the screen.
func AbsPoint(p image.Point, w, h int) (absX, absY int) {
	ew, eh := VNCExtent(w, h)
	return AbsFromPixel(p.X, ew), AbsFromPixel(p.Y, eh)
}

// Button is a pointer button.
type Button int

// Pointer buttons, in the order of their evdev codes (BTN_LEFT = 0x110 ...).
const (
	ButtonLeft Button = iota
	ButtonRight
	ButtonMiddle
	ButtonSide
	ButtonExtra
)

// Evdev codes of the buttons (linux/input-event-codes.h).
const (
	BtnLeft     = 0x110
	BtnRight    = 0x111
	BtnMiddle   = 0x112
	BtnSide     = 0x113
	BtnExtra    = 0x114
	BtnGearDown = 0x150 // QEMU's wheel down when the tablet has no wheel axis
	BtnGearUp   = 0x151
)

var buttonNames = [...]string{"left", "right", "middle", "side", "extra"}

// String returns the button's name in the input log.
func (b Button) String() string {
	if b < 0 || int(b) >= len(buttonNames) {
		return "unknown"
	}
	return buttonNames[b]
}

// ButtonFromCode returns the button with evdev code code.
func ButtonFromCode(code uint16) (Button, bool) {
	if code < BtnLeft || code > BtnExtra {
		return 0, false
	}
	return Button(code - BtnLeft), true
}

// Marker colours by button.
var (
	MarkerLeft   = color.RGBA{0xff, 0x30, 0x30, 0xff} // red
	MarkerMiddle = color.RGBA{0x30, 0xe0, 0x30, 0xff} // green
	MarkerRight  = color.RGBA{0x30, 0x90, 0xff, 0xff} // blue
	MarkerOther  = color.RGBA{0xff, 0xd0, 0x00, 0xff} // yellow: side, extra
)

// MarkerColor returns the colour of the marker a press of b draws.
func MarkerColor(b Button) color.RGBA {
	switch b {
	case ButtonLeft:
		return MarkerLeft
	case ButtonMiddle:
		return MarkerMiddle
	case ButtonRight:
		return MarkerRight
	}
	return MarkerOther
}
