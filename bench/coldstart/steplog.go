package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// stepLog is a slog.Handler that keeps the duration of each lifecycle step
// vmm logs ("step finished", keys vm, op, duration) by VM, and passes
// records at or above the inner handler's level on.
type stepLog struct {
	inner slog.Handler
	attrs []slog.Attr
	*steps
}

type steps struct {
	mu sync.Mutex
	by map[string]map[string]time.Duration
}

func newStepLog(inner slog.Handler) *stepLog {
	return &stepLog{inner: inner, steps: &steps{by: map[string]map[string]time.Duration{}}}
}

func (h *stepLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *stepLog) Handle(ctx context.Context, r slog.Record) error {
	// A reset's record ("vm reset", op reset) has its loadvm beside the
	// duration: kept as op "reset loadvm".
	if r.Message == "step finished" || r.Message == "vm reset" {
		var vm, op string
		var d, loadvm time.Duration
		visit := func(a slog.Attr) bool {
			switch a.Key {
			case "vm":
				vm = a.Value.String()
			case "op":
				op = a.Value.String()
			case "duration":
				if a.Value.Kind() == slog.KindDuration {
					d = a.Value.Duration()
				}
			case "loadvm":
				if a.Value.Kind() == slog.KindDuration {
					loadvm = a.Value.Duration()
				}
			}
			return true
		}
		for _, a := range h.attrs {
			visit(a)
		}
		r.Attrs(visit)
		if vm != "" && op != "" {
			h.mu.Lock()
			if h.by[vm] == nil {
				h.by[vm] = map[string]time.Duration{}
			}
			h.by[vm][op] = d
			if loadvm > 0 {
				h.by[vm][op+" loadvm"] = loadvm
			}
			h.mu.Unlock()
		}
	}
	if h.inner.Enabled(ctx, r.Level) {
		return h.inner.Handle(ctx, r)
	}
	return nil
}

func (h *stepLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &stepLog{inner: h.inner.WithAttrs(as), attrs: append(append([]slog.Attr(nil), h.attrs...), as...), steps: h.steps}
}

func (h *stepLog) WithGroup(name string) slog.Handler {
	return &stepLog{inner: h.inner.WithGroup(name), attrs: h.attrs, steps: h.steps}
}

// take returns and forgets the steps logged for vm.
func (s *steps) take(vm string) map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.by[vm]
	delete(s.by, vm)
	return d
}
