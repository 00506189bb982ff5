package player

import (
	"context"
	"image"
	"time"
)

// Display is what actions need from a live desktop. vnc.Client implements it
// over one RFB connection; actions never touch the wire.
//
// Semantics:
//   - Size is the native framebuffer size; it changes on DesktopSize.
//   - Snapshot returns a copy of the live framebuffer mirror (no round trip),
//     with the pointer cursor composited at its current position.
//   - Pointer moves the absolute pointer to native (x, y) with the button mask
//     (bit 0 left, 1 middle, 2 right, 3 wheel up, 4 wheel down; bits 5 and 6,
//     wheel left and right, exist in RFB but QEMU 7.2 drops them, so the
//     executor scrolls sideways through GuestInput instead).
//   - Key presses or releases one key. keysym is an X keysym; scancode is the
//     PC/XT set-1 scancode (0xE0-prefixed keys as 0xE0xx) or 0 if unknown. The
//     client uses QEMU's extended key event when the server offers it and a
//     scancode is given, else a plain key event.
//   - Settle returns once the framebuffer reflects everything sent before the
//     call (a fresh update round trip completed) and then stayed unchanged for
//     quiet, or once max has passed; it reports how long it waited. If max
//     passes before the first round trip completes, the error wraps one
//     with Timeout() true.
//   - CursorPos is where the pointer was last sent.
type Display interface {
	Size() (w, h int)
	Snapshot() *image.RGBA
	Pointer(x, y int, buttons uint8) error
	Key(keysym uint32, scancode uint16, down bool) error
	Settle(ctx context.Context, quiet, max time.Duration) (time.Duration, error)
	CursorPos() (x, y int)
}
