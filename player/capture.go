package player

import (
	"context"
	"fmt"
	"image"
	"log/slog"
	"time"

	"github.com/deskfarm/deskfarm/actions"
)

// capturer takes settled screenshots for one Run: it settles only when input
// was sent (or time passed) since the last settle, and tracks the settle
// time and timeouts in the Result.
type capturer struct {
	d     Display
	opts  RunOptions
	res   *Result
	dirty bool // input sent (or time waited) since the last settle

	activity GuestActivity // nil: the screen alone decides
	idle     float64       // guest utilisation that counts as idle
	now      func() time.Time
	log      *slog.Logger
}

// settle waits for the screen to reflect the input and go quiet. Without
// input since the last settle only a fresh frame is needed (quiet 0).
func (c *capturer) settle(ctx context.Context) error {
	if c.opts.NoSettle {
		c.dirty = false
		return nil
	}
	quiet, max := c.opts.quiet(), c.opts.max()
	var (
		d        time.Duration
		timedOut bool
		err      error
	)
	if c.dirty && c.activity != nil && !c.opts.NoGuestSettle {
		d, timedOut, err = c.settleGuest(ctx, quiet, max)
	} else {
		if !c.dirty {
			quiet = 0 // nothing sent since the last settle: a fresh frame will do
		}
		d, err = c.d.Settle(ctx, quiet, max)
		timedOut = d >= max
	}
	c.res.Settle += d
	if timedOut {
		c.res.SettleTimedOut = true
	}
	c.dirty = false
	if err != nil {
		return fmt.Errorf("settle: %w: %w", actions.ErrDisplay, err)
	}
	return nil
}

// shot settles and captures a screenshot (z nil) or a zoom from the
// display's snapshot, through the executor's scaler.
func (c *capturer) shot(ctx context.Context, e *Executor, z *actions.Zoom) (*Image, error) {
	if err := c.settle(ctx); err != nil {
		return nil, err
	}
	snap := c.d.Snapshot()
	if snap == nil {
		return nil, fmt.Errorf("snapshot: %w: no framebuffer yet", actions.ErrDisplay)
	}
	if nw, nh := e.scaler.Native(); snap.Rect.Dx() != nw || snap.Rect.Dy() != nh {
		e.refreshScaler()
		if nw, nh := e.scaler.Native(); snap.Rect.Dx() != nw || snap.Rect.Dy() != nh {
			return nil, fmt.Errorf("snapshot is %dx%d but the display reports %dx%d: %w",
				snap.Rect.Dx(), snap.Rect.Dy(), nw, nh, actions.ErrDisplay)
		}
	}
	var img *image.RGBA
	if z != nil {
		var err error
		if img, err = e.scaler.Zoom(snap, z.Region, z.Width, z.Height); err != nil {
			return nil, err
		}
	} else {
		img = e.scaler.Screenshot(snap)
	}
	return encodeImage(img, c.opts.encodeOptions())
}
