package pool_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
)

// TestE2EStartOnAndSetPools drives what a cluster agent asks of its node's
// farm (cluster.Local) on real tiny VMs: StartOn a named free VM (not the
// one Start would pick) gets that VM, and its guest answers an exec;
// SetPools adding a pool boots its warm VM; SetPools removing it destroys
// that VM, leaving no libvirt domain and no VM directory.
func TestE2EStartOnAndSetPools(t *testing.T) {
	m := e2eFarm(t)
	tiny := pool.PoolConfig{Name: "tiny", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 2, Max: 2}
	cfg := pool.Config{Pools: []pool.PoolConfig{tiny}}
	cfg.SetDefaults()
	pm, err := pool.New(context.Background(), m, cfg, pool.Options{StateDir: testenv.StateDir, ReconcileInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	ctx := context.Background()
	free := func(poolName string) []string {
		var out []string
		for _, d := range pm.Desktops() {
			if d.Pool == poolName && d.State == pool.DesktopFree {
				out = append(out, d.VM)
			}
		}
		return out
	}
	waitFree := func(poolName string, n int) []string {
		t.Helper()
		deadline := time.Now().Add(4 * time.Minute)
		for len(free(poolName)) < n {
			if time.Now().After(deadline) {
				t.Fatalf("pool %s never had %d free vms: %+v", poolName, n, pm.Desktops())
			}
			time.Sleep(200 * time.Millisecond)
		}
		return free(poolName)
	}

	vms := waitFree("tiny", 2)
	slices.Sort(vms)
	vm := vms[1] // Start takes the lowest id first
	b := make([]byte, 6)
	rand.Read(b)
	id := "ep-" + hex.EncodeToString(b)
	ep, err := pm.StartOn(ctx, "tiny", vm, id, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ep.ID != id || ep.VM != vm || ep.State != pool.EpisodeActive {
		t.Fatalf("StartOn %s: %+v", vm, ep)
	}
	got, callCtx, release, err := pm.Acquire(ctx, id)
	if err != nil || got != vm {
		t.Fatalf("acquire %s: %s %v", id, got, err)
	}
	res, err := m.Exec(callCtx, vm, vmm.ExecRequest{Argv: []string{"sh", "-c", "echo on-$(hostname)-" + id}})
	release()
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), id) {
		t.Fatalf("exec on the leased vm: %+v %v", res, err)
	}
	if _, err := pm.StartOn(ctx, "tiny", vm, "ep-000000000001", 0); !errors.Is(err, pool.ErrNotWarm) {
		t.Fatalf("StartOn a leased vm: %v", err)
	}
	if _, err := pm.End(ctx, id, pool.ReasonDeleted); err != nil {
		t.Fatal(err)
	}

	// Add a pool: its warm VM boots.
	added := cfg
	added.Pools = []pool.PoolConfig{tiny, {Name: "more", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 1}}
	if err := pm.SetPools(ctx, added); err != nil {
		t.Fatal(err)
	}
	moreVM := waitFree("more", 1)[0]
	v, err := m.Get(ctx, moreVM)
	if err != nil || v.State != vmm.StateReady || v.Labels[pool.LabelPool] != "more" {
		t.Fatalf("the added pool's vm: %+v %v", v, err)
	}

	// Remove it: its free VM is destroyed, domain and files.
	if err := pm.SetPools(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := pm.Start(ctx, "more", 0); !errors.Is(err, pool.ErrUnknownPool) {
		t.Fatalf("start on the removed pool: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := m.Get(ctx, moreVM)
		if errors.Is(err, vmm.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed pool's vm %s still there: %v", moreVM, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, err := exec.Command("virsh", "-c", "qemu:///system", "list", "--all", "--name").Output()
	if err != nil {
		t.Fatalf("virsh list: %v", err)
	}
	if slices.Contains(strings.Fields(string(out)), v.Domain) {
		t.Fatalf("domain %s of the removed pool's vm left in libvirt", v.Domain)
	}
	if _, err := os.Stat(filepath.Join(testenv.StateDir, "vms", moreVM)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("vm dir of the removed pool's vm: %v", err)
	}
	for _, d := range pm.Desktops() {
		if d.Pool == "more" {
			t.Fatalf("the removed pool still lists %+v", d)
		}
	}
}
