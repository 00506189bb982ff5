// Package screen is the tiny guest image's display and input model. The
// guest's /init (images/tiny/init) draws it on /dev/fb0 and host-side tests
// use the same code to predict, pixel for pixel, what the guest shows and
// logs for a given input.
//
// # Screen
//
// The screen starts filled with [Background]. A header line,
// "deskfarm tiny WxH", is drawn in [HeaderColor] at [HeaderOrigin]. Below it
// is the text area: typed characters are drawn in [TextColor] with
// basicfont.Face7x13 scaled by [GlyphScale], one character per
// [CellWidth]×[CellHeight] cell, starting at [TextOrigin]. A line wraps at the
// last cell that fits before the right margin ([TextMargin]); Enter starts a
// new line; BackSpace removes the last character (or line break). When a
// character would go below the last row the text area is cleared and typing
// restarts in the top-left cell.
//
// Every pointer button press draws a [MarkerSize]×[MarkerSize] square centred
// exactly on the pointer, in the button's colour ([MarkerColor]). Markers stay
// until the text area is cleared (markers inside it are cleared with it) and
// are drawn over whatever is beneath them; a later character drawn in a cell
// repaints that whole cell.
//
// [Canvas] applies these operations to an *image.RGBA.
//
// # Pointer
//
// The pointer is the virtio tablet: ABS_X/ABS_Y in 0..[AbsMax]. QEMU 7.2's VNC
// server scales a client position x in [0, n) to the axis value
// x*0x7fff/n ([AbsFromPixel]), where n is the width of its server surface
// (the guest width rounded up to a multiple of 16, at most 2560) or the
// height (at most 2048); see [VNCExtent]. [Pointer] inverts that exactly, so
// a VNC click at (x, y) lands on pixel (x, y). Positions a VNC client can
// send beyond the guest width (up to the rounded-up width) clamp to the last
// column.
//
// # Input log
//
// The guest appends one line per input event to [InputLogPath]
// ('\n'-terminated, written with one write per event frame, never buffered):
//
//	key down CODE NAME       evdev key press, e.g. "key down 42 leftshift"
//	key up CODE NAME         release
//	key repeat CODE NAME     kernel autorepeat; types nothing, and the guest
//	                         turns autorepeat off, so it does not occur
//	motion X Y               pointer moved to pixel (X, Y); one line per
//	                         event frame (SYN_REPORT) in which it moved
//	button down NAME X Y     NAME is left, middle, right, side or extra
//	button up NAME X Y
//	wheel N                  REL_WHEEL; N > 0 is up (away from the user)
//	hwheel N                 REL_HWHEEL; N > 0 is right
//	char C                   C typed: one printable ASCII byte (space too)
//	newline                  Enter typed
//	backspace                BackSpace typed
//
// CODE is the decimal evdev key code and NAME its lower-case name without
// the KEY_ prefix ([KeyName]). The pointer starts at (0, 0); "motion" is
// logged only when the pixel changes, and a VNC client's press without
// motion logs only the "button" line. Within a frame, motion comes first, so a
// button line carries the position of the same frame. "char", "newline" and
// "backspace" follow the "key down" line that caused them.
// [KeyLine], [ButtonLine], [MotionLine], [WheelLine] and [TypedLine] format
// these lines.
//
// The current text of the text area (as typed since it was last cleared,
// lines joined by '\n') is kept in [TextPath].
package screen
