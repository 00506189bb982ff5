// Command reclaim measures the host memory a used desktop keeps after its
// reset: one VM from saved state fills part of its RAM (random bytes in
// /dev/shm, as a browser's heap would be), resets, and the QEMU's RSS is
// read before the reset and after it. With the balloon's free page
// reporting, the guest gives back the blocks it holds free once it reports
// them; what it held as reported when the ready snapshot was saved it never
// reports again (vmm's shrinkRAM says why). Compared with another revision
// by bench/compare.sh -s DIR, each build on its own state dir so each makes
// its own saved ready state.
//
//	go run ./bench/reclaim [-state DIR] [-n N] [-fill MiB] [-after 10s]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/vmm"
)

func main() {
	state := flag.String("state", farm.DefaultStateDir+"-reclaim", "the farm's state dir (its saved ready state is this build's)")
	image := flag.String("image", "desktop", "image to measure")
	n := flag.Int("n", 5, "resets")
	fill := flag.Int("fill", 500, "MiB of random bytes the guest holds before each reset")
	after := flag.Duration("after", 10*time.Second, "when, after the reset, the RSS is read")
	side := stats.SideFlags()
	flag.Parse()
	side.Main("reclaim", fmt.Sprintf("%s image, 1024 MiB, 2 vCPU; %d MiB filled before each reset; RSS rows in MiB, shown as ms", *image, *fill),
		func(label string) (stats.Samples, string, error) {
			out, err := run(*state, *image, *n, *fill, *after, label)
			return out, "", err
		})
}

func run(state, image string, n, fill int, after time.Duration, label string) (stats.Samples, error) {
	ctx := context.Background()
	m, _, err := farm.OpenConfig(ctx, vmm.Config{StateDir: state})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	opts := vmm.CreateOptions{Image: image, MemoryMiB: 1024, VCPUs: 2}
	// The first VM boots when this state dir has no saved ready state yet,
	// and makes it; the measured VM starts from it.
	first, err := m.Create(ctx, opts)
	if err != nil {
		return nil, err
	}
	if first.Start == vmm.StartBoot {
		fmt.Fprintln(os.Stderr, "booted the first VM: its ready state is saved")
		if err := m.Destroy(ctx, first.ID); err != nil {
			return nil, err
		}
		if first, err = m.Create(ctx, opts); err != nil {
			return nil, err
		}
	}
	vm := first
	defer m.Destroy(ctx, vm.ID)
	var out stats.Samples
	add := func(what string, d time.Duration) { out = append(out, stats.Sample{Build: label, Measure: what, D: d}) }
	mib := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	time.Sleep(after)
	rss, err := farm.QEMURSS(vm.ID)
	if err != nil {
		return nil, err
	}
	add("QEMU RSS of the new VM, idle (MiB)", mib(rss))
	for range n {
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"sh", "-c",
			fmt.Sprintf("dd if=/dev/urandom of=/dev/shm/fill bs=1M count=%d 2>/dev/null", fill)}}); err != nil {
			return nil, err
		}
		if rss, err = farm.QEMURSS(vm.ID); err != nil {
			return nil, err
		}
		add("QEMU RSS, filled, before the reset (MiB)", mib(rss))
		t0 := time.Now()
		r, err := m.Reset(ctx, vm.ID)
		if err != nil {
			return nil, err
		}
		add("reset (loadvm + clock)", r.Duration)
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"true"}}); err != nil {
			return nil, err
		}
		add("reset, then the first guest exec answered", time.Since(t0))
		time.Sleep(after - time.Since(t0))
		if rss, err = farm.QEMURSS(vm.ID); err != nil {
			return nil, err
		}
		add(fmt.Sprintf("QEMU RSS %s after the reset (MiB)", after), mib(rss))
		// The memory given back is the host's to fault in again when the
		// guest uses it: the next episode's cost.
		t1 := time.Now()
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"sh", "-c",
			fmt.Sprintf("dd if=/dev/zero of=/dev/shm/use bs=1M count=%d 2>/dev/null; rm /dev/shm/use", fill)}}); err != nil {
			return nil, err
		}
		add("then the guest writes as much again (exec)", time.Since(t1))
		time.Sleep(3 * time.Second)
	}
	return out, nil
}
