package vmm

import (
	"context"
	"errors"
	"os"
	"sync"
	"testing"
)

// standbyOf returns the standby for VMs like opts and whether it is ready.
func standbyOf(m *Manager, opts CreateOptions) (*standby, bool) {
	opts, _ = opts.Normalize()
	img, _ := m.cfg.Images.Resolve(opts.Image)
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.standbys[m.templatePath(img, opts)]
	return sb, sb != nil && sb.ready
}

func awaitStandbyReady(t *testing.T, m *Manager, opts CreateOptions) *standby {
	t.Helper()
	var sb *standby
	waitFor(t, func() bool {
		var ok bool
		sb, ok = standbyOf(m, opts)
		return ok
	})
	return sb
}

var savedOpts = CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1}

// The standby's states on the fake hypervisor: claimed by the next create,
// replaced by a new one, dropped when its claim fails (the create then
// starts QEMU itself and succeeds), and never claimed once its saved state
// was made again.
func TestStandbyLifecycle(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, func(c *Config) { c.Standby = true })
	ctx := context.Background()
	first, err := f.m.Create(ctx, tinyOpts) // boots: no standby (Boot)
	if err != nil {
		t.Fatal(err)
	}
	if sb, _ := standbyOf(f.m, tinyOpts); sb != nil {
		t.Fatal("a standby for a create that asked to boot")
	}
	a, err := f.m.Create(ctx, savedOpts)
	if err != nil {
		t.Fatal(err)
	}
	sb := awaitStandbyReady(t, f.m, savedOpts)
	if vms, _ := f.m.List(ctx); len(vms) != 2 {
		t.Fatalf("List shows %d vms, want 2: a standby is not listed", len(vms))
	}
	if used, _ := f.m.Capacity(); used != 512 {
		t.Fatalf("Capacity counts %d MiB, want 512: a standby is not a VM", used)
	}
	b, err := f.m.Create(ctx, savedOpts)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != sb.mc.spec.ID {
		t.Fatalf("create made %s, not the standby %s", b.ID, sb.mc.spec.ID)
	}

	// A claim whose cont fails: the standby is removed and the create
	// starts its own QEMU.
	sb = awaitStandbyReady(t, f.m, savedOpts)
	hv.mu.Lock()
	hv.failOnce = map[string]error{"hmp:cont": errors.New("injected: cont failed")}
	hv.mu.Unlock()
	c, err := f.m.Create(ctx, savedOpts)
	if err != nil {
		t.Fatalf("create after a failed claim: %v (it must start its own QEMU)", err)
	}
	if c.ID == sb.mc.spec.ID {
		t.Fatal("a standby whose claim failed was handed out")
	}
	if _, err := os.Stat(sb.mc.spec.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed standby's directory: %v", err)
	}

	// A saved state made again: the standby of the old one is dropped.
	sb = awaitStandbyReady(t, f.m, savedOpts)
	tmpl := sb.tmpl
	data, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(tmpl)
	if err := os.WriteFile(tmpl, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := f.m.Create(ctx, savedOpts)
	if err != nil {
		t.Fatal(err)
	}
	if d.ID == sb.mc.spec.ID {
		t.Fatal("the standby of a saved state made again was handed out")
	}

	// Concurrent creates: one takes the standby, the rest start QEMU.
	awaitStandbyReady(t, f.m, savedOpts)
	var wg sync.WaitGroup
	ids := make(chan string, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			vm, err := f.m.Create(ctx, savedOpts)
			if err != nil {
				t.Error(err)
				return
			}
			ids <- vm.ID
		}()
	}
	wg.Wait()
	close(ids)
	vms, _ := f.m.List(ctx)
	for _, v := range vms {
		if err := f.m.Destroy(ctx, v.ID); err != nil {
			t.Fatal(err)
		}
	}
	_ = first
	_ = a
	f.m.closeStandbys()
	f.assertEmpty(t)
}
