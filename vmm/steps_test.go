package vmm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"testing"
)

func TestRunStepsUnwindsInReverse(t *testing.T) {
	var trail []string
	mk := func(name string, fail bool) step {
		return step{name: name,
			do: func(context.Context) error {
				trail = append(trail, "do "+name)
				if fail {
					return errors.New("boom")
				}
				return nil
			},
			undo: func() error { trail = append(trail, "undo "+name); return nil }}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := runSteps(context.Background(), log, []step{mk("overlay", false), mk("define", false), mk("start", true), mk("snapshot", false)})
	if err == nil || !errors.Is(err, err) || err.Error() != "start: boom" {
		t.Fatalf("err = %v", err)
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
