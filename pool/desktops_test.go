package pool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// gateFarm holds each Create before vmm defines its VM and again after,
// and each Reset before it starts, until the test sends on define, boot
// or reset: each state in between lasts as long as the test needs.
type gateFarm struct {
	*vmmtest.Farm
	define, boot, reset chan struct{}
}

func newGateFarm() *gateFarm {
	return &gateFarm{Farm: vmmtest.New(), define: make(chan struct{}), boot: make(chan struct{}), reset: make(chan struct{})}
}

func (g *gateFarm) Create(ctx context.Context, o vmm.CreateOptions) (vmm.VM, error) {
	select {
	case <-g.define:
	case <-ctx.Done():
		return vmm.VM{}, ctx.Err()
	}
	vm, err := g.Farm.Create(ctx, o)
	if err != nil {
		return vm, err
	}
	select {
	case <-g.boot:
		return vm, nil
	case <-ctx.Done():
		g.Farm.Destroy(context.Background(), vm.ID)
		return vmm.VM{}, ctx.Err()
	}
}

func (g *gateFarm) Reset(ctx context.Context, id string) (vmm.ResetResult, error) {
	select {
	case <-g.reset:
	case <-ctx.Done():
		return vmm.ResetResult{}, ctx.Err()
	}
	return g.Farm.Reset(ctx, id)
}

// watch returns a watcher of m as a cluster agent is one: it reads
// Desktops, lets act (nil: nothing) make a change, then re-reads Desktops
// at each close of Changed until what it reads is want(), waiting at most
// 5 s for each close. A change Desktops shows without Changed announcing
// it leaves the watcher waiting: the test fails.
func watch(t *testing.T, m *Manager) func(what string, act func(), want func() []Desktop) {
	return func(what string, act func(), want func() []Desktop) {
		t.Helper()
		ch := m.Changed()
		got := m.Desktops()
		if act != nil {
			act()
		}
		for !slices.Equal(got, want()) {
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("waiting for %s: no change announced; Desktops %+v, want %+v", what, got, want())
			}
			ch = m.Changed()
			got = m.Desktops()
		}
	}
}

// TestDesktopsFollowEachChange: a watcher re-reading Desktops on each
// Changed sees a VM booting (once vmm defined it), free, leased (with its
// episode and expiry), resetting at the episode's end, and free again;
// each of those changes is announced.
func TestDesktopsFollowEachChange(t *testing.T) {
	f := newGateFarm()
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	next := watch(t, m)
	send := func(ch chan struct{}) func() { return func() { ch <- struct{}{} } }
	is := func(state DesktopState) func() []Desktop {
		return func() []Desktop { return []Desktop{{VM: "vm1", Pool: "tiny", State: state}} }
	}

	next("a vm booting", send(f.define), is(DesktopBooting))
	next("the vm free", send(f.boot), is(DesktopFree))
	var ep Episode
	next("the vm leased", func() {
		var err error
		if ep, err = m.StartOn(context.Background(), "tiny", "vm1", "ep-0123456789ab", time.Minute); err != nil {
			t.Fatal(err)
		}
	}, func() []Desktop {
		return []Desktop{{VM: "vm1", Pool: "tiny", State: DesktopLeased, Episode: "ep-0123456789ab", ExpiresAt: ep.ExpiresAt}}
	})
	if ep.ExpiresAt.IsZero() {
		t.Fatalf("episode %+v has no expiry", ep)
	}
	ended := make(chan error, 1)
	next("the vm resetting", func() {
		go func() { _, err := m.End(context.Background(), ep.ID, ReasonDeleted); ended <- err }()
	}, is(DesktopResetting))
	next("the vm free again", send(f.reset), is(DesktopFree))
	if err := <-ended; err != nil {
		t.Fatal(err)
	}

	// A touched warm VM is not free: it is reset before it is offered.
	next("the touched vm resetting", func() { m.Touch("vm1") }, is(DesktopResetting))
	next("the touched vm free again", send(f.reset), is(DesktopFree))
}

// TestStartOn: StartOn leases the VM it names to the episode id it names,
// with Start's TTL rules and bookkeeping, and refuses anything else with
// an error saying what is wrong.
func TestStartOn(t *testing.T) {
	f := &heldResets{Farm: vmmtest.New(), release: make(chan struct{})}
	dir := t.TempDir()
	cfg := testConfig(2, 3)
	cfg.Pools = append(cfg.Pools, PoolConfig{Name: "other", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 1})
	cfg.SetDefaults()
	m := newTestManager(t, f, cfg, dir)
	ctx := context.Background()
	waitFor(t, "three free vms", func() bool { return len(desktopsIn(m, DesktopFree)) == 3 })
	var tinyVMs []string
	for _, d := range m.Desktops() {
		if d.Pool == "tiny" {
			tinyVMs = append(tinyVMs, d.VM)
		}
	}
	slices.Sort(tinyVMs)
	// The second of the pool's VMs, not the one Start would pick.
	vm := tinyVMs[1]

	for _, id := range []string{"", "ep-0123", "ep-0123456789AB", "ep-0123456789abc", "xx-0123456789ab"} {
		_, err := m.StartOn(ctx, "tiny", vm, id, time.Minute)
		if !errors.Is(err, vmm.ErrInvalid) || fielderr.Field(err) != "episode" || !strings.Contains(err.Error(), "ep-0123456789ab") {
			t.Errorf("episode id %q: %v, want an invalid episode field naming the form", id, err)
		}
	}
	if _, err := m.StartOn(ctx, "nope", vm, "ep-000000000001", 0); !errors.Is(err, ErrUnknownPool) {
		t.Fatalf("unknown pool: %v", err)
	}
	if _, err := m.StartOn(ctx, "tiny", vm, "ep-000000000001", 48*time.Hour); !errors.Is(err, vmm.ErrInvalid) {
		t.Fatalf("ttl too long: %v", err)
	}

	ep, err := m.StartOn(ctx, "tiny", vm, "ep-000000000001", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ep.ID != "ep-000000000001" || ep.VM != vm || ep.Pool != "tiny" || !ep.Warm || !ep.CleanStart || ep.State != EpisodeActive ||
		ep.TTLSeconds != float64(DefaultTTL) {
		t.Fatalf("episode: %+v", ep)
	}
	if got, err := m.Get(ep.ID); err != nil || got.VM != vm {
		t.Fatalf("get: %+v %v", got, err)
	}
	if v, _ := f.Get(ctx, vm); v.Labels[LabelEpisode] != ep.ID {
		t.Fatalf("leased vm's labels: %v", v.Labels)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, StateFileName)); !strings.Contains(string(b), ep.ID) {
		t.Fatalf("state file lacks the episode: %s", b)
	}
	if pool, id, pooled := m.Owner(vm); pool != "tiny" || id != ep.ID || !pooled {
		t.Fatalf("owner: %q %q %v", pool, id, pooled)
	}

	notWarm := func(what, pool, vm, id string, want DesktopState) {
		t.Helper()
		_, err := m.StartOn(ctx, pool, vm, id, time.Minute)
		var nw *NotWarmError
		if !errors.Is(err, ErrNotWarm) || !errors.As(err, &nw) || nw.State != want || nw.VM != vm {
			t.Fatalf("%s: %v, want ErrNotWarm with state %q", what, err, want)
		}
		if want != "" && !strings.Contains(err.Error(), string(want)) {
			t.Fatalf("%s: %q does not say the vm's state", what, err)
		}
	}
	notWarm("a leased vm", "tiny", vm, "ep-000000000002", DesktopLeased)
	notWarm("a vm of another pool", "tiny", desktopsIn(m, DesktopFree, "other")[0], "ep-000000000002", "")
	notWarm("no such vm", "tiny", "vm99", "ep-000000000002", "")
	f.held.Store(true) // the touched VM stays resetting while the test looks
	m.Touch(tinyVMs[0])
	notWarm("a touched vm", "tiny", tinyVMs[0], "ep-000000000002", DesktopResetting)
	f.held.Store(false)
	close(f.release)

	// An id in use, live or ended, is refused.
	if _, err := m.StartOn(ctx, "tiny", tinyVMs[0], ep.ID, time.Minute); !errors.Is(err, vmm.ErrInvalid) || fielderr.Field(err) != "episode" {
		t.Fatalf("live id again: %v", err)
	}
	if _, err := m.End(ctx, ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the vm free again", func() bool { return slices.Contains(desktopsIn(m, DesktopFree, "tiny"), vm) })
	if _, err := m.StartOn(ctx, "tiny", vm, ep.ID, time.Minute); !errors.Is(err, vmm.ErrInvalid) || fielderr.Field(err) != "episode" {
		t.Fatalf("ended id again: %v", err)
	}
	ep2, err := m.StartOn(ctx, "tiny", vm, "ep-000000000003", time.Minute)
	if err != nil || ep2.VM != vm || ep2.TTLSeconds != 60 {
		t.Fatalf("lease again: %+v %v", ep2, err)
	}
}

// heldResets holds each Reset while held is set, until release is closed.
type heldResets struct {
	*vmmtest.Farm
	held    atomic.Bool
	release chan struct{}
}

func (f *heldResets) Reset(ctx context.Context, id string) (vmm.ResetResult, error) {
	if f.held.Load() {
		select {
		case <-f.release:
		case <-ctx.Done():
			return vmm.ResetResult{}, ctx.Err()
		}
	}
	return f.Farm.Reset(ctx, id)
}

// desktopsIn returns the VMs of Desktops in state, of the pools named
// (all when none is).
func desktopsIn(m *Manager, state DesktopState, pools ...string) []string {
	var out []string
	for _, d := range m.Desktops() {
		if d.State == state && (len(pools) == 0 || slices.Contains(pools, d.Pool)) {
			out = append(out, d.VM)
		}
	}
	return out
}
