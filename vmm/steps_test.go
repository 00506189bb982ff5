package vmm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"
)

var errBoom = errors.New("boom")

func TestRunStepsUnwindsInReverse(t *testing.T) {
	var trail []string
	mk := func(name string, fail bool) step {
		return step{name: name,
			do: func(context.Context) error {
				trail = append(trail, "do "+name)
				if fail {
					return errBoom
				}
				return nil
			},
			undo: func(context.Context) error { trail = append(trail, "undo "+name); return nil }}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := runSteps(context.Background(), log, []step{mk("overlay", false), mk("define", false), mk("start", true), mk("snapshot", false)})
	if !errors.Is(err, errBoom) || err.Error() != "start: boom" {
		t.Fatalf("err = %v, want start: boom wrapping errBoom", err)
	}
	want := []string{"do overlay", "do define", "do start", "undo define", "undo overlay"}
	if !reflect.DeepEqual(trail, want) {
		t.Fatalf("trail = %v, want %v", trail, want)
	}

	trail = nil
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runSteps(ctx, log, []step{mk("overlay", false)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if len(trail) != 0 {
		t.Fatalf("ran after cancel: %v", trail)
	}
}

// A failed undo is reported beside the failure, and the other undos still run
// with a live context even when the steps' own context was cancelled.
func TestRunStepsUndoAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	errUndo := errors.New("undo broke")
	var undoCtxErr []error
	steps := []step{
		{name: "a", do: func(context.Context) error { return nil },
			undo: func(ctx context.Context) error { undoCtxErr = append(undoCtxErr, ctx.Err()); return nil }},
		{name: "b", do: func(context.Context) error { return nil },
			undo: func(ctx context.Context) error { undoCtxErr = append(undoCtxErr, ctx.Err()); return errUndo }},
		{name: "c", do: func(context.Context) error { cancel(); return context.Canceled }},
	}
	err := runSteps(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), steps)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errUndo) {
		t.Fatalf("err = %v, want both the cancel and the undo failure", err)
	}
	if len(undoCtxErr) != 2 || undoCtxErr[0] != nil || undoCtxErr[1] != nil {
		t.Fatalf("undo contexts: %v, want two live ones", undoCtxErr)
	}
}
