package vmm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// step is one named stage of a lifecycle. undo, when set, reverses do; it
// runs only if do succeeded and a later step failed. undo gets a context that
// is not cancelled with the one the steps ran under (a cancelled create must
// still clean up) but is bounded by undoTimeout.
type step struct {
	name string
	do   func(ctx context.Context) error
	undo func(ctx context.Context) error
}

// undoTimeout bounds the whole unwinding of a failed lifecycle.
const undoTimeout = 60 * time.Second

// runSteps runs steps in order, logging each with its duration. When one
// fails, the completed steps are undone in reverse order and the result joins
// the failure with any cleanup errors, so nothing half-made is left behind.
func runSteps(ctx context.Context, log *slog.Logger, steps []step) error {
	done := make([]step, 0, len(steps))
	for _, s := range steps {
		start := time.Now()
		log.Debug("step started", "op", s.name)
		err := ctx.Err()
		if err == nil {
			err = s.do(ctx)
		}
		if err != nil {
			log.Warn("step failed", "op", s.name, "duration", time.Since(start).Round(time.Millisecond), "err", err)
			errs := []error{fmt.Errorf("%s: %w", s.name, err)}
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
			defer cancel()
			for i := len(done) - 1; i >= 0; i-- {
				if done[i].undo == nil {
					continue
				}
				ustart := time.Now()
				if uerr := done[i].undo(uctx); uerr != nil {
					errs = append(errs, fmt.Errorf("undo %s: %w", done[i].name, uerr))
					log.Error("undo failed", "op", done[i].name, "err", uerr)
				} else {
					log.Info("undone", "op", done[i].name, "duration", time.Since(ustart).Round(time.Millisecond))
				}
			}
			return errors.Join(errs...)
		}
		log.Info("step finished", "op", s.name, "duration", time.Since(start).Round(time.Millisecond))
		done = append(done, s)
	}
	return nil
}
