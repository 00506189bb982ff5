// Command snapshots measures, in one run on one VM, a named snapshot's save
// and revert next to a reset (loadvm of the ready snapshot), and forks of
// N = 1 and N = 4 new desktops from that VM. It prints a Markdown table,
// or with -raw appends its samples to a file that -table prints, builds
// side by side (compare.sh runs two revisions of vmm so).
//
//	go run ./bench/snapshots [-image desktop] [-n 10] [-forks 3] [-memory 1024]
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/vmm"
)

func main() {
	image := flag.String("image", "desktop", "image to measure")
	n := flag.Int("n", 10, "rounds of save, revert and reset")
	forks := flag.Int("forks", 3, "forks of each size")
	mem := flag.Int("memory", 1024, "guest memory in MiB")
	vcpus := flag.Int("vcpus", 2, "guest vCPUs")
	standby := flag.Bool("standby", true, "make VMs ahead as deskfarm serve does (vmm.Config.Standby): a fork's first new desktop may be one")
	gap := flag.Duration("fork-gap", 3*time.Second, "wait this long before each fork (the standby a fork took is made again meanwhile, as between an agent's forks)")
	verbose := flag.Bool("v", false, "log the farm's steps (with their durations, and loadvm's) to stderr")
	side := stats.SideFlags()
	flag.Parse()
	side.Main("snapshots", fmt.Sprintf("%s image, %d MiB, %d vCPU", *image, *mem, *vcpus), func(label string) (stats.Samples, string, error) {
		return run(*image, *n, *forks, *mem, *vcpus, *standby, *gap, *verbose, label)
	})
}

// exec runs a guest command; after a revert or reset it waits for the
// agent's reopen, so its time is when guest calls work again.
func exec(ctx context.Context, m *vmm.Manager, id, cmd string) error {
	_, err := m.Exec(ctx, id, vmm.ExecRequest{Argv: []string{"sh", "-c", cmd}})
	return err
}

func run(image string, n, forks, mem, vcpus int, standby bool, gap time.Duration, verbose bool, label string) (stats.Samples, string, error) {
	ctx := context.Background()
	cfg := vmm.Config{Standby: standby}
	if verbose {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, _, err := farm.OpenConfig(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	defer m.Close()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: image, MemoryMiB: mem, VCPUs: vcpus})
	if err != nil {
		return nil, "", err
	}
	defer m.Destroy(ctx, vm.ID)
	fmt.Fprintf(os.Stderr, "vm %s ready (%s); %d rounds\n", vm.ID, vm.Start, n)

	// Each round, as an episode would: dirty the guest, save, dirty, revert
	// to the save, first exec; dirty, reset, first exec; delete.
	dirty := "dd if=/dev/urandom of=/tmp/dirty bs=1M count=16 2>/dev/null"
	var save, revert, revertExec, reset, resetExec, del []time.Duration
	var bytes int64
	for i := range n {
		name := fmt.Sprintf("bench-%d", i)
		if err := exec(ctx, m, vm.ID, dirty); err != nil {
			return nil, "", err
		}
		s, err := m.SaveSnapshot(ctx, vm.ID, name)
		if err != nil {
			return nil, "", err
		}
		save, bytes = append(save, s.Took), s.Bytes
		if err := exec(ctx, m, vm.ID, dirty); err != nil {
			return nil, "", err
		}
		t0 := time.Now()
		r, err := m.RevertSnapshot(ctx, vm.ID, name)
		if err != nil {
			return nil, "", err
		}
		revert = append(revert, r.Duration)
		if err := exec(ctx, m, vm.ID, "true"); err != nil {
			return nil, "", fmt.Errorf("first exec after revert %d: %w", i, err)
		}
		revertExec = append(revertExec, time.Since(t0))
		if err := exec(ctx, m, vm.ID, dirty); err != nil {
			return nil, "", err
		}
		t0 = time.Now()
		r, err = m.Reset(ctx, vm.ID)
		if err != nil {
			return nil, "", err
		}
		reset = append(reset, r.Duration)
		if err := exec(ctx, m, vm.ID, "true"); err != nil {
			return nil, "", fmt.Errorf("first exec after reset %d: %w", i, err)
		}
		resetExec = append(resetExec, time.Since(t0))
		t0 = time.Now()
		if err := m.DeleteSnapshot(ctx, vm.ID, name); err != nil {
			return nil, "", err
		}
		del = append(del, time.Since(t0))
	}

	// Forks of the VM as an episode left it (dirtied): per new desktop is
	// the whole fork's time over N; the source pauses for a part of it.
	forkOf := func(count int) (per, whole []time.Duration, err error) {
		for range forks {
			if err := exec(ctx, m, vm.ID, dirty); err != nil {
				return nil, nil, err
			}
			time.Sleep(gap)
			t0 := time.Now()
			vms, err := m.Fork(ctx, vm.ID, vmm.ForkOptions{Count: count})
			if err != nil {
				return nil, nil, err
			}
			d := time.Since(t0)
			whole, per = append(whole, d), append(per, d/time.Duration(count))
			for _, f := range vms {
				if err := exec(ctx, m, f.ID, "true"); err != nil {
					return nil, nil, fmt.Errorf("exec on fork %s: %w", f.ID, err)
				}
				if err := m.Destroy(ctx, f.ID); err != nil {
					return nil, nil, err
				}
			}
		}
		return per, whole, nil
	}
	per1, _, err := forkOf(1)
	if err != nil {
		return nil, "", err
	}
	per4, whole4, err := forkOf(4)
	if err != nil {
		return nil, "", err
	}

	var out stats.Samples
	add := func(what string, d []time.Duration) {
		for _, x := range d {
			out = append(out, stats.Sample{Build: label, Measure: what, D: x})
		}
	}
	add("save a named snapshot (savevm; the VM runs on)", save)
	add("revert to it (loadvm + clock)", revert)
	add("revert, then the first guest exec answered", revertExec)
	add("reset to the ready snapshot (loadvm + clock), same VM", reset)
	add("reset, then the first guest exec answered", resetExec)
	add("delete the named snapshot (delvm)", del)
	add("fork N=1: the new desktop ready", per1)
	add("fork N=4: whole fork", whole4)
	add("fork N=4: per new desktop (whole / 4)", per4)
	return out, fmt.Sprintf("%s image, %d MiB, %d vCPU, %s; snapshot %.0f MiB", image, mem, vcpus, vm.Accel, float64(bytes)/(1<<20)), nil
}
