// Command deskreset measures how long one VM's reset takes to reach its
// desk (vmm's Reset, then desk.Pool.WaitReset: what POST /v1/vms/{id}/reset
// answers after) while the farm is idle, and while another VM of the farm
// is reset in the middle of a long wait action (issue 14, item 2). It
// prints a Markdown table.
//
//	go run ./bench/deskreset [-image tiny] [-n 10] [-wait 60s] [-state DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
)

func main() {
	image := flag.String("image", "tiny", "image of both VMs")
	n := flag.Int("n", 10, "resets of B to time in each case")
	wait := flag.Duration("wait", 60*time.Second, "the wait action A runs when it is reset")
	state := flag.String("state", farm.DefaultStateDir, "the farm's state dir")
	flag.Parse()
	if err := run(*image, *n, *wait, *state); err != nil {
		fmt.Fprintln(os.Stderr, "bench/deskreset:", err)
		os.Exit(1)
	}
}

func run(image string, n int, wait time.Duration, state string) error {
	ctx := context.Background()
	m, log, err := farm.Open(ctx, state)
	if err != nil {
		return err
	}
	defer m.Close()
	desks := desk.NewPool(m, log)
	defer desks.Close()
	var vms [2]vmm.VM
	for i := range vms {
		if vms[i], err = m.Create(ctx, vmm.CreateOptions{Image: image}); err != nil {
			return err
		}
		defer m.Destroy(ctx, vms[i].ID)
	}
	a, b := vms[0], vms[1]
	da, err := desks.Get(ctx, a.ID)
	if err != nil {
		return err
	}
	if _, err := desks.Get(ctx, b.ID); err != nil {
		return err
	}
	waitActs := []actions.Action{actions.Wait{Duration: wait}}
	quick := player.RunOptions{NoSettle: true, Screenshot: player.ScreenshotNever}

	// resetB is B's reset as the API's reset route answers it: once B's
	// desk has applied it.
	resetB := func() (time.Duration, error) {
		t0 := time.Now()
		if _, err := m.Reset(ctx, b.ID); err != nil {
			return 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*wait)
		defer cancel()
		if err := desks.WaitReset(wctx, b.ID, t0); err != nil {
			return 0, err
		}
		return time.Since(t0), nil
	}

	// Idle and stalled rounds alternate, so that load on the host and the
	// VMs' warming up fall on both alike.
	var idle, stalled, aAnswer []time.Duration
	for i := 0; i < n; i++ {
		d, err := resetB()
		if err != nil {
			return fmt.Errorf("idle reset %d of B: %w", i, err)
		}
		idle = append(idle, d)

		ran := make(chan time.Time, 1)
		go func() {
			_, err := da.Run(ctx, player.ScreenshotSize{}, waitActs, quick)
			if err == nil {
				fmt.Fprintf(os.Stderr, "A's %s wait ran to its end: its reset did not cut it short\n", wait)
			}
			ran <- time.Now()
		}()
		for len(da.Executors()) == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // A is well into its wait
		t0 := time.Now()
		if _, err := m.Reset(ctx, a.ID); err != nil {
			return fmt.Errorf("reset %d of A: %w", i, err)
		}
		if d, err = resetB(); err != nil {
			return fmt.Errorf("reset %d of B during A's: %w", i, err)
		}
		stalled = append(stalled, d)
		aAnswer = append(aAnswer, (<-ran).Sub(t0))
		if err := desks.WaitReset(ctx, a.ID, t0); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: B idle %s, B during A's reset %s\n", i, stats.MS(idle[i]), stats.MS(stalled[i]))
	}
	fmt.Printf("| measure (%s image, 2 VMs, tcg) | n | median | p95 |\n|---|---|---|---|\n", image)
	fmt.Printf("| B's reset applied to its desk, farm idle | %d | %s | %s |\n", n, stats.MS(stats.Pct(idle, 50)), stats.MS(stats.Pct(idle, 95)))
	fmt.Printf("| B's reset applied to its desk, just after A's reset during A's %s wait | %d | %s | %s |\n", wait, n, stats.MS(stats.Pct(stalled, 50)), stats.MS(stats.Pct(stalled, 95)))
	fmt.Printf("| A's wait answers, from the start of A's reset | %d | %s | %s |\n", n, stats.MS(stats.Pct(aAnswer, 50)), stats.MS(stats.Pct(aAnswer, 95)))
	return nil
}
