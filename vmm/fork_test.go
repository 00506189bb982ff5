package vmm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// A fork that fails anywhere leaves nothing: no domain, no VM directory,
// no template, no VM listed, no memory admitted; the source runs on
// without the transfer snapshot. The new VMs' domains exist before the
// source's state is saved, so a failure of the source's savevm removes
// them too, as does a failure of the disk pivot or of the loadvm.
func TestForkFailureLeavesNothing(t *testing.T) {
	for _, op := range []string{"hmp:savevm", "qmp:blockdev-add", "qmp:job-complete", "qmp:blockdev-del", "hmp:loadvm"} {
		t.Run(op, func(t *testing.T) {
			hv, f, src := forkSource(t)
			ctx := context.Background()
			hv.mu.Lock()
			hv.fail[op] = errors.New("qemu: " + op + " failed")
			hv.mu.Unlock()
			_, err := f.m.Fork(ctx, src.ID, ForkOptions{Count: 2})
			if err == nil {
				t.Fatalf("fork with a failing %s succeeded", op)
			}
			if !strings.Contains(err.Error(), op+" failed") {
				t.Errorf("fork error %q does not say what failed", err)
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
			// The source's transfer snapshot goes after Fork's copy, under
			// the source's op lock: wait for it.
			calls := callsAfterOps(hv, f.m, src.ID)
			hv.mu.Lock()
			state := hv.doms[DomainPrefix+src.ID].state
			hv.mu.Unlock()
			if count(calls, "start") != 3 {
				t.Errorf("%d domains started, want the source's and one per new VM", count(calls, "start"))
			}
			if !slices.Contains(calls, "hmp:delvm") || calls[len(calls)-1] == "hmp:stop" {
				t.Errorf("source's monitor calls %v: want the transfer snapshot deleted and the guest running", calls)
			}
			if state != libvirt.DomainRunning {
				t.Errorf("source left in libvirt state %d", state)
			}
		})
	}
}

// A fork is ready before the transfer snapshot's delvm, on the source and
// on the new VMs: with delvm held, Fork returns ready VMs; once delvm
// answers, every transfer snapshot goes (one delvm on the source, one on
// each new VM), each under its VM's op lock.
func TestForkDropsTransferAfterReady(t *testing.T) {
	hv, f, src := forkSource(t)
	ctx := context.Background()
	held := make(chan struct{})
	hv.mu.Lock()
	hv.block["hmp:delvm"] = held
	hv.mu.Unlock()
	type result struct {
		vms []VM
		err error
	}
	done := make(chan result, 1)
	go func() {
		vms, err := f.m.Fork(ctx, src.ID, ForkOptions{Count: 2})
		done <- result{vms, err}
	}()
	var vms []VM
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		vms = r.vms
	case <-time.After(20 * time.Second):
		close(held)
		t.Fatal("Fork waited for a transfer snapshot's delvm")
	}
	for _, v := range vms {
		if v.State != StateReady {
			t.Errorf("fork %s is %s with delvm held, want ready", v.ID, v.State)
		}
	}
	close(held)
	if dels := count(callsAfterOps(hv, f.m, src.ID, vms[0].ID, vms[1].ID), "hmp:delvm"); dels != 3 {
		t.Errorf("%d delvm calls, want 3 (the source's and each new VM's transfer snapshot)", dels)
	}
}

// callsAfterOps are hv's calls once what runs under the op locks of the
// VMs ids (a fork's transfer snapshot drops) is done.
func callsAfterOps(hv *fakeHV, m *Manager, ids ...string) []string {
	for _, id := range ids {
		if mc, _, err := m.change(id); err == nil {
			mc.op.Unlock()
		}
	}
	hv.mu.Lock()
	defer hv.mu.Unlock()
	return slices.Clone(hv.calls)
}

func count(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}

// forkSource is a farm on a fake hypervisor with one VM to fork, whose
// monitor lists the ready snapshot.
func forkSource(t *testing.T) (*fakeHV, *testFarm, VM) {
	t.Helper()
	hv := newFakeHV()
	f := newTestFarm(t, hv, nil)
	src, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	hv.mu.Lock()
	hv.hmp["info"] = hmpCaptures(t)["info-snapshots-ready"].Output
	hv.mu.Unlock()
	return hv, f, src
}

// A fork of a VM with a NIC (forwards) never takes the standby of VMs
// without one: the source's transfer snapshot holds a network device that
// standby's QEMU does not have.
func TestForkStandbyOnlyWithoutNIC(t *testing.T) {
	f := newTestFarm(t, newFakeHV(), func(c *Config) { c.Standby = true })
	img, err := f.m.cfg.Images.Resolve("tiny")
	if err != nil {
		t.Fatal(err)
	}
	plain := CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1, Width: 1280, Height: 800}
	tmpl := f.m.templatePath(img, plain)
	sb := &standby{mc: &machine{spec: machineSpec{MemoryMiB: 256}}, tmpl: tmpl, ready: true}
	f.m.mu.Lock()
	f.m.standbys[tmpl] = sb
	f.m.mu.Unlock()
	t.Cleanup(func() {
		// Not a made standby: Close must not tear it down.
		f.m.mu.Lock()
		delete(f.m.standbys, tmpl)
		f.m.mu.Unlock()
	})
	src := machineSpec{ID: "src", Image: "tiny", MemoryMiB: 256, VCPUs: 1, Width: 1280, Height: 800,
		Forwards: []Forward{{GuestPort: 5000, HostPort: 41000}}}
	mcs := []*machine{{spec: machineSpec{ID: "x", MemoryMiB: 256, Forwards: src.Forwards}}}
	if got, _ := f.m.forkStandby(mcs, img, forkOptions(src)); got != nil {
		t.Fatal("a fork of a VM with a NIC took the standby of VMs without one")
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.standbys[tmpl] != sb || mcs[0].spec.ID != "x" {
		t.Fatal("the standby or the fork's record changed")
	}
}
