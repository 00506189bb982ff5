package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/prometheus/client_golang/prometheus"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
pools:
  - name: tiny
    image: tiny
    memory_mib: 256
    vcpus: 1
    min_warm: 2
    max: 3
    screenshot_size: 1024x768
    record: true
    record_options: {a11y: true, keep_files: true}
  - name: desktop
    image: desktop
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) != 2 || c.MaxBoots != 1 {
		t.Fatalf("config: %+v", c)
	}
	if p := c.Pools[0]; !p.Record || p.RecordOptions != (RecordOptions{A11y: true, KeepFiles: true}) {
		t.Fatalf("record: %v %+v", p.Record, p.RecordOptions)
	}
	d := c.Pools[1]
	if d.Record {
		t.Fatalf("record by default")
	}
	if d.MemoryMiB != vmm.DefaultMemoryMiB || d.Max != 1 || d.ScreenshotSize != "auto" || d.Width != 1280 || d.DefaultTTL != DefaultTTL {
		t.Fatalf("defaults not applied: %+v", d)
	}
	for name, in := range map[string]string{
		"unknown key":    "pools: [{name: a, image: tiny, bogus: 1}]",
		"host memory":    "host_reserve_mib: 1024\npools: [{name: a, image: tiny}]", // vmm owns admission
		"no pools":       "pools: []",
		"dup name":       "pools: [{name: a, image: tiny}, {name: a, image: tiny}]",
		"bad name":       "pools: [{name: A b, image: tiny}]",
		"no image":       "pools: [{name: a}]",
		"max < min_warm": "pools: [{name: a, image: tiny, min_warm: 3, max: 2}]",
		"memory":         "pools: [{name: a, image: tiny, memory_mib: 64}]",
		"width":          "pools: [{name: a, image: tiny, width: 1366, height: 768}]",
		"height":         "pools: [{name: a, image: tiny, width: 1024, height: 4000}]",
		"network":        "pools: [{name: a, image: tiny, network: bridge}]",
		"forward":        "pools: [{name: a, image: tiny, forwards: [0]}]",
		"size":           "pools: [{name: a, image: tiny, screenshot_size: huge}]",
		"ttl":            "pools: [{name: a, image: tiny, default_ttl_s: 100, max_ttl_s: 10}]",
		"record option":  "pools: [{name: a, image: tiny, record_options: {video: false}}]",
	} {
		if _, err := ParseConfig([]byte(in)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestDefaultConfigAndOverride(t *testing.T) {
	c := DefaultConfig("", 1)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := c.Pools[0]; p.Name != "desktop" || p.Image != "desktop" || p.MinWarm != 1 {
		t.Fatalf("default: %+v", p)
	}
	// OSWorld's pool: none warm, its VMs made with Chrome's and VLC's ports
	// forwarded (host ports picked by vmm), and matched by them.
	osw := c.Pools[1]
	if osw.Name != "osworld" || osw.MinWarm != 0 || osw.Width != 1920 || osw.Height != 1080 {
		t.Fatalf("osworld pool: %+v", osw)
	}
	o := osw.createOptions()
	if len(o.Forwards) != 2 || o.Forwards[0] != (vmm.Forward{GuestPort: 9222}) || o.Forwards[1] != (vmm.Forward{GuestPort: 8080}) {
		t.Fatalf("osworld create options: %+v", o)
	}
	vm := vmm.VM{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Width: 1920, Height: 1080, Network: vmm.NetworkNone,
		Forwards: []vmm.Forward{{GuestPort: 9222, HostPort: 40001}, {GuestPort: 8080, HostPort: 40002}}}
	if !osw.matches(vm) {
		t.Fatal("osworld vm does not match its pool")
	}
	vm.Forwards = nil
	if osw.matches(vm) {
		t.Fatal("a vm without the forwards matches the osworld pool")
	}
	if err := c.Override("desktop.min_warm=2"); err != nil {
		t.Fatal(err)
	}
	if err := c.Override("desktop.max=3"); err != nil {
		t.Fatal(err)
	}
	if c.Pools[0].MinWarm != 2 || c.Validate() != nil {
		t.Fatalf("override: %+v %v", c.Pools[0], c.Validate())
	}
	// The README's one line for giving a pool's VMs a network.
	if err := c.Override("desktop.network=user"); err != nil {
		t.Fatal(err)
	}
	if o := c.Pools[0].createOptions(); o.Network != vmm.NetworkUser || c.Validate() != nil {
		t.Fatalf("override network: %+v %v", o, c.Validate())
	}
	if err := c.Override("desktop.network=bridge"); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("network bridge validated: %v", err)
	}
	c.Pools[0].Network = ""
	for _, o := range []string{"desktop.record=true", "desktop.record_options.no_video=1"} {
		if err := c.Override(o); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Pools[0].Record || !c.Pools[0].RecordOptions.NoVideo {
		t.Fatalf("override record: %+v", c.Pools[0])
	}
	for _, bad := range []string{"desktop", "nopool.max=1", "desktop.nofield=1", "desktop.max=x", "desktop.record=maybe"} {
		if err := c.Override(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("override %q: %v", bad, err)
		}
	}
}

func testConfig(minWarm, max int) Config {
	c := Config{Pools: []PoolConfig{{Name: "tiny", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: minWarm, Max: max}}}
	c.SetDefaults()
	return c
}

func newTestManager(t *testing.T, f VMs, cfg Config, dir string) *Manager {
	t.Helper()
	m, err := New(context.Background(), f, cfg, Options{StateDir: dir, ReapInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func warm(m *Manager) int { return m.Pools()[0].Warm }

func TestLeaseLifecycle(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 2), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	ctx := context.Background()

	ep, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil || !ep.Warm || ep.State != EpisodeActive {
		t.Fatalf("start: %+v %v", ep, err)
	}
	if _, err := m.Start(ctx, "nope", 0); !errors.Is(err, ErrUnknownPool) {
		t.Fatalf("unknown pool: %v", err)
	}
	if _, err := m.Start(ctx, "tiny", 48*time.Hour); !errors.Is(err, vmm.ErrInvalid) {
		t.Fatalf("ttl too long: %v", err)
	}
	// The refill boots a second warm VM (max 2): a second start is warm too
	// once it is there; a third finds the pool full.
	waitFor(t, "refill", func() bool { return warm(m) == 1 })
	ep2, err := m.Start(ctx, "tiny", time.Minute)
	if err != nil || ep2.VM == ep.VM {
		t.Fatalf("second start: %+v %v", ep2, err)
	}
	if _, err := m.Start(ctx, "tiny", time.Minute); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("third start: %v, want ErrPoolFull", err)
	}

	vm, _, release, err := m.Acquire(ctx, ep.ID)
	if err != nil || vm != ep.VM {
		t.Fatalf("acquire: %s %v", vm, err)
	}
	ended := make(chan Episode)
	go func() { e, _ := m.End(ctx, ep.ID, ReasonDeleted); ended <- e }()
	select {
	case <-ended:
		t.Fatal("end did not wait for the call in flight")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	e := <-ended
	if e.State != EpisodeEnded || e.EndReason != ReasonDeleted || e.VMReplaced {
		t.Fatalf("ended: %+v", e)
	}
	if _, _, _, err := m.Acquire(ctx, ep.ID); !errors.Is(err, ErrEpisodeEnded) {
		t.Fatalf("acquire after end: %v", err)
	}
	if _, err := m.End(ctx, ep.ID, ReasonDeleted); !errors.Is(err, ErrEpisodeEnded) {
		t.Fatalf("second end: %v", err)
	}
	if _, _, _, err := m.Acquire(ctx, "ep-none"); !errors.Is(err, ErrEpisodeNotFound) {
		t.Fatalf("acquire unknown: %v", err)
	}
	if warm(m) != 1 {
		t.Fatalf("vm not back in the pool: %+v", m.Pools())
	}

	// A failed reset destroys the VM; the pool replaces it.
	f.Lock()
	f.FailReset[ep2.VM] = fmt.Errorf("loadvm: %w", vmm.ErrDead)
	f.Unlock()
	e2, err := m.End(ctx, ep2.ID, ReasonDeleted)
	if err != nil || !e2.VMReplaced || e2.EndReason != ReasonVMDied {
		t.Fatalf("end with failed reset: %+v %v", e2, err)
	}
	if _, err := f.Get(ctx, ep2.VM); !errors.Is(err, vmm.ErrNotFound) {
		t.Fatal("vm that failed its reset was not destroyed")
	}
}

func TestExpiry(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	ep, err := m.Start(context.Background(), "tiny", 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "expiry", func() bool { e, _ := m.Get(ep.ID); return e.State == EpisodeEnded })
	if e, _ := m.Get(ep.ID); e.EndReason != ReasonExpired {
		t.Fatalf("reason %q", e.EndReason)
	}
	waitFor(t, "vm back", func() bool { return warm(m) == 1 })
}

func TestConcurrentLeasesNeverShareAVM(t *testing.T) {
	f := vmmtest.New()
	f.BootTime = 2 * time.Millisecond
	cfg := testConfig(3, 6)
	cfg.MaxBoots = 2
	m := newTestManager(t, f, cfg, t.TempDir())
	ctx := context.Background()
	var (
		mu    sync.Mutex
		owner = map[string]string{} // vm -> episode
		wg    sync.WaitGroup
		full  int
	)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				ep, err := m.Start(ctx, "tiny", time.Minute)
				if errors.Is(err, ErrPoolFull) {
					mu.Lock()
					full++
					mu.Unlock()
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if o, ok := owner[ep.VM]; ok {
					t.Errorf("vm %s leased to %s and %s", ep.VM, o, ep.ID)
				}
				owner[ep.VM] = ep.ID
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				delete(owner, ep.VM)
				mu.Unlock()
				if _, err := m.End(ctx, ep.ID, ReasonDeleted); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := f.Count(); n > 6 {
		t.Fatalf("%d vms, max 6", n)
	}
	t.Logf("%d starts refused with pool_full; %d resets", full, f.Resets)
}

// TestHostFull: vmm refuses a boot for lack of memory; a start gets
// ErrHostFull naming the field, and the refill backs off and says why in
// PoolStatus.
func TestHostFull(t *testing.T) {
	f := vmmtest.New()
	var mu sync.Mutex
	room := 2
	f.CreateHook = func(context.Context, vmm.CreateOptions) error {
		mu.Lock()
		defer mu.Unlock()
		if room == 0 {
			return fielderr.Newf("memory_mib", vmm.ErrInsufficientResources, "256 MiB requested but only 100 MiB available on the host")
		}
		room--
		return nil
	}
	m := newTestManager(t, f, testConfig(0, 5), t.TempDir())
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if ep, err := m.Start(ctx, "tiny", time.Minute); err != nil || ep.Warm {
			t.Fatalf("cold start %d: %+v %v", i, ep, err)
		}
	}
	_, err := m.Start(ctx, "tiny", time.Minute)
	if !errors.Is(err, ErrHostFull) || !errors.Is(err, vmm.ErrInsufficientResources) || fielderr.Field(err) != "memory_mib" {
		t.Fatalf("third start: %v, want ErrHostFull on memory_mib", err)
	}

	// A background boot refused the same way is visible and retried later.
	f2 := vmmtest.New()
	f2.CreateHook = f.CreateHook
	m2, err := New(ctx, f2, testConfig(1, 2), Options{StateDir: t.TempDir(), BootRetry: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	waitFor(t, "last_error", func() bool { return m2.Pools()[0].LastError != "" })
	p := m2.Pools()[0]
	if !strings.Contains(p.LastError, "memory_mib") || p.RetryAt == nil || time.Until(*p.RetryAt) < 50*time.Minute || p.Warm != 0 || p.Booting != 0 {
		t.Fatalf("pool after a refused boot: %+v", p)
	}
}

func TestRestartRecoversLeases(t *testing.T) {
	f := vmmtest.New()
	dir := t.TempDir()
	cfg := testConfig(1, 3)
	m1, err := New(context.Background(), f, cfg, Options{StateDir: dir, ReapInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "warm", func() bool { return warm(m1) == 1 })
	ep, err := m1.Start(context.Background(), "tiny", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refill", func() bool { return warm(m1) == 1 })
	// As after kill -9: no End, the state file is what is left. (Close only
	// stops the loops; it writes nothing.)
	m1.Close()
	b, _ := os.ReadFile(filepath.Join(dir, StateFileName))
	if !strings.Contains(string(b), ep.ID) {
		t.Fatalf("state file lacks the lease: %s", b)
	}
	// A VM destroyed while deskfarm was down: its pool member is dropped.
	m2 := newTestManager(t, f, cfg, dir)
	got, err := m2.Get(ep.ID)
	if err != nil || got.VM != ep.VM || got.State != EpisodeActive {
		t.Fatalf("recovered: %+v %v", got, err)
	}
	if l := m2.List(); len(l) != 1 {
		t.Fatalf("episodes after restart: %+v", l)
	}
	// The warm VM comes back dirty, and the refill may be resetting it
	// already: it is warm again once clean.
	waitFor(t, "the recovered warm vm clean", func() bool { p := m2.Pools()[0]; return p.Leased == 1 && p.Warm == 1 })
	if p := m2.Pools()[0]; len(p.VMs) != 2 || f.Count() != 2 {
		t.Fatalf("pool after restart: %+v, %d vms", p, f.Count())
	}
	if _, err := m2.End(context.Background(), ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
}

func TestVanishedVMEndsEpisode(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 2), t.TempDir())
	waitFor(t, "warm", func() bool { return warm(m) == 1 })
	ep, _ := m.Start(context.Background(), "tiny", time.Hour)
	f.Destroy(context.Background(), ep.VM)
	waitFor(t, "episode ended", func() bool { e, _ := m.Get(ep.ID); return e.State == EpisodeEnded })
	if e, _ := m.Get(ep.ID); e.EndReason != ReasonVMGone {
		t.Fatalf("reason %q", e.EndReason)
	}
}

// recFarm records the calls that change a VM, in order.
type recFarm struct {
	*vmmtest.Farm
	mu    sync.Mutex
	calls []string
}

func (r *recFarm) rec(s string) {
	r.mu.Lock()
	r.calls = append(r.calls, s)
	r.mu.Unlock()
}

func (r *recFarm) Reset(ctx context.Context, id string) (vmm.ResetResult, error) {
	res, err := r.Farm.Reset(ctx, id)
	if err == nil {
		r.rec("reset " + id)
	}
	return res, err
}

func (r *recFarm) SetLabel(ctx context.Context, id, key, value string) error {
	r.rec(fmt.Sprintf("label %s %s=%s", id, key, value))
	return r.Farm.SetLabel(ctx, id, key, value)
}

// callsOn returns the recorded calls on vm.
func (r *recFarm) callsOn(vm string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if strings.Fields(c)[1] == vm {
			out = append(out, c)
		}
	}
	return out
}

// poolVMs returns the ids of pool's VMs in state.
func poolVMs(m *Manager, state string) []string {
	var out []string
	for _, v := range m.Pools()[0].VMs {
		if v.State == state {
			out = append(out, v.VM)
		}
	}
	return out
}

func listed(m *Manager, vm string) bool {
	for _, v := range m.Pools()[0].VMs {
		if v.VM == vm {
			return true
		}
	}
	return false
}

// TestKilledWarmVMLeavesPool: a warm VM whose QEMU dies leaves the pool as
// soon as vmm says so, is destroyed and replaced, and is never leased.
func TestKilledWarmVMLeavesPool(t *testing.T) {
	f := &recFarm{Farm: vmmtest.New()}
	m := newTestManager(t, f, testConfig(1, 2), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	dead := poolVMs(m, "warm")[0]

	f.Kill(dead, "crashed")
	deadline := time.Now().Add(2 * time.Second)
	for listed(m, dead) {
		if time.Now().After(deadline) {
			t.Fatalf("killed vm %s still in the pool after 2 s: %+v", dead, m.Pools())
		}
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "a replacement", func() bool { return warm(m) == 1 })
	waitFor(t, "killed vm destroyed", func() bool { _, err := f.Get(context.Background(), dead); return errors.Is(err, vmm.ErrNotFound) })
	ep, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil || ep.VM == dead {
		t.Fatalf("start after the kill: %+v %v", ep, err)
	}
	// No lease was ever attempted on the dead VM: it never got an episode
	// label, and no reset.
	if calls := f.callsOn(dead); len(calls) != 0 {
		t.Fatalf("calls on the killed warm vm: %q", calls)
	}
}

// TestLeasedVMDiedEndsEpisode: a leased VM that dies ends its episode
// (vm_died), later calls on it get ErrEpisodeEnded, and the pool refills.
func TestLeasedVMDiedEndsEpisode(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 2), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	ep, err := m.Start(context.Background(), "tiny", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, callCtx, release, err := m.Acquire(context.Background(), ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	f.Kill(ep.VM, "crashed")
	waitFor(t, "episode ended", func() bool { e, _ := m.Get(ep.ID); return e.State == EpisodeEnded })
	e, _ := m.Get(ep.ID)
	if e.EndReason != ReasonVMDied || !e.VMReplaced {
		t.Fatalf("ended: %+v", e)
	}
	select {
	case <-callCtx.Done():
	case <-time.After(time.Second):
		t.Fatal("the call in flight on the dead vm was not canceled")
	}
	if _, _, _, err := m.Acquire(context.Background(), ep.ID); !errors.Is(err, ErrEpisodeEnded) {
		t.Fatalf("acquire after death: %v", err)
	}
	waitFor(t, "dead vm destroyed", func() bool { _, err := f.Get(context.Background(), ep.VM); return errors.Is(err, vmm.ErrNotFound) })
	waitFor(t, "refill", func() bool { return warm(m) == 1 && !listed(m, ep.VM) })
}

// TestRecoveryFromLabels: after a restart, ownership comes from the VMs'
// labels: the lease comes back, a VM booted for the pool but never
// recorded is the pool's, a VM with a stale episode label is reset and
// unlabelled before any lease, and a VM without labels stays out.
func TestRecoveryFromLabels(t *testing.T) {
	f := vmmtest.New()
	dir := t.TempDir()
	cfg := testConfig(1, 4)
	ctx := context.Background()
	m1, err := New(ctx, f, cfg, Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "warm", func() bool { return warm(m1) == 1 })
	ep, err := m1.Start(ctx, "tiny", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refill", func() bool { return warm(m1) == 1 })
	m1.Close() // as after kill -9: Close writes nothing

	opts := cfg.Pools[0].createOptions()
	opts.Labels = map[string]string{LabelPool: "tiny"}
	orphan, _ := f.Create(ctx, opts) // booted, then deskfarm died before recording it
	opts.Labels = map[string]string{LabelPool: "tiny", LabelEpisode: "ep-neverrecorded"}
	stale, _ := f.Create(ctx, opts) // labelled, then deskfarm died before recording the lease
	plain, _ := f.Create(ctx, vmm.CreateOptions{Image: "tiny"})
	resets := f.Resets

	m2 := newTestManager(t, f, cfg, dir)
	got, err := m2.Get(ep.ID)
	if err != nil || got.VM != ep.VM || got.State != EpisodeActive {
		t.Fatalf("recovered lease: %+v %v", got, err)
	}
	if pool, epID, pooled := m2.Owner(ep.VM); pool != "tiny" || epID != ep.ID || !pooled {
		t.Fatalf("owner of leased vm: %q %q %v", pool, epID, pooled)
	}
	for _, vm := range []string{orphan.ID, stale.ID} {
		if pool, epID, pooled := m2.Owner(vm); pool != "tiny" || epID != "" || !pooled {
			t.Fatalf("owner of %s: %q %q %v", vm, pool, epID, pooled)
		}
	}
	if _, _, pooled := m2.Owner(plain.ID); pooled {
		t.Fatal("a vm without a pool label was taken into the pool")
	}
	// Warm VMs come back dirty (unknown history) and are reset; the stale
	// episode label goes.
	waitFor(t, "recovered warm vms cleaned", func() bool {
		p := m2.Pools()[0]
		for _, v := range p.VMs {
			if v.Dirty && v.State == "warm" {
				return false
			}
		}
		return p.Warm == 3 && p.Leased == 1
	})
	if f.Resets < resets+3 {
		t.Fatalf("%d resets after restart, want the 3 warm vms reset", f.Resets-resets)
	}
	if v, _ := f.Get(ctx, stale.ID); v.Labels[LabelEpisode] != "" {
		t.Fatalf("stale episode label kept: %v", v.Labels)
	}
	if e, err := m2.End(ctx, ep.ID, ReasonDeleted); err != nil || e.EndReason != ReasonDeleted || e.VMReplaced {
		t.Fatalf("end recovered lease: %+v %v", e, err)
	}
	if v, _ := f.Get(ctx, ep.VM); v.Labels[LabelEpisode] != "" || v.Labels[LabelPool] != "tiny" {
		t.Fatalf("labels after end: %v", v.Labels)
	}
}

// TestDirtyVMResetBeforeLease: a warm VM touched while unleased is reset
// before the next episode gets it, and the episode says so.
func TestDirtyVMResetBeforeLease(t *testing.T) {
	f := &recFarm{Farm: vmmtest.New()}
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	vm := poolVMs(m, "warm")[0]
	m.Touch(vm)
	ep, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ep.VM != vm || !ep.CleanStart || ep.ResetBeforeLeaseMS < 1 {
		t.Fatalf("episode: %+v", ep)
	}
	calls := f.callsOn(vm)
	want := []string{"label " + vm + " episode=", "reset " + vm, "label " + vm + " episode=" + ep.ID}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls on the vm: %q, want %q (reset before the lease)", calls, want)
	}

	// A touch during the episode is undone by the end's reset; the next
	// lease needs no extra reset.
	m.Touch(vm)
	if _, err := m.End(context.Background(), ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	ep2, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil || ep2.VM != vm || !ep2.CleanStart || ep2.ResetBeforeLeaseMS != 0 {
		t.Fatalf("second episode: %+v %v", ep2, err)
	}
}

// TestUnleasedMutationRefused: a pool VM no episode leases answers
// ErrNotLeased; a leased one and a plain VM do not.
func TestUnleasedMutationRefused(t *testing.T) {
	f := vmmtest.New()
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	waitFor(t, "one warm vm", func() bool { return warm(m) == 1 })
	vm := poolVMs(m, "warm")[0]
	if err := m.RequireLease(vm); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("warm vm: %v, want ErrNotLeased", err)
	}
	plain, _ := f.Create(context.Background(), vmm.CreateOptions{Image: "tiny"})
	if err := m.RequireLease(plain.ID); err != nil {
		t.Fatalf("plain vm: %v", err)
	}
	ep, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RequireLease(vm); err != nil {
		t.Fatalf("leased vm: %v", err)
	}
	if _, err := m.End(context.Background(), ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	if _, epID, pooled := m.Owner(vm); !pooled || epID != "" || !errors.Is(m.RequireLease(vm), ErrNotLeased) {
		t.Fatalf("after end: owner %q pooled %v", epID, pooled)
	}
}

// TestNoGoroutineLeak: Close stops every goroutine the Manager started,
// with boots, leases and ends behind it.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	f := vmmtest.New()
	f.BootTime = time.Millisecond
	m, err := New(context.Background(), f, testConfig(2, 3), Options{StateDir: t.TempDir(), ReapInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "warm", func() bool { return warm(m) == 2 })
	ep, _ := m.Start(context.Background(), "tiny", 5*time.Millisecond) // the reaper ends it
	waitFor(t, "expiry", func() bool { e, _ := m.Get(ep.ID); return e.State == EpisodeEnded })
	ep2, _ := m.Start(context.Background(), "tiny", time.Hour)
	f.Kill(ep2.VM, "crashed")
	waitFor(t, "death seen", func() bool { e, _ := m.Get(ep2.ID); return e.State == EpisodeEnded })
	m.Close()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStateWritesOrdered: a snapshot older than the one on disk is not
// written, so writes outside the lock never go back in time.
func TestStateWritesOrdered(t *testing.T) {
	s := &stateFile{path: filepath.Join(t.TempDir(), StateFileName)}
	newer := snapshot{seq: 2, st: persisted{Version: stateVersion, Episodes: []Episode{{ID: "ep-new"}}}}
	older := snapshot{seq: 1, st: persisted{Version: stateVersion, Episodes: []Episode{{ID: "ep-old"}}}}
	if err := s.write(newer); err != nil {
		t.Fatal(err)
	}
	if err := s.write(older); err != nil {
		t.Fatal(err)
	}
	st, err := s.load()
	if err != nil || len(st.Episodes) != 1 || st.Episodes[0].ID != "ep-new" {
		t.Fatalf("state on disk: %+v %v", st, err)
	}
	if fi, _ := os.Stat(s.path); fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("state file mode %v: readable beyond its owner", fi.Mode())
	}
}

// TestStartWaitsForBootInFlight: a start on a full pool whose warm VM is
// still booting waits for it (and gets it), rather than being refused; a
// start that gives up while waiting leaves no lease behind.
func TestStartWaitsForBootInFlight(t *testing.T) {
	f := vmmtest.New()
	f.BootTime = 200 * time.Millisecond
	m := newTestManager(t, f, testConfig(1, 1), t.TempDir())
	waitFor(t, "a boot in flight", func() bool { return m.Pools()[0].Booting == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := m.Start(ctx, "tiny", time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start that gives up: %v", err)
	}
	ep, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil || !ep.Warm {
		t.Fatalf("start during the boot: %+v %v", ep, err)
	}
	if l := m.List(); len(l) != 1 || l[0].ID != ep.ID || f.Count() != 1 {
		t.Fatalf("episodes %+v, %d vms", l, f.Count())
	}
	if _, err := m.Start(context.Background(), "tiny", time.Minute); !errors.Is(err, ErrPoolFull) {
		t.Fatalf("start on a full pool with nothing coming: %v", err)
	}
}

// TestConfigChangeEvicts: after a restart with a smaller max or another VM
// size, warm VMs that no longer fit are destroyed (and replaced to spec).
func TestConfigChangeEvicts(t *testing.T) {
	f := vmmtest.New()
	dir := t.TempDir()
	m1, err := New(context.Background(), f, testConfig(2, 2), Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two warm", func() bool { return warm(m1) == 2 })
	m1.Close()

	m2 := newTestManager(t, f, testConfig(1, 1), dir)
	waitFor(t, "one evicted", func() bool { p := m2.Pools()[0]; return len(p.VMs) == 1 && p.Warm == 1 && f.Count() == 1 })
	m2.Close()

	cfg := testConfig(1, 1)
	cfg.Pools[0].MemoryMiB = 512
	m3 := newTestManager(t, f, cfg, dir)
	waitFor(t, "replaced to spec", func() bool {
		vms, _ := f.List(context.Background())
		return len(vms) == 1 && vms[0].MemoryMiB == 512 && warm(m3) == 1
	})
}

// TestDiedWhileBooting: a VM whose death is announced before its Create
// returns is never warm: it is destroyed and replaced.
func TestDiedWhileBooting(t *testing.T) {
	f := &recFarm{Farm: vmmtest.New()}
	f.BootTime = 100 * time.Millisecond
	m := newTestManager(t, f, testConfig(1, 2), t.TempDir())
	waitFor(t, "a boot in flight", func() bool { return m.Pools()[0].Booting == 1 })
	vms, _ := f.List(context.Background())
	if len(vms) != 1 || vms[0].State != vmm.StateCreating {
		t.Fatalf("vms: %+v", vms)
	}
	f.Kill(vms[0].ID, "crashed while booting")
	waitFor(t, "killed boot destroyed", func() bool {
		_, err := f.Get(context.Background(), vms[0].ID)
		return errors.Is(err, vmm.ErrNotFound)
	})
	waitFor(t, "a replacement", func() bool { return warm(m) == 1 })
	if listed(m, vms[0].ID) || len(f.callsOn(vms[0].ID)) != 0 {
		t.Fatalf("killed boot used: %+v %q", m.Pools(), f.callsOn(vms[0].ID))
	}
}

// deafFarm hides vmm's events, as a lost libvirt connection would.
type deafFarm struct{ *vmmtest.Farm }

func (deafFarm) Subscribe(context.Context, string) <-chan vmm.Event { return nil }

// TestSafetyReconcile: with no events, the periodic reconcile still finds
// a dead warm VM and a VM destroyed behind the pool's back.
func TestSafetyReconcile(t *testing.T) {
	f := vmmtest.New()
	m, err := New(context.Background(), deafFarm{f}, testConfig(2, 2), Options{StateDir: t.TempDir(), ReconcileInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	waitFor(t, "two warm", func() bool { return warm(m) == 2 })
	vms := poolVMs(m, "warm")
	f.Kill(vms[0], "crashed")
	f.Destroy(context.Background(), vms[1])
	waitFor(t, "both replaced", func() bool {
		return warm(m) == 2 && !listed(m, vms[0]) && !listed(m, vms[1]) && f.Count() == 2
	})
}

// TestMetrics: the pool's series are registered and follow what happens.
func TestMetrics(t *testing.T) {
	f := vmmtest.New()
	reg := prometheus.NewRegistry()
	m, err := New(context.Background(), f, testConfig(1, 2), Options{StateDir: t.TempDir(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	waitFor(t, "warm", func() bool { return warm(m) == 1 })
	ep, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.End(context.Background(), ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range mt.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case mt.Counter != nil:
				got[key] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				got[key] = mt.Gauge.GetValue()
			case mt.Histogram != nil:
				got[key] = float64(mt.Histogram.GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{
		"deskfarm_episodes_started_total,pool=tiny,warm=true":    1,
		"deskfarm_episodes_ended_total,pool=tiny,reason=deleted": 1,
		"deskfarm_reset_duration_seconds,pool=tiny":              1,
		"deskfarm_pool_leases,pool=tiny":                         0,
		"deskfarm_pool_max,pool=tiny":                            2,
		"deskfarm_pool_min_warm,pool=tiny":                       1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if got["deskfarm_pool_vms,pool=tiny,state=warm"] < 1 {
		t.Errorf("no warm vms in the metrics: %v", got)
	}
}

// TestMigrateStateV1: a version 1 state file (membership and leases in the
// file, VMs without labels) is read once: the VMs get their labels and the
// lease comes back. The file is hand-made in version 1's layout (pool/state.go
// before labels), not captured.
func TestMigrateStateV1(t *testing.T) {
	f := vmmtest.New()
	ctx := context.Background()
	cfg := testConfig(1, 2)
	leased, _ := f.Create(ctx, cfg.Pools[0].createOptions())
	warmVM, _ := f.Create(ctx, cfg.Pools[0].createOptions())
	dir := t.TempDir()
	v1 := fmt.Sprintf(`{"version": 1,
  "members": {%q: {"pool": "tiny"}, %q: {"pool": "tiny"}},
  "episodes": [{"id": "ep-0123456789ab", "vm": %q, "pool": "tiny", "state": "active", "warm": true,
    "created_at": %q, "expires_at": %q, "ttl_s": 3600, "screenshot_size": "auto"}]}`,
		leased.ID, warmVM.ID, leased.ID, time.Now().UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if err := os.WriteFile(filepath.Join(dir, StateFileName), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, f, cfg, dir)
	if _, ep, pooled := m.Owner(leased.ID); ep != "ep-0123456789ab" || !pooled {
		t.Fatalf("leased vm after migration: %q %v", ep, pooled)
	}
	if v, _ := f.Get(ctx, leased.ID); v.Labels[LabelPool] != "tiny" || v.Labels[LabelEpisode] != "ep-0123456789ab" {
		t.Fatalf("leased vm labels: %v", v.Labels)
	}
	if v, _ := f.Get(ctx, warmVM.ID); v.Labels[LabelPool] != "tiny" {
		t.Fatalf("warm vm labels: %v", v.Labels)
	}
	waitFor(t, "warm vm back", func() bool {
		// One read: the pool may change between two.
		w := poolVMs(m, "warm")
		return warm(m) == 1 && len(w) == 1 && w[0] == warmVM.ID
	})
	b, _ := os.ReadFile(filepath.Join(dir, StateFileName))
	if !strings.Contains(string(b), `"version": 2`) || strings.Contains(string(b), `"members"`) {
		t.Fatalf("state file after migration: %s", b)
	}
}
