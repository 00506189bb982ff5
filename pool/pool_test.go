package pool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

func TestParseConfig(t *testing.T) {
	c, err := ParseConfig([]byte(`
host_reserve_mib: 1024
pools:
  - name: tiny
    image: tiny
    memory_mib: 256
    vcpus: 1
    min_warm: 2
    max: 3
    screenshot_size: 1024x768
  - name: desktop
    image: desktop
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Pools) != 2 || c.HostReserveMiB != 1024 || c.MaxBoots != 1 {
		t.Fatalf("config: %+v", c)
	}
	d := c.Pools[1]
	if d.MemoryMiB != vmm.DefaultMemoryMiB || d.Max != 1 || d.ScreenshotSize != "auto" || d.Width != 1280 || d.DefaultTTL != DefaultTTL {
		t.Fatalf("defaults not applied: %+v", d)
	}
	for name, in := range map[string]string{
		"unknown key":    "pools: [{name: a, image: tiny, bogus: 1}]",
		"no pools":       "pools: []",
		"dup name":       "pools: [{name: a, image: tiny}, {name: a, image: tiny}]",
		"bad name":       "pools: [{name: A b, image: tiny}]",
		"no image":       "pools: [{name: a}]",
		"max < min_warm": "pools: [{name: a, image: tiny, min_warm: 3, max: 2}]",
		"memory":         "pools: [{name: a, image: tiny, memory_mib: 64}]",
		"width":          "pools: [{name: a, image: tiny, width: 1366, height: 768}]",
		"size":           "pools: [{name: a, image: tiny, screenshot_size: huge}]",
		"ttl":            "pools: [{name: a, image: tiny, default_ttl_s: 100, max_ttl_s: 10}]",
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
	for _, bad := range []string{"desktop", "nopool.max=1", "desktop.nofield=1", "desktop.max=x"} {
		if err := c.Override(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("override %q: %v", bad, err)
		}
	}
}

func testConfig(minWarm, max int) Config {
	c := Config{HostMemoryMiB: 100000, Pools: []PoolConfig{{Name: "tiny", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: minWarm, Max: max}}}
	c.SetDefaults()
	return c
}

func newTestManager(t *testing.T, f *vmmtest.Farm, cfg Config, dir string) *Manager {
	t.Helper()
	m, err := New(context.Background(), f, cfg, Options{StateDir: dir, ReapInterval: 10 * time.Millisecond,
		ReconcileInterval: 50 * time.Millisecond})
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

func TestHostFull(t *testing.T) {
	f := vmmtest.New()
	cfg := testConfig(0, 5)
	cfg.HostMemoryMiB, cfg.HostReserveMiB = 1024, 400 // room for two 256 MiB VMs
	m := newTestManager(t, f, cfg, t.TempDir())
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if ep, err := m.Start(ctx, "tiny", time.Minute); err != nil || ep.Warm {
			t.Fatalf("cold start %d: %+v %v", i, ep, err)
		}
	}
	_, err := m.Start(ctx, "tiny", time.Minute)
	if !errors.Is(err, ErrHostFull) || !errors.Is(err, vmm.ErrInsufficientResources) {
		t.Fatalf("third start: %v, want ErrHostFull", err)
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
	if p := m2.Pools()[0]; p.Leased != 1 || p.Warm != 1 || f.Count() != 2 {
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
