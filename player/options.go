package player

import (
	"fmt"
	"image"
	"time"

	"github.com/deskfarm/deskfarm/actions"
)

// Settle defaults: after the actions of a request the executor waits for the
// screen to settle (Display.Settle) instead of sleeping a fixed time.
//
// DefaultSettleQuiet is how long the framebuffer must stay unchanged. It must
// be longer than the gaps between the repaints of one reaction (QEMU's VNC
// checks for dirty areas on a 30 ms timer that lengthens by 50 ms per idle
// check until input resets it, and a TCG guest repaints a menu or a dialog in
// several passes tens of ms apart), and well below a blinking text cursor's
// half period (~500-600 ms in GTK and xterm) and a clock's tick, or it would
// never see quiet. 150 ms sits between: a click that repaints settles in
// roughly one round trip + 150 ms (docs/benchmarks.md, "settle").
//
// DefaultSettleMax caps the wait at the reference demo's fixed 2.0 s sleep, so
// a screen that never settles (video, a spinner) costs no more than the demo
// does and a quiet one costs far less.
const (
	DefaultSettleQuiet = 150 * time.Millisecond
	DefaultSettleMax   = 2 * time.Second
)

// ScreenshotPolicy says when Run returns a screenshot.
type ScreenshotPolicy string

// Screenshot policies.
const (
	// ScreenshotAuto (the default) takes a screenshot after the actions unless
	// the last one was an observation (screenshot, zoom, cursor_position);
	// an empty action list is a plain screenshot. This is what the reference
	// demo returns for each action.
	ScreenshotAuto ScreenshotPolicy = "auto"
	// ScreenshotAlways takes one after the actions unless the last action was
	// a screenshot.
	ScreenshotAlways ScreenshotPolicy = "always"
	// ScreenshotNever returns only what screenshot and zoom actions capture.
	ScreenshotNever ScreenshotPolicy = "never"
)

// RunOptions are per-request options of Run. The zero value is the default.
type RunOptions struct {
	// SettleQuietMS is the quiet time of the settle wait (Display.Settle);
	// 0 means DefaultSettleQuiet. 1-10000.
	SettleQuietMS int `json:"settle_quiet_ms,omitempty"`
	// SettleMaxMS caps the settle wait; 0 means DefaultSettleMax. 1-60000,
	// and at least SettleQuietMS.
	SettleMaxMS int `json:"settle_max_ms,omitempty"`
	// NoSettle skips settling entirely: screenshots show whatever the mirror
	// holds at that instant.
	NoSettle bool `json:"no_settle,omitempty"`
	// NoGuestSettle settles on the screen alone even when the executor has
	// a GuestActivity: quiet means the framebuffer stopped changing, not
	// that the guest went idle.
	NoGuestSettle bool `json:"no_guest_settle,omitempty"`
	// Screenshot is the screenshot policy; "" means auto.
	Screenshot ScreenshotPolicy `json:"screenshot,omitempty"`
	// Format is the image encoding; "" means png.
	Format ImageFormat `json:"format,omitempty"`
	// JPEGQuality is the JPEG quality, 1-100; 0 means DefaultJPEGQuality.
	JPEGQuality int `json:"jpeg_quality,omitempty"`
}

// Validate checks the options.
func (o RunOptions) Validate() error {
	if o.SettleQuietMS < 0 || o.SettleQuietMS > 10000 {
		return actions.Invalid("settle_quiet_ms", nil, fmt.Sprintf("must be 1 to 10000 (0 means %d), got %d",
			DefaultSettleQuiet.Milliseconds(), o.SettleQuietMS))
	}
	if o.SettleMaxMS < 0 || o.SettleMaxMS > 60000 {
		return actions.Invalid("settle_max_ms", nil, fmt.Sprintf("must be 1 to 60000 (0 means %d), got %d",
			DefaultSettleMax.Milliseconds(), o.SettleMaxMS))
	}
	if q, m := o.quiet(), o.max(); q > m {
		return actions.Invalid("settle_max_ms", nil, fmt.Sprintf("%d ms is shorter than the quiet time %d ms", m.Milliseconds(), q.Milliseconds()))
	}
	switch o.Screenshot {
	case "", ScreenshotAuto, ScreenshotAlways, ScreenshotNever:
	default:
		return actions.OneOf("screenshot", nil, []string{"auto", "always", "never"},
			fmt.Sprintf("must be auto, always or never, got %q", o.Screenshot))
	}
	return o.encodeOptions().Validate()
}

func (o RunOptions) quiet() time.Duration {
	if o.SettleQuietMS == 0 {
		return DefaultSettleQuiet
	}
	return time.Duration(o.SettleQuietMS) * time.Millisecond
}

func (o RunOptions) max() time.Duration {
	if o.SettleMaxMS == 0 {
		return DefaultSettleMax
	}
	return time.Duration(o.SettleMaxMS) * time.Millisecond
}

// Policy returns the screenshot policy, auto when unset.
func (o RunOptions) Policy() ScreenshotPolicy {
	if o.Screenshot == "" {
		return ScreenshotAuto
	}
	return o.Screenshot
}

func (o RunOptions) encodeOptions() EncodeOptions {
	return EncodeOptions{Format: o.Format, Quality: o.JPEGQuality}
}

// Result is what a Run returns: text and/or one image (see vocab.ClaudeToolResult for
// its shape as a Claude tool_result).
type Result struct {
	// Text holds the output of cursor_position actions ("X=12,Y=34"), one
	// line each, as Claude's tool reports it.
	Text string `json:"text,omitempty"`
	// Cursor is where the last cursor_position action found the pointer, in
	// screenshot coordinates; nil when the run had none. Callers read it
	// rather than parsing Text.
	Cursor *image.Point `json:"-"`
	// Image is the last image captured: a zoom, an explicit screenshot, or
	// the screenshot the policy takes after the actions. Screenshots are at
	// the session's screenshot size.
	Image *Image `json:"image,omitempty"`
	// Executed counts the actions that completed.
	Executed int `json:"executed"`
	// Settle is the total time spent in Display.Settle.
	Settle time.Duration `json:"-"`
	// SettleMS is Settle in milliseconds.
	SettleMS float64 `json:"settle_ms"`
	// SettleTimedOut reports that a settle wait hit its maximum (the screen
	// kept changing, or the guest stayed busy).
	SettleTimedOut bool `json:"settle_timed_out,omitempty"`
	// SettleGuestBusy counts the quiet windows in which the screen was quiet
	// but the guest was still busy (GuestActivity), each of which cost one
	// more settle round.
	SettleGuestBusy int `json:"settle_guest_busy,omitempty"`
	// Clipboard is the text a clipboard_get read.
	Clipboard *string `json:"clipboard,omitempty"`
}
