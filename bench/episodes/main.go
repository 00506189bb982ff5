// Command episodes measures episode throughput on one host in one run: a
// scripted 5-action episode on two parallel VMs, served by a deskfarm pool
// (lease a warm VM, act, end = reset to ready) against an OSWorld-docker-style
// loop that boots a fresh VM for every episode and throws it away. It also
// reports the time to a ready VM for a warm hit. It prints a Markdown table.
//
//	go run ./bench/episodes [-image desktop] [-episodes 8] [-boot-episodes 1]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

const workers = 2

// script is the scripted episode: five agent actions.
var script = []string{
	`{"action":"left_click","coordinate":[12,788]}`,
	`{"action":"key","text":"Escape"}`,
	`{"action":"key","text":"ctrl+alt+t"}`,
	`{"action":"type","text":"echo episode > ~/episode.txt\n"}`,
	`{"action":"screenshot"}`,
}

func main() {
	image := flag.String("image", "desktop", "image")
	n := flag.Int("episodes", 8, "pool episodes per worker")
	nb := flag.Int("boot-episodes", 1, "reboot-per-episode episodes per worker")
	flag.Parse()
	if err := run(*image, *n, *nb); err != nil {
		fmt.Fprintln(os.Stderr, "bench/episodes:", err)
		os.Exit(1)
	}
}

func run(image string, n, nb int) error {
	ctx := context.Background()
	const stateDir = farm.DefaultStateDir
	m, log, err := farm.Open(ctx, stateDir)
	if err != nil {
		return err
	}
	defer m.Close()
	os.Remove(stateDir + "/pools.json") // a fresh pool each run
	desks := desk.NewPool(m, log)
	defer desks.Close()
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "bench", Image: image, MinWarm: workers, Max: workers}}}
	cfg.SetDefaults()
	pools, err := pool.New(ctx, m, cfg, pool.Options{StateDir: stateDir, Log: log})
	if err != nil {
		return err
	}
	defer func() {
		pools.Close()
		vms, _ := m.List(ctx)
		for _, v := range vms {
			m.Destroy(ctx, v.ID)
		}
	}()
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Pools: pools, Logger: log}))
	defer srv.Close()

	fmt.Fprintln(os.Stderr, "waiting for 2 warm VMs")
	for warm := 0; warm < workers; {
		time.Sleep(time.Second)
		warm = 0
		for _, p := range pools.Pools() {
			warm += p.Warm
		}
	}

	var mu sync.Mutex
	var starts, ends, episodes []time.Duration
	var firstErr error
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				s, e, total, err := poolEpisode(srv.URL)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				starts, ends, episodes = append(starts, s), append(ends, e), append(episodes, total)
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	poolWall := time.Since(t0)
	if firstErr != nil {
		return firstErr
	}

	// OSWorld's docker provider: a fresh VM per episode, booted, then removed.
	pools.Close()
	vms, _ := m.List(ctx)
	for _, v := range vms {
		desks.Drop(v.ID)
		m.Destroy(ctx, v.ID)
	}
	var bootEpisodes []time.Duration
	t0 = time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < nb; i++ {
				t := time.Now()
				err := bootEpisode(ctx, m, desks, image)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				bootEpisodes = append(bootEpisodes, time.Since(t))
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	bootWall := time.Since(t0)
	if firstErr != nil {
		return firstErr
	}

	perHour := func(count int, wall time.Duration) float64 { return float64(count) / wall.Hours() }
	ours := perHour(len(episodes), poolWall)
	theirs := perHour(len(bootEpisodes), bootWall)
	fmt.Printf("| %s image, %d parallel VMs, 5-action episode | episodes | wall | episodes/hour | episode median | ratio |\n|---|---|---|---|---|---|\n", image, workers)
	fmt.Printf("| deskfarm pool (warm lease, act, reset) | %d | %.0f s | %.0f | %s | %.1fx |\n", len(episodes), poolWall.Seconds(), ours, stats.MS(stats.Pct(episodes, 50)), ours/theirs)
	fmt.Printf("| fresh boot per episode (OSWorld docker style) | %d | %.0f s | %.0f | %s | 1.0x |\n", len(bootEpisodes), bootWall.Seconds(), theirs, stats.MS(stats.Pct(bootEpisodes, 50)))
	fmt.Printf("\n| time to a ready VM | median | p95 |\n|---|---|---|\n")
	fmt.Printf("| episode start on a warm VM (POST /v1/episodes) | %s | %s |\n", stats.MS(stats.Pct(starts, 50)), stats.MS(stats.Pct(starts, 95)))
	fmt.Printf("| episode end (reset to ready, back to the pool) | %s | %s |\n", stats.MS(stats.Pct(ends, 50)), stats.MS(stats.Pct(ends, 95)))
	return nil
}

func post(url string, body any) (map[string]any, error) {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("POST %s: %s: %s", url, resp.Status, out)
	}
	var v map[string]any
	json.Unmarshal(out, &v)
	return v, nil
}

func poolEpisode(base string) (start, end, total time.Duration, err error) {
	t0 := time.Now()
	ep, err := post(base+"/v1/episodes", map[string]any{"pool": "bench", "ttl_s": 600})
	if err != nil {
		return 0, 0, 0, err
	}
	start = time.Since(t0)
	id, _ := ep["id"].(string)
	for _, a := range script {
		if _, err := post(base+"/v1/episodes/"+id+"/actions", map[string]any{"tool": "computer_20251124", "input": json.RawMessage(a)}); err != nil {
			return start, 0, 0, err
		}
	}
	t1 := time.Now()
	req, _ := http.NewRequest("DELETE", base+"/v1/episodes/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return start, 0, 0, err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return start, 0, 0, fmt.Errorf("end episode %s: %s", id, resp.Status)
	}
	return start, time.Since(t1), time.Since(t0), nil
}

func bootEpisode(ctx context.Context, m *vmm.Manager, desks *desk.Pool, image string) error {
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: image, Boot: true})
	if err != nil {
		return err
	}
	defer func() {
		desks.Drop(vm.ID)
		m.Destroy(ctx, vm.ID)
	}()
	d, err := desks.Get(ctx, vm.ID)
	if err != nil {
		return err
	}
	e, err := d.Executor(actionsAuto)
	if err != nil {
		return err
	}
	for _, a := range script {
		acts, err := translate(a)
		if err != nil {
			return err
		}
		if _, err := e.Run(ctx, acts, runDefaults); err != nil {
			return err
		}
	}
	return nil
}
