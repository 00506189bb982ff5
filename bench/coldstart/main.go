// Command coldstart measures how long a new VM takes from a saved ready
// state (vmm's StartSavedState) and where the time goes: each lifecycle step
// as vmm's runSteps logs it (overlay, define, start, restore, wait-agent,
// clock, mark-ready), the whole Create, and from the Create's start the
// first screendump and the first guest agent call answered (a VM must take
// input and screenshots at once and its agent calls must wait, not fail).
// It prints a Markdown table.
//
//	go run ./bench/coldstart [-image desktop] [-n 20] [-memory 1024] [-resets 10] [-standby] [-gap 3s]
//
// -standby turns on vmm's standby VMs (Config.Standby): each create after
// the first claims the VM made ahead. -gap waits that long before each
// timed create, as between a pool's creates (both sides get it, so a
// standby has time to be made).
//
// -resets also measures a reset's parts on one VM (revert.go).
//
// bench/coldstart/compare.sh runs it at two git revisions, alternating, so
// old and new code are measured side by side in one run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/vmm"
)

// The measures every create gives; steps follow as "step <name>".
const (
	measureCreate     = "Create returned (ready)"
	measureScreenshot = "first screendump answered, from Create's start"
	measureExec       = "first guest exec answered, from Create's start"
)

func main() {
	image := flag.String("image", "desktop", "image to measure")
	n := flag.Int("n", 20, "VMs to create from saved state")
	mem := flag.Int("memory", 1024, "guest memory in MiB")
	vcpus := flag.Int("vcpus", 2, "guest vCPUs")
	resets := flag.Int("resets", 0, "also time this many resets and raw loadvms of one VM (revert)")
	standby := flag.Bool("standby", false, "make VMs ahead (vmm.Config.Standby)")
	gap := flag.Duration("gap", 0, "wait this long before each timed create")
	side := stats.SideFlags()
	flag.Parse()
	side.Main("coldstart", fmt.Sprintf("%s image, %d MiB, %d vCPU", *image, *mem, *vcpus), func(label string) (stats.Samples, string, error) {
		out, err := run(*image, *n, *mem, *vcpus, *resets, label, *standby, *gap)
		return out, "", err
	})
}

func run(image string, n, mem, vcpus, resets int, label string, standby bool, gap time.Duration) (stats.Samples, error) {
	ctx := context.Background()
	steps := newStepLog(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := vmm.New(ctx, vmm.Config{StateDir: farm.DefaultStateDir, Images: vmm.StoreImages{Store: &images.Store{}}, Log: slog.New(steps), Standby: standby})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	opts := vmm.CreateOptions{Image: image, MemoryMiB: mem, VCPUs: vcpus}

	// The first VM of this image and size leaves the saved ready state if
	// there is none yet; it is not counted.
	first, err := m.Create(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := m.Destroy(ctx, first.ID); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "%s: first vm %s started by %s; timing %d creates from saved state\n", label, first.ID, first.Start, n)

	var out stats.Samples
	add := func(k string, d time.Duration) { out = append(out, stats.Sample{Build: label, Measure: k, D: d}) }
	for i := 0; i < n; i++ {
		time.Sleep(gap)
		t0 := time.Now()
		vm, err := m.Create(ctx, opts)
		if err != nil {
			return nil, err
		}
		add(measureCreate, time.Since(t0))
		if vm.Start != vmm.StartSavedState {
			m.Destroy(ctx, vm.ID)
			return nil, fmt.Errorf("vm %s started by %s, not from saved state", vm.ID, vm.Start)
		}
		if _, err := m.Screenshot(ctx, vm.ID); err != nil {
			m.Destroy(ctx, vm.ID)
			return nil, fmt.Errorf("first screendump of vm %s: %w", vm.ID, err)
		}
		add(measureScreenshot, time.Since(t0))
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"true"}}); err != nil {
			m.Destroy(ctx, vm.ID)
			return nil, fmt.Errorf("first exec of vm %s: %w", vm.ID, err)
		}
		add(measureExec, time.Since(t0))
		if i == n-1 {
			reportRSS(ctx, m, label, standby, gap)
		}
		if err := m.Destroy(ctx, vm.ID); err != nil {
			return nil, err
		}
		for op, d := range steps.take(vm.ID) {
			add("step "+op, d)
		}
	}
	if resets > 0 {
		if err := revert(ctx, m, steps, opts, resets, label, add); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// reportRSS prints, to stderr, the resident memory of this farm's QEMUs
// after gap (the standby has been made again by then): the VMs listed and,
// with standby on, the standby, which no List shows.
func reportRSS(ctx context.Context, m *vmm.Manager, label string, standby bool, gap time.Duration) {
	time.Sleep(gap)
	vms, _ := m.List(ctx)
	listed := map[string]bool{}
	for _, v := range vms {
		listed[v.Domain] = true
	}
	pids, _ := filepath.Glob(filepath.Join(vmm.DefaultQEMUPidDir, vmm.DomainPrefix+"*.pid"))
	for _, pf := range pids {
		dom := strings.TrimSuffix(filepath.Base(pf), ".pid")
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		pid := strings.TrimSpace(string(b))
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if !strings.Contains(string(cmdline), farm.DefaultStateDir+"/") {
			continue
		}
		status, _ := os.ReadFile("/proc/" + pid + "/status")
		rss := ""
		for _, l := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				rss = strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
		kind := "vm"
		if !listed[dom] {
			kind = "standby"
		}
		fmt.Fprintf(os.Stderr, "%s: QEMU RSS of %s %s: %s\n", label, kind, dom, rss)
	}
}
