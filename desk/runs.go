package desk

import (
	"context"
	"sync"
	"time"
)

// runSet is a desk's runs in flight (Run, RunCall), each with the time it
// began and a way to cut it short. A reset cancels the runs begun before
// it, and the desk's close cancels them all, so that a run in a long wait,
// a settle or a paste stops at once instead of holding its executor (and
// with it the reset's release of held input) until it ends by itself.
type runSet struct {
	mu   sync.Mutex
	runs map[*run]struct{}
}

type run struct {
	began  time.Time
	cancel context.CancelCauseFunc
}

func (s *runSet) init() { s.runs = map[*run]struct{}{} }

// start registers a run and returns its context, which ends with the
// caller's ctx or when the run is cancelled (its cause then says why);
// end unregisters it.
func (s *runSet) start(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &run{began: time.Now(), cancel: cancel}
	s.mu.Lock()
	s.runs[r] = struct{}{}
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		delete(s.runs, r)
		s.mu.Unlock()
		cancel(nil)
	}
}

// cancelBefore cancels, with cause, the runs that began before at and
// reports how many. A run begun after a reset is the agent's answer to
// the reset (its episode may be new) and goes on.
func (s *runSet) cancelBefore(at time.Time, cause error) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for r := range s.runs {
		if r.began.Before(at) {
			r.cancel(cause)
			n++
		}
	}
	return n
}

// cancelAll cancels every run with cause: the desk is closing.
func (s *runSet) cancelAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.runs {
		r.cancel(cause)
	}
}
