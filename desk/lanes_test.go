package desk

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/pool"
)

// stallDisplay is a display whose settle blocks until release closes,
// ignoring its context: the worst case of a run slow to stop.
type stallDisplay struct {
	*fakeDisplay
	entered chan struct{} // closed when the first settle begins
	once    sync.Once
	release chan struct{}
}

func newStall() *stallDisplay {
	return &stallDisplay{entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *stallDisplay) wrap(f *fakeDisplay) Display { s.fakeDisplay = f; return s }

func (s *stallDisplay) Settle(ctx context.Context, _, _ time.Duration) (time.Duration, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return 0, ctx.Err()
}

// bound is how long a test waits for something that must happen while
// another VM stalls; it bounds the test, it does not time the farm.
const bound = 10 * time.Second

func waitApplied(t *testing.T, p *Pool, id string, since time.Time, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := p.WaitReset(ctx, id, since); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A reset of vm1 whose run will not stop (its settle ignores the
// cancellation) holds back only vm1's own events: vm2's reset, the end of
// an episode on vm3 and vm2's death reach their desks and viewers while
// vm1's run is still blocked. One farm-wide event loop applied them only
// after vm1's run returned.
func TestStalledResetDelaysNoOtherVM(t *testing.T) {
	r := newRig(t, 2)
	stall := newStall()
	r.wrap["vm1"] = stall.wrap
	t.Cleanup(func() {
		select {
		case <-stall.release:
		default:
			close(stall.release)
		}
	})
	pools, err := pool.New(context.Background(), r.farm, pool.DefaultConfig("tiny", 0),
		pool.Options{StateDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pools.Close() })

	a, b := r.get("vm1"), r.get("vm2")
	aRun := make(chan error, 1)
	go func() {
		_, err := a.Run(context.Background(), player.ScreenshotSize{}, nil, player.RunOptions{})
		aRun <- err
	}()
	<-stall.entered
	sinceA := time.Now()
	if _, err := r.farm.Reset(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	stalled := func(what string) {
		t.Helper()
		select {
		case err := <-aRun:
			t.Fatalf("%s: vm1's run returned (%v) before the test let it", what, err)
		default:
		}
	}

	// vm2's reset: the agent's held Shift and a person's control end.
	if _, err := b.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TakeControl(); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	if _, err := r.farm.Reset(context.Background(), "vm2"); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, r.pool, "vm2", since, "vm2's reset while vm1's reset waits for its run")
	stalled("vm2's reset applied")
	if k, _ := r.display("vm2").guest(); k != 0 {
		t.Errorf("vm2's guest holds %d keys after its reset", k)
	}
	if _, human := b.Human(); human {
		t.Error("vm2's control outlived its reset")
	}

	// The end of an episode on a third VM.
	ep, err := pools.Start(context.Background(), pool.DefaultPoolName, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := r.get(ep.VM)
	if _, err := c.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Fatal(err)
	}
	since = time.Now()
	if _, err := pools.End(context.Background(), ep.ID, pool.ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, r.pool, ep.VM, since, "the episode's end while vm1's reset waits for its run")
	stalled("the episode's end applied")
	if k, _ := r.display(ep.VM).guest(); k != 0 {
		t.Errorf("%s's guest holds %d keys after its episode ended", ep.VM, k)
	}

	// vm2's death reaches its viewer.
	v, err := b.Watch(0)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	r.farm.Kill("vm2", "crashed")
	select {
	case <-v.Done():
	case <-time.After(bound):
		t.Fatal("vm2's viewer still open after its death while vm1's reset waits for its run")
	}
	stalled("vm2's death applied")
	if !r.display("vm2").isClosed() {
		t.Error("vm2's display still open after its death")
	}

	// vm1's run, let go, ends as cut short by the reset, which then applies.
	close(stall.release)
	if err := <-aRun; !errors.Is(err, ErrReset) {
		t.Errorf("vm1's run after its reset: %v, want ErrReset", err)
	}
	waitApplied(t, r.pool, "vm1", sinceA, "vm1's reset once its run returned")
}

// waitActs is a wait as long as a wait may be: only a cancellation ends it
// within a test.
func waitActs(t *testing.T) []actions.Action {
	t.Helper()
	acts, err := actions.DecodeActions([]byte(`[{"kind":"wait","duration_ms":100000}]`))
	if err != nil {
		t.Fatal(err)
	}
	return acts
}

// running returns once d has n runs in flight.
func running(t *testing.T, d *Desk, n int) {
	t.Helper()
	eventually(t, "run in flight", func() bool {
		d.runs.mu.Lock()
		defer d.runs.mu.Unlock()
		return len(d.runs.runs) == n
	})
}

// A reset cuts a run in a 100 s wait short: the run ends with a
// *ResetError naming the VM, what the agent held is released, and the
// agent acts again at once.
func TestResetCancelsTheRun(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := d.Run(context.Background(), player.ScreenshotSize{}, waitActs(t), quick)
		got <- err
	}()
	running(t, d, 1)
	since := time.Now()
	if _, err := r.farm.Reset(context.Background(), "vm1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		var re *ResetError
		if !errors.As(err, &re) || re.VM != "vm1" || !strings.Contains(err.Error(), "wait") {
			t.Errorf("run under a reset: %v, want a *ResetError for vm1 naming the wait", err)
		}
	case <-time.After(bound):
		t.Fatal("a run in a 100 s wait goes on after its VM was reset")
	}
	waitApplied(t, r.pool, "vm1", since, "the reset")
	if k, _ := r.display("vm1").guest(); k != 0 {
		t.Errorf("the guest holds %d keys after the reset", k)
	}
	if _, err := d.Run(context.Background(), player.ScreenshotSize{}, keyDown(t), quick); err != nil {
		t.Errorf("agent after the reset: %v", err)
	}
}

// A VM's death cuts its run short with the death, not the end of a 100 s wait.
func TestDeathCancelsTheRun(t *testing.T) {
	r := newRig(t, 1)
	d := r.get("vm1")
	got := make(chan error, 1)
	go func() {
		_, err := d.Run(context.Background(), player.ScreenshotSize{}, waitActs(t), quick)
		got <- err
	}()
	running(t, d, 1)
	r.farm.Kill("vm1", "crashed")
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "crashed") {
			t.Errorf("run under a death: %v, want ErrClosed saying the VM crashed", err)
		}
	case <-time.After(bound):
		t.Fatal("a run in a 100 s wait goes on after its VM died")
	}
}

// A reset cancels only the runs begun before it: a run begun since is the
// agent's answer to the reset (a next episode's first call) and goes on.
func TestResetSparesLaterRuns(t *testing.T) {
	var s runSet
	s.init()
	before, endBefore := s.start(context.Background())
	defer endBefore()
	time.Sleep(time.Millisecond) // distinct start times, not a timed assert
	at := time.Now()
	time.Sleep(time.Millisecond)
	after, endAfter := s.start(context.Background())
	defer endAfter()
	cause := &ResetError{VM: "vm1", At: at}
	if n := s.cancelBefore(at, cause); n != 1 {
		t.Errorf("cancelled %d runs, want 1", n)
	}
	if context.Cause(before) != cause {
		t.Errorf("the earlier run's cause is %v, want the reset", context.Cause(before))
	}
	if after.Err() != nil {
		t.Errorf("the run begun after the reset was cancelled: %v", context.Cause(after))
	}
}
