package pool

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// farmShapes returns the memory of each VM the farm has, by the pool label.
func farmShapes(f *vmmtest.Farm) map[string][]int {
	vms, _ := f.List(context.Background())
	out := map[string][]int{}
	for _, v := range vms {
		out[v.Labels[LabelPool]] = append(out[v.Labels[LabelPool]], v.MemoryMiB)
	}
	for _, mem := range out {
		slices.Sort(mem)
	}
	return out
}

func twoPools(tinyWarm, tinyMax int) Config {
	c := testConfig(tinyWarm, tinyMax)
	c.Pools = append(c.Pools, PoolConfig{Name: "extra", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 2})
	c.SetDefaults()
	return c
}

// TestSetPools: a running farm takes a new config: an added pool boots
// its warm VM, changed counts and TTLs apply to the next start, a reshaped
// pool's free VMs are replaced at once and its leased VM when its episode
// ends, and a removed pool refuses starts and destroys its free VM at once
// and its leased one when its episode ends, which works until then.
func TestSetPools(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 2), t.TempDir())
	ctx := context.Background()
	waitFor(t, "one free vm", func() bool { return len(desktopsIn(m, DesktopFree)) == 1 })

	bad := twoPools(1, 2)
	bad.Pools[1].Max = -1
	if err := m.SetPools(ctx, bad); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("invalid config: %v", err)
	}
	if _, err := m.Start(ctx, "extra", 0); !errors.Is(err, ErrUnknownPool) {
		t.Fatalf("a refused config was applied: %v", err)
	}

	// Add a pool; change tiny's TTL.
	cfg := twoPools(1, 2)
	cfg.Pools[0].DefaultTTL = 120
	ch := m.Changed()
	if err := m.SetPools(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("set pools was not announced")
	}
	if got := m.Config(); len(got.Pools) != 2 || got.Pools[1].Name != "extra" {
		t.Fatalf("config after set: %+v", got)
	}
	waitFor(t, "the new pool's free vm", func() bool { return len(desktopsIn(m, DesktopFree, "extra")) == 1 })
	tinyEp, err := m.Start(ctx, "tiny", 0)
	if err != nil || tinyEp.TTLSeconds != 120 {
		t.Fatalf("start with the new default ttl: %+v %v", tinyEp, err)
	}
	extraEp, err := m.Start(ctx, "extra", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both pools refilled", func() bool {
		return len(desktopsIn(m, DesktopFree, "tiny")) == 1 && len(desktopsIn(m, DesktopFree, "extra")) == 1
	})

	// Reshape tiny (512 MiB) and remove extra.
	cfg = testConfig(1, 2)
	cfg.Pools[0].MemoryMiB = 512
	if err := m.SetPools(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, "extra", 0); !errors.Is(err, ErrUnknownPool) {
		t.Fatalf("start on a removed pool: %v", err)
	}
	waitFor(t, "free vms of the old shape and of the removed pool destroyed, a new one booted", func() bool {
		s := farmShapes(f)
		return slices.Equal(s["tiny"], []int{256, 512}) && slices.Equal(s["extra"], []int{256}) &&
			len(desktopsIn(m, DesktopFree, "tiny")) == 1
	})
	// The episodes on them go on.
	for _, ep := range []Episode{tinyEp, extraEp} {
		vm, _, release, err := m.Acquire(ctx, ep.ID)
		if err != nil || vm != ep.VM {
			t.Fatalf("episode %s after set pools: %s %v", ep.ID, vm, err)
		}
		release()
	}
	if d := desktopsIn(m, DesktopLeased, "extra"); !slices.Equal(d, []string{extraEp.VM}) {
		t.Fatalf("the removed pool's leased vm is not listed leased: %+v", m.Desktops())
	}
	// Their VMs go when the episodes end.
	for _, ep := range []Episode{tinyEp, extraEp} {
		if _, err := m.End(ctx, ep.ID, ReasonDeleted); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the old vms destroyed", func() bool {
		s := farmShapes(f)
		return slices.Equal(s["tiny"], []int{512}) && len(s["extra"]) == 0 && len(m.Desktops()) == 1
	})
	if _, err := f.Get(ctx, extraEp.VM); !errors.Is(err, vmm.ErrNotFound) {
		t.Fatalf("the removed pool's vm: %v", err)
	}

	// Counts: a larger min_warm boots at once, a smaller max evicts.
	cfg.Pools[0].MinWarm, cfg.Pools[0].Max = 3, 3
	if err := m.SetPools(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three free", func() bool { return len(desktopsIn(m, DesktopFree)) == 3 })
	cfg.Pools[0].MinWarm, cfg.Pools[0].Max = 1, 1
	if err := m.SetPools(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one left", func() bool { return len(desktopsIn(m, DesktopFree)) == 1 && f.Count() == 1 })

	// No pools at all: every pool goes.
	if err := m.SetPools(ctx, Config{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no vm left", func() bool { return len(m.Desktops()) == 0 && f.Count() == 0 && len(m.Pools()) == 0 })
	if _, err := m.Start(ctx, "tiny", 0); !errors.Is(err, ErrUnknownPool) {
		t.Fatalf("start with no pools: %v", err)
	}
}

// stuckFarm fails every Destroy, after its deadline, while stuck is set:
// a farm that stops before its evictions finish.
type stuckFarm struct {
	*vmmtest.Farm
	stuck atomic.Bool
}

func (f *stuckFarm) Destroy(ctx context.Context, id string) error {
	if f.stuck.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.Farm.Destroy(ctx, id)
}

// TestSetPoolsThenRestart: a farm stopped after SetPools, before any VM
// it retired was destroyed, and restarted with the new config takes every
// VM in (none is orphaned): the removed pool's leased VM comes back leased
// and is destroyed when its episode ends, the free VMs of the removed pool
// and of the old shape are destroyed and replaced.
func TestSetPoolsThenRestart(t *testing.T) {
	f := &stuckFarm{Farm: vmmtest.New()}
	dir := t.TempDir()
	ctx := context.Background()
	m1, err := New(ctx, f, twoPools(1, 2), Options{StateDir: dir, DestroyTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two free", func() bool { return len(desktopsIn(m1, DesktopFree)) == 2 })
	ep, err := m1.Start(ctx, "extra", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refilled", func() bool { return len(desktopsIn(m1, DesktopFree)) == 2 })
	f.stuck.Store(true)
	cfg := testConfig(1, 2)
	cfg.Pools[0].MemoryMiB = 512
	if err := m1.SetPools(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retired free vms dead", func() bool { return len(desktopsIn(m1, DesktopDead)) == 2 })
	m1.Close() // as after kill -9: Close writes nothing
	f.stuck.Store(false)
	// The refill may have booted a 512 MiB VM before it stopped.
	if s := farmShapes(f.Farm); s["tiny"][0] != 256 || !slices.Equal(s["extra"], []int{256, 256}) {
		t.Fatalf("vms before the restart: %v", s)
	}

	m2 := newTestManager(t, f, cfg, dir)
	if got, err := m2.Get(ep.ID); err != nil || got.State != EpisodeActive || got.VM != ep.VM {
		t.Fatalf("episode of the removed pool after restart: %+v %v", got, err)
	}
	waitFor(t, "retired free vms replaced", func() bool {
		s := farmShapes(f.Farm)
		return slices.Equal(s["tiny"], []int{512}) && slices.Equal(s["extra"], []int{256}) && len(desktopsIn(m2, DesktopFree, "tiny")) == 1
	})
	if d := desktopsIn(m2, DesktopLeased, "extra"); !slices.Equal(d, []string{ep.VM}) {
		t.Fatalf("the leased vm of the removed pool: %+v", m2.Desktops())
	}
	if _, err := m2.End(ctx, ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed pool's vm destroyed", func() bool { s := farmShapes(f.Farm); return len(s["extra"]) == 0 && f.Count() == 1 })
}
