package vmm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/digitalocean/go-libvirt"
)

// A fork whose new VMs fail after their domains exist leaves nothing: no
// domain, no VM directory, no template, no VM listed; the source runs on
// without the transfer snapshot.
func TestForkFailureLeavesNothing(t *testing.T) {
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	ctx := context.Background()
	src, err := f.m.Create(ctx, tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	hv.mu.Lock()
	hv.hmp["info"] = hmpCaptures(t)["info-snapshots-ready"].Output
	hv.fail["hmp:loadvm"] = errors.New("qemu: loadvm failed")
	hv.mu.Unlock()
	_, err = f.m.Fork(ctx, src.ID, ForkOptions{Count: 2})
	if err == nil {
		t.Fatal("fork with a failing loadvm succeeded")
	}
	if names := hv.domainNames(); len(names) != 1 || names[0] != DomainPrefix+src.ID {
		t.Errorf("domains after the failed fork: %v", names)
	}
	if vms, _ := f.m.List(ctx); len(vms) != 1 || vms[0].ID != src.ID || vms[0].State != StateReady {
		t.Errorf("vms after the failed fork: %+v", vms)
	}
	entries, _ := os.ReadDir(filepath.Join(f.dir, "vms"))
	if len(entries) != 1 {
		t.Errorf("vm dirs after the failed fork: %v", entries)
	}
	if entries, _ := os.ReadDir(f.m.forksDir()); len(entries) != 0 {
		t.Errorf("fork templates left: %v", entries)
	}
	if used, _ := f.m.Capacity(); used != tinyOpts.MemoryMiB {
		t.Errorf("admission still counts %d MiB", used)
	}
	hv.mu.Lock()
	calls := slices.Clone(hv.calls)
	state := hv.doms[DomainPrefix+src.ID].state
	hv.mu.Unlock()
	loads := 0
	for _, c := range calls {
		if c == "hmp:loadvm" {
			loads++
		}
	}
	if loads != 2 {
		t.Errorf("%d loadvm calls, want one per new VM (their domains were made, then removed)", loads)
	}
	if !slices.Contains(calls, "hmp:delvm") || calls[len(calls)-1] == "hmp:stop" {
		t.Errorf("source's monitor calls %v: want the transfer snapshot deleted and the guest running", calls)
	}
	if state != libvirt.DomainRunning {
		t.Errorf("source left in libvirt state %d", state)
	}
}
