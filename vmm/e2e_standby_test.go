package vmm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// awaitStandby waits until the standby for VMs like opts is ready and
// returns its id.
func awaitStandby(t *testing.T, m *vmm.Manager, opts vmm.CreateOptions) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if id, ready := vmm.StandbyForTest(m, opts); ready {
			return id
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no standby ready within 2 minutes")
	return ""
}

// standbyOpts are the tiny VMs these tests make.
var standbyOpts = vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1}

// withStandby returns a Manager with standbys on (and cfg's other
// settings) and its first VM, made from saved state or booted.
func withStandby(t *testing.T, cfg vmm.Config) (*vmm.Manager, vmm.VM) {
	t.Helper()
	cfg.Standby = true
	m := testenv.ManagerConfig(t, cfg, "tiny")
	a, err := m.Create(context.Background(), standbyOpts)
	if err != nil {
		t.Fatal(err)
	}
	return m, a
}

// With Config.Standby, a create from saved state takes the VM made ahead:
// it is the create's own VM (labels, clock, a clean disk, agent calls
// answered), and Close leaves no standby behind.
func TestE2EStandby(t *testing.T) {
	m, a := withStandby(t, vmm.Config{})
	ctx := context.Background()
	opts := standbyOpts
	if err := m.WriteFile(ctx, a.ID, "/tmp/from-a", []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	sb := awaitStandby(t, m, opts)
	if vms, _ := m.List(ctx); len(vms) != 1 {
		t.Fatalf("List shows %d VMs with a standby made, want 1 (a standby is nobody's VM)", len(vms))
	}
	// The standby sat paused: the clock the claim sets must be now's.
	time.Sleep(5 * time.Second)

	opts.Labels = map[string]string{"pool": "standby-test"}
	t0 := time.Now()
	b, err := m.Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create from the standby: %v (vm %s)", time.Since(t0).Round(time.Millisecond), b.ID)
	if b.ID != sb {
		t.Fatalf("create made vm %s, not the standby %s", b.ID, sb)
	}
	if b.State != vmm.StateReady || b.Start != vmm.StartSavedState || b.Labels["pool"] != "standby-test" {
		t.Fatalf("vm from the standby: state %s, start %s, labels %v", b.State, b.Start, b.Labels)
	}
	got, err := m.Get(ctx, b.ID)
	if err != nil || got.Labels["pool"] != "standby-test" {
		t.Fatalf("Get of the vm from the standby: %+v, %v", got, err)
	}
	res := mustExec(t, m, b.ID, "date", "+%s")
	var guest int64
	fmt.Sscan(strings.TrimSpace(string(res.Stdout)), &guest)
	if skew := time.Now().Unix() - guest; skew > 3 || skew < -3 {
		t.Fatalf("guest clock of the vm from the standby off by %d s", skew)
	}
	if _, err := m.ReadFile(ctx, b.ID, "/tmp/from-a"); err == nil {
		t.Fatal("a file written in the first vm appears in the vm from the standby")
	}
	if _, err := m.Screenshot(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reset(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, b.ID, "true")

	// The next standby is made; Close removes it with the VMs destroyed.
	next := awaitStandby(t, m, standbyOpts)
	if next == sb {
		t.Fatal("the claimed standby is still the standby")
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	assertNoLeftovers(t)
}

// A standby never refuses a VM: a create that fits only without it gets
// its memory, and a refusal counts no standby.
func TestE2EStandbyGivesWay(t *testing.T) {
	m, a := withStandby(t, vmm.Config{MemoryLimitMiB: 512})
	ctx := context.Background()
	opts := standbyOpts
	sb := awaitStandby(t, m, opts)
	if used, limit := m.Capacity(); used != 256 || limit != 512 {
		t.Fatalf("capacity with a standby: used %d of %d MiB, want 256 of 512 (a standby is not a VM)", used, limit)
	}
	// A VM of another size (no standby of its own; it boots) fits only in
	// the standby's memory.
	other := vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Width: 800, Height: 600}
	c, err := m.Create(ctx, other)
	if err != nil {
		t.Fatalf("create beside a standby that holds the last 256 MiB: %v", err)
	}
	if id, _ := vmm.StandbyForTest(m, opts); id == sb {
		t.Fatal("the standby is still there after a create took its memory")
	}
	// Full now: the refusal is admission's, naming the memory.
	_, err = m.Create(ctx, opts)
	if !errors.Is(err, vmm.ErrInsufficientResources) || !strings.Contains(err.Error(), "512 MiB") {
		t.Fatalf("create over the limit: %v, want ErrInsufficientResources naming the 512 MiB", err)
	}
	for _, id := range []string{a.ID, c.ID} {
		if err := m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	// The 800x600 saved state is this test's own.
	saved, _ := filepath.Glob(filepath.Join(testenv.StateDir, "saved", "tiny-*-800x600-*"))
	for _, p := range saved {
		os.Remove(p)
	}
	assertNoLeftovers(t)
}

// A deskfarm killed with a standby made: the next one removes it as a
// half-made VM and adopts the VM it had made.
func TestE2EStandbyAfterKill(t *testing.T) {
	m, a := withStandby(t, vmm.Config{})
	ctx := context.Background()
	opts := standbyOpts
	sb := awaitStandby(t, m, opts)
	vmm.AbandonForTest(m)

	m2 := testenv.Manager(t, "tiny")
	if _, err := m2.Get(ctx, a.ID); err != nil {
		t.Fatalf("the vm made before the kill was not adopted: %v", err)
	}
	if _, err := m2.Get(ctx, sb); !errors.Is(err, vmm.ErrNotFound) {
		t.Fatalf("the standby %s is a vm after the restart: %v", sb, err)
	}
	if _, err := os.Stat(filepath.Join(testenv.StateDir, "vms", sb)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the standby's directory after the restart: %v", err)
	}
	if err := m2.Destroy(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	m2.Close()
	assertNoLeftovers(t)
}
