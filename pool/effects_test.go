package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// recorder is an effector that records the effects carried out, by their
// table names, and fails the ones it is told to.
type recorder struct {
	calls []string
	fail  map[string]bool
}

func (r *recorder) do(name string) error {
	r.calls = append(r.calls, name)
	if r.fail[name] {
		return errors.New(name + " failed")
	}
	return nil
}

func (r *recorder) label(target) error { return r.do("label") }
func (r *recorder) endEpisode(target)  { r.do("end_episode") }
func (r *recorder) persist(target)     { r.do("persist") }
func (r *recorder) wake(target)        { r.do("wake") }
func (r *recorder) cancelCalls(target, bool) {
	r.do("cancel_calls")
}
func (r *recorder) unlabel(target) { r.do("unlabel") }
func (r *recorder) reset(target) (vmm.ResetResult, error) {
	return vmm.ResetResult{}, r.do("reset")
}
func (r *recorder) destroy(target) error { return r.do("destroy") }

// wantOrder is the order effects are carried out in, spelled here apart
// from effectOrder (effects.go) so that a change to either shows.
var wantOrder = []string{"label", "end_episode", "persist", "wake", "cancel_calls", "unlabel", "reset", "destroy"}

// inOrder sorts effect names by wantOrder.
func inOrder(names []string) []string {
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int { return slices.Index(wantOrder, a) - slices.Index(wantOrder, b) })
	return out
}

// TestEffectsCarriedOut: for every allowed transition of wantTable, the
// executor carries out exactly the effects the row names, each once, in
// wantOrder, and feeds back the outcome of the last. Dropping an effect
// from the executor (or carrying one out the table does not name) fails
// here, not only in the table.
func TestEffectsCarriedOut(t *testing.T) {
	rows := parseWant(t)
	for key, w := range rows {
		var names []string
		if w.fx != "" {
			names = strings.Split(w.fx, "+")
		}
		s, dirty, in := parseKey(t, key)
		_, _, fx, err := step(s, dirty, in)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		r := &recorder{}
		next, _, feed := runEffects(r, fx, target{vm: "vm1", pool: "p", episode: "ep-1"})
		if want := inOrder(names); !slices.Equal(r.calls, want) {
			t.Errorf("%s: carried out %v, want %v", key, r.calls, want)
		}
		wantNext, wantFeed := "", false
		switch {
		case slices.Contains(names, "reset"):
			wantNext, wantFeed = "reset_ok", true
		case slices.Contains(names, "destroy"):
			wantNext, wantFeed = "destroyed", true
		}
		if feed != wantFeed || feed && next.String() != wantNext {
			t.Errorf("%s: feeds back %v %s, want %v %s", key, feed, next, wantFeed, wantNext)
		}
	}
}

// TestEveryEffectCarriedOut: each effect alone is carried out, so that no
// effect of a later row can be silently ignored.
func TestEveryEffectCarriedOut(t *testing.T) {
	if len(wantOrder) != numEffects {
		t.Fatalf("wantOrder names %d effects, the table has %d", len(wantOrder), numEffects)
	}
	for i := 0; i < numEffects; i++ {
		fx := effects(1 << i)
		r := &recorder{}
		runEffects(r, fx, target{})
		if !slices.Equal(r.calls, []string{fx.String()}) {
			t.Errorf("%s alone: carried out %v", fx, r.calls)
		}
	}
}

// TestEffectOutcomes: a label refused aborts the lease before anything
// else is carried out; a failed reset feeds reset_failed; a failed destroy
// feeds nothing (the member stays destroying for the reconcile).
func TestEffectOutcomes(t *testing.T) {
	for _, c := range []struct {
		fx    effects
		fail  string
		calls string
		next  string // "" for none
	}{
		{fxLabel | fxPersist, "label", "label", "abort"},
		{fxCancelCalls | fxUnlabel | fxReset | fxPersist, "reset", "persist cancel_calls unlabel reset", "reset_failed"},
		{fxWake | fxDestroy, "destroy", "wake destroy", ""},
	} {
		r := &recorder{fail: map[string]bool{c.fail: true}}
		next, o, feed := runEffects(r, c.fx, target{})
		if got := strings.Join(r.calls, " "); got != c.calls {
			t.Errorf("%s with %s failing: carried out %q, want %q", c.fx, c.fail, got, c.calls)
		}
		got := ""
		if feed {
			got = next.String()
		}
		if got != c.next {
			t.Errorf("%s with %s failing: feeds back %q, want %q", c.fx, c.fail, got, c.next)
		}
		if errs := errors.Join(o.labelErr, o.resetErr, o.destroyErr); errs == nil || !strings.Contains(errs.Error(), c.fail) {
			t.Errorf("%s with %s failing: outcome %+v", c.fx, c.fail, o)
		}
	}
}

// parseKey reads a wantTable key "state dirty input".
func parseKey(t *testing.T, key string) (memberState, bool, input) {
	t.Helper()
	f := strings.Fields(key)
	var s memberState
	var in input
	for ; s < numStates && s.String() != f[0]; s++ {
	}
	for ; in < numInputs && in.String() != f[2]; in++ {
	}
	if s == numStates || in == numInputs {
		t.Fatalf("key %q", key)
	}
	return s, f[1] == "dirty", in
}

// labelFarm refuses to set episode labels while refuse is set.
type labelFarm struct {
	*vmmtest.Farm
	refuse atomic.Bool
}

func (f *labelFarm) SetLabel(ctx context.Context, id, key, value string) error {
	if key == LabelEpisode && value != "" && f.refuse.Load() {
		return fmt.Errorf("set metadata: %w", vmm.ErrTimeout)
	}
	return f.Farm.SetLabel(ctx, id, key, value)
}

// TestLeaseEffectsOnTheFarm: a lease labels its VM with the episode and
// its end removes the label; a label the farm refuses undoes the lease,
// and the VM, reset, is leasable again.
func TestLeaseEffectsOnTheFarm(t *testing.T) {
	f := &labelFarm{Farm: vmmtest.New()}
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	ctx := context.Background()
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	label := func(vm string) string { v, _ := f.Get(ctx, vm); return v.Labels[LabelEpisode] }

	ep, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := label(ep.VM); got != ep.ID {
		t.Fatalf("leased vm's episode label %q, want %s", got, ep.ID)
	}
	if _, err := m.End(ctx, ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	if got := label(ep.VM); got != "" {
		t.Fatalf("ended episode's label %q left on its vm", got)
	}

	f.refuse.Store(true)
	if _, err := m.Start(ctx, "tiny", time.Minute); !errors.Is(err, vmm.ErrTimeout) {
		t.Fatalf("start with labels refused: %v", err)
	}
	if eps := m.List(); len(eps) != 0 {
		t.Fatalf("a lease that could not be labelled is live: %+v", eps)
	}
	f.refuse.Store(false)
	waitFor(t, "the vm reset and warm again", func() bool { return warm(m) == 1 && m.Pools()[0].Ending == 0 })
	if _, err := m.Start(ctx, "tiny", time.Minute); err != nil {
		t.Fatalf("start after the aborted lease: %v", err)
	}
}
