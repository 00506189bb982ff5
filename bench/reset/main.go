// Command reset measures, in one run on one host, how long deskfarm takes to
// return a VM to its ready state, next to libvirt's own snapshot revert on the
// same VM, plus the cold boot to ready. It prints a Markdown table.
//
//	go run ./bench/reset [-image desktop] [-n 20] [-libvirt-n 5] [-memory 1024]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/vmm"
)

func main() {
	image := flag.String("image", "desktop", "image to measure")
	n := flag.Int("n", 20, "deskfarm resets to time")
	ln := flag.Int("libvirt-n", 5, "libvirt snapshot reverts to time (each restarts QEMU)")
	mem := flag.Int("memory", 1024, "guest memory in MiB")
	vcpus := flag.Int("vcpus", 2, "guest vCPUs")
	flag.Parse()
	if err := run(*image, *n, *ln, *mem, *vcpus); err != nil {
		fmt.Fprintln(os.Stderr, "bench/reset:", err)
		os.Exit(1)
	}
}

func run(image string, n, ln, mem, vcpus int) error {
	ctx := context.Background()
	m, _, err := farm.Open(ctx, farm.DefaultStateDir)
	if err != nil {
		return err
	}
	defer m.Close()

	t0 := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: image, MemoryMiB: mem, VCPUs: vcpus})
	if err != nil {
		return err
	}
	boot := time.Since(t0)
	defer m.Destroy(ctx, vm.ID)
	fmt.Fprintf(os.Stderr, "vm %s ready in %s; timing %d resets\n", vm.ID, boot.Round(time.Millisecond), n)

	// A second VM of the same image and size starts from the first's saved
	// ready state (a copy of its overlay with the RAM snapshot) instead of
	// booting. The first VM may itself have come from saved state if one
	// existed: the table says which.
	var fromSaved []time.Duration
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		vm2, err := m.Create(ctx, vmm.CreateOptions{Image: image, MemoryMiB: mem, VCPUs: vcpus})
		if err != nil {
			return err
		}
		d := time.Since(t0)
		if err := m.Destroy(ctx, vm2.ID); err != nil {
			return err
		}
		if vm2.Start != vmm.StartSavedState {
			return fmt.Errorf("vm %s started by %s, not from saved state", vm2.ID, vm2.Start)
		}
		fromSaved = append(fromSaved, d)
	}

	// ours is the reset as Reset returns it (loadvm and the clock: screenshots
	// and input work from then on); withExec adds the first guest command,
	// which waits for libvirt to reopen its agent connection.
	var ours, withExec []time.Duration
	for i := 0; i < n; i++ {
		// Dirty the guest a little between resets, as an episode would.
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"sh", "-c", "dd if=/dev/urandom of=/tmp/dirty bs=1M count=16 2>/dev/null"}}); err != nil {
			return err
		}
		t0 := time.Now()
		r, err := m.Reset(ctx, vm.ID)
		if err != nil {
			return err
		}
		ours = append(ours, r.Duration)
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"true"}}); err != nil {
			return fmt.Errorf("first exec after reset %d: %w", i, err)
		}
		withExec = append(withExec, time.Since(t0))
	}

	// Baseline: libvirt's own internal snapshot of the same running VM.
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(vmm.DefaultLibvirtSocket)))
	if err := l.Connect(); err != nil {
		return err
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(vm.Domain)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "creating libvirt snapshot, timing %d reverts\n", ln)
	t0 = time.Now()
	snap, err := l.DomainSnapshotCreateXML(dom, "<domainsnapshot><name>bench</name></domainsnapshot>", 0)
	if err != nil {
		return fmt.Errorf("libvirt snapshot create: %w", err)
	}
	snapCreate := time.Since(t0)
	var theirs []time.Duration
	for i := 0; i < ln; i++ {
		t0 := time.Now()
		if err := l.DomainRevertToSnapshot(snap, 0); err != nil {
			return fmt.Errorf("libvirt revert: %w", err)
		}
		theirs = append(theirs, time.Since(t0))
	}
	_ = l.DomainSnapshotDelete(snap, libvirt.DomainSnapshotDeleteMetadataOnly)

	fmt.Printf("| measure (%s image, %d MiB, %d vCPU, %s) | n | median | p95 | ratio |\n|---|---|---|---|---|\n", image, mem, vcpus, vm.Accel)
	fmt.Printf("| deskfarm reset (QEMU loadvm + clock set) | %d | %s | %s | 1.0x |\n", len(ours), stats.MS(stats.Pct(ours, 50)), stats.MS(stats.Pct(ours, 95)))
	fmt.Printf("| deskfarm reset, then the first guest exec answered | %d | %s | %s | |\n", len(withExec), stats.MS(stats.Pct(withExec, 50)), stats.MS(stats.Pct(withExec, 95)))
	fmt.Printf("| libvirt snapshot revert (same VM) | %d | %s | %s | %s slower |\n", len(theirs), stats.MS(stats.Pct(theirs, 50)), stats.MS(stats.Pct(theirs, 95)),
		stats.Ratio(theirs, ours))
	fmt.Printf("| libvirt snapshot create (once) | 1 | %s | | |\n", stats.MS(snapCreate))
	fmt.Printf("| first VM to ready (started by %s) | 1 | %s | | |\n", vm.Start, stats.MS(boot))
	fmt.Printf("| new VM from saved ready state (copy overlay, start paused, loadvm) | %d | %s | %s | |\n", len(fromSaved),
		stats.MS(stats.Pct(fromSaved, 50)), stats.MS(stats.Pct(fromSaved, 95)))
	return nil
}
