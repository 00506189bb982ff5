package player

import (
	"context"
	"errors"
	"time"
)

// GuestInput is input the display cannot carry, delivered inside the guest's
// desktop session (the desk implements it through the guest agent, running
// xdotool and a clipboard tool as the desktop user). The executor uses it when
// ExecutorConfig.Guest is set, or when the Display itself implements it.
//
// Why it exists: QEMU 7.2's VNC server truncates keysyms to 16 bits and looks
// them up in its en-us keymap, so only US-ASCII can be typed as key events
// (ui/vnc.c key_event, ui/keymaps.c); and its pointer_event maps only buttons
// 1-5, so horizontal wheel (X buttons 6/7) and back/forward (8/9) never reach
// the guest (ui/vnc.c:1805-1837). See /work/plan/research11.md §5-6.
//
// Semantics:
//   - TypeText types text exactly as given (any Unicode; \n as Return, \t as
//     Tab) into the focused window, and returns once it is typed.
//   - Button clicks X button (6 wheel left, 7 wheel right, 8 back, 9
//     forward) count times at native framebuffer pixel (x, y). The executor
//     has already moved the pointer there over the display and pressed any
//     modifiers.
//   - ClipboardGet returns the CLIPBOARD selection's text ("" when empty);
//     ClipboardSet replaces it.
type GuestInput interface {
	TypeText(ctx context.Context, text string) error
	Button(ctx context.Context, button, x, y, count int) error
	ClipboardGet(ctx context.Context) (string, error)
	ClipboardSet(ctx context.Context, text string) error
}

// X button numbers GuestInput.Button takes.
const (
	XButtonWheelLeft  = 6
	XButtonWheelRight = 7
	XButtonBack       = 8
	XButtonForward    = 9
)

// GuestActivity reports how busy the guest is, so that a settle waits for the
// guest to go idle as well as the screen: a launched program's window appears
// only after its process has done its start-up work, during which the screen
// can be quiet for longer than the quiet time. The desk implements it from
// libvirt's domain CPU statistics.
//
// CPUTime is the guest's cumulative vCPU time, summed over its vCPUs. The
// executor samples it around each quiet window and takes the rate (vCPU
// seconds per second) as the guest's utilisation.
type GuestActivity interface {
	CPUTime(ctx context.Context) (time.Duration, error)
}

// DefaultGuestIdle is the vCPU utilisation (vCPU seconds per wall second,
// summed over vCPUs) at or below which the guest counts as idle during a
// settle. A program starting up keeps at least one vCPU near 1.0; an idle
// desktop under KVM wakes for timers and a blinking cursor and stays a few
// percent. 0.25 sits well between; a desk whose guests idle higher (TCG)
// sets ExecutorConfig.GuestIdle from measurement.
const DefaultGuestIdle = 0.25

// settleGuest waits for the screen to be quiet for quiet and the guest's
// vCPU utilisation over the same stretch to be at most idle, or for max to
// pass. Each round is one Display.Settle (a fresh update round trip, then
// quiet unchanged); the guest's CPU time is sampled before the first round
// and after each, so each sample window ends with a quiet screen. A window
// with the guest busy starts another round; there are no fixed sleeps. If
// the activity cannot be sampled the settle degrades to the screen alone.
func (c *capturer) settleGuest(ctx context.Context, quiet, max time.Duration) (waited time.Duration, timedOut bool, err error) {
	start := c.now()
	elapsed := func() time.Duration { return c.now().Sub(start) }
	prevT := start
	prevCPU, err := c.activity.CPUTime(ctx)
	if err != nil {
		c.log.Warn("guest activity unavailable; settling on the screen alone", "op", "settle", "error", err)
		d, err := c.d.Settle(ctx, quiet, max)
		return d, d >= max, err
	}
	for round := 0; ; round++ {
		left := max - elapsed()
		if left <= 0 {
			return elapsed(), true, nil
		}
		d, err := c.d.Settle(ctx, quiet, left)
		if err != nil {
			// After a completed round the mirror is known to be current as
			// of that round's fence; a later round that runs out of the
			// remaining budget before its own fence comes back (CI saw one
			// given 15 ms under load) is the settle timing out, not the
			// display failing.
			if round > 0 && ctx.Err() == nil && isTimeout(err) {
				return elapsed(), true, nil
			}
			return elapsed(), false, err
		}
		if d >= left {
			return elapsed(), true, nil // the screen never went quiet
		}
		t := c.now()
		cpu, err := c.activity.CPUTime(ctx)
		if err != nil {
			c.log.Warn("guest activity unavailable; settled on the screen alone", "op", "settle", "error", err)
			return elapsed(), false, nil
		}
		win := t.Sub(prevT)
		if win <= 0 || float64(cpu-prevCPU)/float64(win) <= c.idle {
			return elapsed(), false, nil
		}
		c.res.SettleGuestBusy++
		prevT, prevCPU = t, cpu
	}
}

// isTimeout reports whether err says the display ran out of time (it wraps
// an error with Timeout() true, as vnc.ErrStale and net errors do).
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
