// Command coldstart measures how long a new VM takes from a saved ready
// state (vmm's StartSavedState) and where the time goes: each lifecycle step
// as vmm's runSteps logs it (overlay, define, start, restore, wait-agent,
// clock, mark-ready), the whole Create, and from the Create's start the
// first screendump and the first guest agent call answered (a VM must take
// input and screenshots at once and its agent calls must wait, not fail).
// It prints a Markdown table.
//
//	go run ./bench/coldstart [-image desktop] [-n 20] [-memory 1024] [-label new]
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
	"slices"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/vmm"
)

func main() {
	image := flag.String("image", "desktop", "image to measure")
	n := flag.Int("n", 20, "VMs to create from saved state")
	mem := flag.Int("memory", 1024, "guest memory in MiB")
	vcpus := flag.Int("vcpus", 2, "guest vCPUs")
	label := flag.String("label", "", "name of this build in the table (compare.sh passes old/new)")
	header := flag.Bool("header", true, "print the table's header")
	flag.Parse()
	if err := run(*image, *n, *mem, *vcpus, *label, *header); err != nil {
		fmt.Fprintln(os.Stderr, "bench/coldstart:", err)
		os.Exit(1)
	}
}

func run(image string, n, mem, vcpus int, label string, header bool) error {
	ctx := context.Background()
	steps := newStepLog(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := vmm.New(ctx, vmm.Config{StateDir: farm.DefaultStateDir, Images: vmm.StoreImages{Store: &images.Store{}}, Log: slog.New(steps)})
	if err != nil {
		return err
	}
	defer m.Close()
	opts := vmm.CreateOptions{Image: image, MemoryMiB: mem, VCPUs: vcpus}

	// The first VM of this image and size leaves the saved ready state if
	// there is none yet; it is not counted.
	first, err := m.Create(ctx, opts)
	if err != nil {
		return err
	}
	if err := m.Destroy(ctx, first.ID); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "first vm %s started by %s; timing %d creates from saved state\n", first.ID, first.Start, n)

	samples := map[string][]time.Duration{}
	add := func(k string, d time.Duration) { samples[k] = append(samples[k], d) }
	for i := 0; i < n; i++ {
		t0 := time.Now()
		vm, err := m.Create(ctx, opts)
		if err != nil {
			return err
		}
		add("create", time.Since(t0))
		if vm.Start != vmm.StartSavedState {
			m.Destroy(ctx, vm.ID)
			return fmt.Errorf("vm %s started by %s, not from saved state", vm.ID, vm.Start)
		}
		if _, err := m.Screenshot(ctx, vm.ID); err != nil {
			m.Destroy(ctx, vm.ID)
			return fmt.Errorf("first screenshot of vm %s: %w", vm.ID, err)
		}
		add("screenshot", time.Since(t0))
		if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"true"}}); err != nil {
			m.Destroy(ctx, vm.ID)
			return fmt.Errorf("first exec of vm %s: %w", vm.ID, err)
		}
		add("exec", time.Since(t0))
		if err := m.Destroy(ctx, vm.ID); err != nil {
			return err
		}
		for op, d := range steps.take(vm.ID) {
			add("step "+op, d)
		}
	}

	if header {
		fmt.Printf("| build | measure (%s image, %d MiB, %d vCPU, n=%d) | median | p95 |\n|---|---|---|---|\n", image, mem, vcpus, n)
	}
	row := func(name, key string) {
		if d, ok := samples[key]; ok {
			fmt.Printf("| %s | %s | %s | %s |\n", label, name, stats.MS(stats.Pct(d, 50)), stats.MS(stats.Pct(d, 95)))
		}
	}
	row("Create returned (ready)", "create")
	row("first screendump answered, from Create's start", "screenshot")
	row("first guest exec answered, from Create's start", "exec")
	var ops []string
	for k := range samples {
		if len(k) > 5 && k[:5] == "step " {
			ops = append(ops, k)
		}
	}
	slices.SortFunc(ops, func(a, b string) int { return int(stats.Pct(samples[b], 50) - stats.Pct(samples[a], 50)) })
	for _, k := range ops {
		row("step "+k[5:], k)
	}
	return nil
}
