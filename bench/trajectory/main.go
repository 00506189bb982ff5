// Command trajectory measures what recording an episode costs (issue 16),
// side by side in one run on one desktop pool of the real binary: episodes
// alternate recorded and not recorded (off, on, off, on, ...), each the
// same Claude computer_20251124 calls (a left_click at a random point and
// the screenshot it answers with, then a type of a short word), and it
// reports per mode:
//
//   - action latency p50 and p95 as the client sees it;
//
//   - host CPU of the serve process and its ffmpeg children per second of
//     the episode, in % of one core (from /proc, utime+stime);
//
//   - the CPU of a recorded desktop left still for -idle, against one not
//     recorded;
//
//   - bytes per step of the trajectory and per minute of its video.
//
//     go run ./bench/trajectory [-image desktop] [-episodes 4] [-steps 20] [-idle 20s]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmproc"
)

const stateDir = "/var/lib/deskfarm-bench-trajectory"

func main() {
	image := flag.String("image", "desktop", "image of the pool")
	episodes := flag.Int("episodes", 4, "episodes per mode (recorded, not recorded), alternating")
	steps := flag.Int("steps", 20, "calls per episode (clicks and types)")
	idle := flag.Duration("idle", 20*time.Second, "how long a still desktop is measured in each mode")
	flag.Parse()
	if err := run(*image, *episodes, *steps, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "bench/trajectory:", err)
		os.Exit(1)
	}
}

type mode struct {
	name     string
	record   bool
	lat      []time.Duration
	cpu      time.Duration // serve + ffmpeg during the episodes
	wall     time.Duration
	idleCPU  time.Duration
	idleWall time.Duration
	steps    int
	bytes    int64
	video    int64
	videoSec float64
}

func run(image string, episodes, steps int, idle time.Duration) error {
	ctx := context.Background()
	if extra, err := farmproc.Purge(ctx, stateDir); err != nil || len(extra) > 0 {
		fmt.Fprintf(os.Stderr, "removed what an earlier run left in %s: %v %v\n", stateDir, extra, err)
	}
	dir, err := os.MkdirTemp("", "deskfarm-bench-traj-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building deskfarm")
	bin, err := farmproc.Build(ctx, dir)
	if err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	pools := fmt.Sprintf("pools:\n  - name: bench\n    image: %s\n    memory_mib: 1024\n    vcpus: 1\n    min_warm: 1\n    max: 1\n", image)
	farm, err := farmproc.Start(ctx, farmproc.Config{Bin: bin, StateDir: stateDir, Pools: pools, Log: logf})
	if err != nil {
		return err
	}
	defer func() {
		farm.Stop()
		farmproc.Purge(context.Background(), stateDir)
	}()
	c := farm.Client
	if err := waitWarm(ctx, c, 10*time.Minute); err != nil {
		return err
	}
	off := &mode{name: "recording off"}
	on := &mode{name: "recording on", record: true}
	rng := rand.New(rand.NewPCG(1, 2))
	// Warm-up: the desk session and the executors are made on first use.
	if err := episode(ctx, farm, &mode{name: "warm-up"}, 3, 0, rng); err != nil {
		return err
	}
	for i := range 2 * episodes {
		m := off
		if i%2 == 1 {
			m = on
		}
		fmt.Fprintf(os.Stderr, "episode %d/%d (%s)\n", i+1, 2*episodes, m.name)
		idleFor := time.Duration(0)
		if i < 2 {
			idleFor = idle
		}
		if err := episode(ctx, farm, m, steps, idleFor, rng); err != nil {
			return err
		}
	}
	fmt.Printf("`go run ./bench/trajectory -image %s -episodes %d -steps %d -idle %s` (%s)\n\n", image, episodes, steps, idle, time.Now().UTC().Format("2006-01-02 15:04"))
	fmt.Println("| measure | recording off | recording on | on / off |")
	fmt.Println("|---|---|---|---|")
	row := func(name, a, b, r string) { fmt.Printf("| %s | %s | %s | %s |\n", name, a, b, r) }
	ratio := func(a, b time.Duration) string {
		if a == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%+.1f%%", 100*(float64(b)/float64(a)-1))
	}
	row(fmt.Sprintf("action latency p50 (n=%d each)", len(on.lat)), stats.MS(stats.Pct(off.lat, 50)), stats.MS(stats.Pct(on.lat, 50)), ratio(stats.Pct(off.lat, 50), stats.Pct(on.lat, 50)))
	row("action latency p95", stats.MS(stats.Pct(off.lat, 95)), stats.MS(stats.Pct(on.lat, 95)), ratio(stats.Pct(off.lat, 95), stats.Pct(on.lat, 95)))
	pct := func(cpu, wall time.Duration) string {
		if wall == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(cpu)/float64(wall))
	}
	row("host CPU while acting (serve + ffmpeg, % of a core)", pct(off.cpu, off.wall), pct(on.cpu, on.wall),
		fmt.Sprintf("%+.1f points", 100*(float64(on.cpu)/float64(on.wall)-float64(off.cpu)/float64(off.wall))))
	row("host CPU of a still desktop", pct(off.idleCPU, off.idleWall), pct(on.idleCPU, on.idleWall),
		fmt.Sprintf("%+.1f points", 100*(float64(on.idleCPU)/float64(max(on.idleWall, 1))-float64(off.idleCPU)/float64(max(off.idleWall, 1)))))
	if on.steps > 0 {
		row("trajectory bytes per step (screens, jsonl; no video)", "", fmt.Sprintf("%.0f KiB", float64(on.bytes-on.video)/float64(on.steps)/1024), "")
	}
	if on.videoSec > 0 {
		row("video bytes per minute", "", fmt.Sprintf("%.2f MiB", float64(on.video)/(on.videoSec/60)/(1<<20)), "")
	}
	return nil
}

func waitWarm(ctx context.Context, c *client.Client, limit time.Duration) error {
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		ps, err := c.Pools(ctx)
		if err == nil && len(ps) == 1 && ps[0].Warm >= 1 {
			return nil
		}
		time.Sleep(time.Second)
	}
	return errors.New("the pool has no warm VM after " + limit.String())
}

// episode runs steps calls on a fresh episode of m's mode, then idles,
// and adds what it measured to m.
func episode(ctx context.Context, farm *farmproc.Farm, m *mode, steps int, idle time.Duration, rng *rand.Rand) error {
	c := farm.Client
	ep, err := c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "bench", Record: &m.record})
	if err != nil {
		return err
	}
	defer c.EndEpisode(context.Background(), ep.ID)
	cpu0 := treeCPU(farm.PID())
	t0 := time.Now()
	for i := range steps {
		input := map[string]any{"action": "left_click", "coordinate": []int{100 + rng.IntN(800), 100 + rng.IntN(500)}}
		if i%4 == 3 {
			input = map[string]any{"action": "type", "text": "deskfarm "}
		}
		b, _ := json.Marshal(input)
		s := time.Now()
		if _, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20251124", Input: b}); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
		m.lat = append(m.lat, time.Since(s))
	}
	m.wall += time.Since(t0)
	m.cpu += treeCPU(farm.PID()) - cpu0
	if idle > 0 {
		time.Sleep(2 * time.Second) // let the last change settle out of the video
		i0, w0 := treeCPU(farm.PID()), time.Now()
		time.Sleep(idle)
		m.idleCPU += treeCPU(farm.PID()) - i0
		m.idleWall += time.Since(w0)
	}
	if !m.record {
		return nil
	}
	if _, err := c.EndEpisode(ctx, ep.ID); err != nil {
		return err
	}
	var tr api.TrajectoryInfo
	for range 60 { // the recorder finishes after the episode ends
		if err := getJSON(ctx, farm.URL+"/v1/trajectories/"+ep.ID, &tr); err != nil {
			return err
		}
		if tr.State != api.TrajectoryRecording {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	m.steps += tr.Steps
	m.bytes += tr.Bytes
	m.videoSec += tr.VideoSeconds
	if tr.Video != "" {
		resp, err := http.Head(farm.URL + "/v1/trajectories/" + ep.ID + "/files/" + tr.Video)
		if err == nil {
			resp.Body.Close()
			m.video += resp.ContentLength
		}
	}
	return nil
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

// treeCPU is the user+system CPU time of pid and its live children (the
// ffmpeg encoders), from /proc.
func treeCPU(pid int) time.Duration {
	total := procCPU(pid)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid(child) == pid {
			total += procCPU(child)
		}
	}
	return total
}

// stat returns the fields of /proc/pid/stat after the command name.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

func ppid(pid int) int {
	f := stat(pid)
	if len(f) < 2 {
		return -1
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// procCPU is utime+stime; the kernel's clock tick is 100 Hz on Debian.
func procCPU(pid int) time.Duration {
	f := stat(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}
