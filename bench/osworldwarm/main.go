// Command osworldwarm measures what the first OSWorld episode of a farm
// costs (issue 18 item 5), three ways in one run on one state dir of its
// own:
//
//   - boot: no saved ready state yet (a fresh state dir), the default
//     config (osworld pool, none warm): the episode waits for a boot;
//   - saved: a saved ready state exists, the default config: the episode
//     waits for a create from saved state;
//   - warm: a saved ready state exists and the pool keeps one VM warm
//     (make run's osworld.min_warm=1): the farm makes the warm VM from
//     saved state when it starts, and the episode leases it.
//
// For each it prints the time from the pool's start to the episode's
// answer, and for warm also when the warm VM was ready and how long the
// start call then took. The saved and
// warm rounds alternate, so both see the same host load.
//
//	go run ./bench/osworldwarm [-rounds 3] [-image osworld]
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
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
)

const stateDir = farm.DefaultStateDir + "-osworldwarm"

func main() {
	rounds := flag.Int("rounds", 3, "rounds of saved and warm, alternating")
	image := flag.String("image", "osworld", "the osworld pool's image")
	flag.Parse()
	if err := run(*rounds, *image); err != nil {
		fmt.Fprintln(os.Stderr, "bench/osworldwarm:", err)
		os.Exit(1)
	}
}

type sample struct{ warmReady, episode, call time.Duration }

func run(rounds int, image string) error {
	ctx := context.Background()
	// A fresh state dir: the boot round must find no saved ready state.
	if err := os.RemoveAll(stateDir); err != nil {
		return err
	}
	m, log, err := farm.Open(ctx, stateDir)
	if err != nil {
		return err
	}
	defer func() {
		m.Close()
		os.RemoveAll(stateDir)
	}()
	res := map[string][]sample{}
	order := []string{"boot"}
	for range rounds {
		order = append(order, "saved", "warm")
	}
	for i, how := range order {
		s, err := once(ctx, m, log, image, how == "warm")
		if err != nil {
			return fmt.Errorf("round %d (%s): %w", i, how, err)
		}
		fmt.Fprintf(os.Stderr, "round %d %s: warm ready %v, episode %v\n", i, how, s.warmReady.Round(time.Millisecond), s.episode.Round(time.Millisecond))
		res[how] = append(res[how], s)
	}
	fmt.Printf("| first osworld episode (%s image, 2048 MiB, 2 vCPU, 1920x1080) | runs | median | max |\n|---|---|---|---|\n", image)
	for _, how := range []string{"boot", "saved", "warm"} {
		var eps, warms, calls []time.Duration
		for _, s := range res[how] {
			eps = append(eps, s.episode)
			warms = append(warms, s.warmReady)
			calls = append(calls, s.call)
		}
		row := func(what string, ds []time.Duration) {
			fmt.Printf("| %s: %s | %d | %s | %s |\n", how, what, len(ds), median(ds), slices.Max(ds).Round(time.Millisecond))
		}
		row("pool start to episode", eps)
		if how == "warm" {
			row("pool start to warm VM ready", warms)
			row("the episode's start call, once warm", calls)
		}
	}
	return nil
}

// once starts pools on m with the default config (the osworld pool warm or
// not), leases one osworld episode, and removes every VM afterwards.
func once(ctx context.Context, m *vmm.Manager, log *slog.Logger, image string, warm bool) (sample, error) {
	cfg := pool.DefaultConfig("", 0)
	overrides := []string{"osworld.image=" + image}
	if warm {
		overrides = append(overrides, "osworld.min_warm=1")
	}
	for _, o := range overrides {
		if err := cfg.Override(o); err != nil {
			return sample{}, err
		}
	}
	var s sample
	start := time.Now()
	p, err := pool.New(ctx, m, cfg, pool.Options{StateDir: stateDir, Log: log})
	if err != nil {
		return s, err
	}
	defer func() {
		p.Close()
		vms, _ := m.List(ctx)
		for _, vm := range vms {
			m.Destroy(ctx, vm.ID)
		}
	}()
	if warm {
		for !warmIn(p, pool.OSWorldPoolName) {
			if time.Since(start) > 10*time.Minute {
				return s, fmt.Errorf("no warm osworld VM after 10 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		s.warmReady = time.Since(start)
	}
	call := time.Now()
	ep, err := p.Start(ctx, pool.OSWorldPoolName, 0)
	if err != nil {
		return s, err
	}
	s.episode, s.call = time.Since(start), time.Since(call)
	if warm != ep.Warm {
		return s, fmt.Errorf("episode %s: warm %v, want %v", ep.ID, ep.Warm, warm)
	}
	_, err = p.End(ctx, ep.ID, "bench")
	return s, err
}

func warmIn(p *pool.Manager, name string) bool {
	for _, st := range p.Pools() {
		if st.Name == name {
			return st.Warm > 0
		}
	}
	return false
}

func median(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond).String()
}
