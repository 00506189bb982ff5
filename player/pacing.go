package player

import (
	"context"
	"time"
)

// Pacing spaces the input events of one action. The values are what the
// guest's input path needs, not politeness; docs/benchmarks.md has the
// measurements behind the defaults.
type Pacing struct {
	// ClickHold is the time between a button's press and release in a click.
	// Per-device queues keep them apart anyway; a short hold keeps toolkits
	// that debounce from merging them.
	ClickHold time.Duration
	// ClickGap is the time from one click's release to the next press of a
	// double or triple click. Press-to-press (ClickHold+ClickGap, 65 ms) and a
	// whole triple click (~145 ms) stay well inside the usual double-click
	// times (GTK/Qt 400 ms, Xfce 250 ms) even if a busy TCG guest stretches
	// them.
	ClickGap time.Duration
	// DragHold is waited after pressing the button before the first move, and
	// after the last move before releasing (drop targets need motion events
	// and an XDND round trip to accept a drop).
	DragHold time.Duration
	// DragStep is the time between intermediate drag moves.
	DragStep time.Duration
	// DragStepPx is the largest distance between intermediate drag moves, in
	// native pixels (a drag segment gets between 3 and 60 moves).
	DragStepPx int
	// ScrollGap is the time between wheel clicks.
	ScrollGap time.Duration
	// KeyGap is the time between two consecutive key events. QEMU's PS/2
	// keyboard (QEMU >= 6.1) queues only 16 bytes and drops keys when full;
	// VNC key events reach it as fast as the socket delivers them, and the
	// guest drains one byte per interrupt. 4 ms per event lets the guest stall
	// for ~60 ms without losing a key; 1000 lowercase characters take ~8 s
	// (the demo's xdotool --delay 12 takes 12 s).
	KeyGap time.Duration
	// DeviceGap is waited when switching between keyboard and pointer events
	// (they reach the guest through different devices, a PS/2 keyboard and a
	// virtio tablet, with no ordering between them), so a modifier is down
	// before the click it modifies and the click lands before the release.
	DeviceGap time.Duration
}

// DefaultPacing is the pacing used when ExecutorConfig.Pacing is nil.
var DefaultPacing = Pacing{
	ClickHold:  15 * time.Millisecond,
	ClickGap:   50 * time.Millisecond,
	DragHold:   50 * time.Millisecond,
	DragStep:   10 * time.Millisecond,
	DragStepPx: 24,
	ScrollGap:  15 * time.Millisecond,
	KeyGap:     4 * time.Millisecond,
	DeviceGap:  20 * time.Millisecond,
}

const (
	minDragSteps = 3
	maxDragSteps = 60
)

// device is the guest input device an event goes to.
type device int

const (
	devNone device = iota
	devPointer
	devKeyboard
	// devGuest is input delivered inside the guest (GuestInput): it may
	// overtake display events still queued in QEMU, so a switch to or from
	// it waits DeviceGap like any device switch.
	devGuest
)

// pacer applies a Pacing to a stream of events: before each event it sleeps
// what the previous one requires (DeviceGap on a device switch, KeyGap
// between key events) less what the action already paused since.
type pacer struct {
	p       Pacing
	lastDev device
	idle    time.Duration // paused since the last event
	// sleep waits d or until ctx is done; tests replace it with a clock.
	sleep func(ctx context.Context, d time.Duration) error
}

func newPacer(p Pacing) *pacer { return &pacer{p: p, sleep: sleepCtx} }

// reset forgets the previous event: a new Run starts unpaced.
func (pc *pacer) reset() { pc.lastDev, pc.idle = devNone, 0 }

// before paces an event on dev after the previous one.
func (pc *pacer) before(ctx context.Context, dev device) error {
	var gap time.Duration
	switch {
	case pc.lastDev != devNone && pc.lastDev != dev:
		gap = pc.p.DeviceGap
	case dev == devKeyboard && pc.lastDev == devKeyboard:
		gap = pc.p.KeyGap
	}
	gap -= pc.idle
	pc.lastDev, pc.idle = dev, 0
	return pc.sleep(ctx, gap)
}

// pause waits d as part of an action (a click's hold, a wait); it counts
// towards the next event's gap.
func (pc *pacer) pause(ctx context.Context, d time.Duration) error {
	pc.idle += d
	return pc.sleep(ctx, d)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
