package pool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// An episode's named snapshots are gone once it ends: the next episode on
// its VM finds none and cannot revert to the last one's state.
func TestEpisodeEndDropsSnapshots(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	ctx := context.Background()
	ep, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := f.SaveSnapshot(ctx, ep.VM, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.End(ctx, ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	if snaps, err := f.Snapshots(ctx, ep.VM); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots after the episode ended: %+v %v", snaps, err)
	}
	next, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil || next.VM != ep.VM {
		t.Fatalf("next episode: %+v %v (want vm %s again)", next, err, ep.VM)
	}
	if _, err := f.RevertSnapshot(ctx, next.VM, "a"); !errors.Is(err, vmm.ErrSnapshotNotFound) {
		t.Fatalf("revert to the last episode's snapshot: %v, want ErrSnapshotNotFound", err)
	}
}

// dropFails is a farm whose DropSnapshots fails: a VM that may still hold
// an episode's snapshots must not go back to the pool.
type dropFails struct{ *vmmtest.Farm }

func (dropFails) DropSnapshots(context.Context, string) error {
	return errors.New("delvm: monitor gone")
}

func TestFailedDropReplacesTheVM(t *testing.T) {
	f := dropFails{vmmtest.New()}
	m := newTestManager(t, f, testConfig(0, 1), t.TempDir())
	ctx := context.Background()
	ep, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	e, err := m.End(ctx, ep.ID, ReasonDeleted)
	if err != nil || !e.VMReplaced {
		t.Fatalf("end: %+v %v, want the vm replaced", e, err)
	}
	if _, err := f.Get(ctx, ep.VM); !errors.Is(err, vmm.ErrNotFound) {
		t.Fatalf("vm whose snapshots could not be dropped: %v, want destroyed", err)
	}
}

func TestFork(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(0, 4), t.TempDir())
	ctx := context.Background()
	src, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(ctx, src.VM, "/tmp/state", []byte("before the fork"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SaveSnapshot(ctx, src.VM, "mine"); err != nil {
		t.Fatal(err)
	}
	eps, err := m.Fork(ctx, src.ID, 2, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || eps[0].ID == eps[1].ID || eps[0].VM == eps[1].VM {
		t.Fatalf("fork of 2: %+v", eps)
	}
	for _, ep := range eps {
		if ep.Pool != "tiny" || ep.State != EpisodeActive || ep.VM == src.VM || ep.CleanStart || ep.Warm || ep.TTLSeconds != 30 {
			t.Errorf("forked episode: %+v", ep)
		}
		if got, _ := f.File(ep.VM, "/tmp/state"); string(got) != "before the fork" {
			t.Errorf("fork %s holds %q, want the source's file", ep.VM, got)
		}
		vm, err := f.Get(ctx, ep.VM)
		if err != nil || vm.Labels[LabelPool] != "tiny" || vm.Labels[LabelEpisode] != ep.ID {
			t.Errorf("forked vm %+v %v: want the pool's, leased to %s", vm, err, ep.ID)
		}
		if snaps, _ := f.Snapshots(ctx, ep.VM); len(snaps) != 0 {
			t.Errorf("fork %s holds the source's snapshots: %+v", ep.VM, snaps)
		}
		if pool, owner, _ := m.Owner(ep.VM); pool != "tiny" || owner != ep.ID {
			t.Errorf("owner of %s: %s %s", ep.VM, pool, owner)
		}
	}
	// The source goes on, its episode untouched.
	if now, _ := m.Get(src.ID); now.State != EpisodeActive || now.VM != src.VM {
		t.Fatalf("source after the fork: %+v", now)
	}
	if p := m.Pools()[0]; p.Leased != 3 || p.Booting != 0 {
		t.Fatalf("pool after the fork: %+v", p)
	}

	// The pool's max counts forks: one more fits, two do not.
	_, err = m.Fork(ctx, src.ID, 2, 0)
	if !errors.Is(err, ErrPoolFull) || fielderr.Field(err) != "count" || !strings.Contains(err.Error(), "max of 4: 1 would") {
		t.Fatalf("fork over the max: %v, want ErrPoolFull naming the max and 1", err)
	}
	if p := m.Pools()[0]; p.Booting != 0 || p.Leased != 3 {
		t.Fatalf("pool after a refused fork: %+v", p)
	}

	// A forked episode ends like any: its VM is reset and stays warm.
	e, err := m.End(ctx, eps[0].ID, ReasonDeleted)
	if err != nil || e.VMReplaced {
		t.Fatalf("end a fork: %+v %v", e, err)
	}
	if p := m.Pools()[0]; p.Warm != 1 || p.Leased != 2 {
		t.Fatalf("pool after a fork ended: %+v", p)
	}

	// Bad calls.
	if _, err := m.Fork(ctx, src.ID, 0, 0); !errors.Is(err, vmm.ErrInvalid) || fielderr.Field(err) != "count" {
		t.Errorf("fork of 0: %v", err)
	}
	if _, err := m.Fork(ctx, src.ID, 1, 48*time.Hour); !errors.Is(err, vmm.ErrInvalid) {
		t.Errorf("fork with a ttl over the max: %v", err)
	}
	if _, err := m.Fork(ctx, eps[0].ID, 1, 0); !errors.Is(err, ErrEpisodeEnded) {
		t.Errorf("fork of an ended episode: %v", err)
	}
	if _, err := m.Fork(ctx, "ep-none", 1, 0); !errors.Is(err, ErrEpisodeNotFound) {
		t.Errorf("fork of no episode: %v", err)
	}
}

// vmm's admission refuses a fork that does not fit the host whole, saying
// how many would; the pool is left as it was.
func TestForkHostFull(t *testing.T) {
	f := vmmtest.New()
	f.MemoryLimitMiB = 3 * 256 // the source and two more
	m := newTestManager(t, f, testConfig(0, 8), t.TempDir())
	ctx := context.Background()
	src, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Fork(ctx, src.ID, 3, 0)
	le, ok := errors.AsType[*vmm.LimitError](err)
	if !errors.Is(err, vmm.ErrInsufficientResources) || !ok || le.Fits != 2 || le.Limit != "memory" {
		t.Fatalf("fork of 3 with room for 2: %v, want a memory LimitError with Fits 2", err)
	}
	if p := m.Pools()[0]; p.Booting != 0 || p.Leased != 1 || p.Warm != 0 || f.Count() != 1 {
		t.Fatalf("pool after a refused fork: %+v, %d vms", p, f.Count())
	}
	if eps, err := m.Fork(ctx, src.ID, 2, 0); err != nil || len(eps) != 2 {
		t.Fatalf("fork of 2 that fits: %+v %v", eps, err)
	}
}
