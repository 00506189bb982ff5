// Command stream measures the browser frame stream (web, GET
// /v1/vms/{id}/stream) on one VM: frames per second each viewer receives
// while the desktop changes, the delay from a framebuffer change reaching
// deskfarm's mirror to the frame that shows it arriving on a viewer's
// websocket, and deskfarm's CPU use, with 1 and with 10 viewers. It prints
// a Markdown table.
//
// The desktop is kept changing by clicks at random points every -interval
// (the tiny guest draws a marker at each), sent on the VM's shared VNC
// connection. The viewers are websocket clients in this process; they read
// frames without decoding them, so the CPU column is the server's (plus
// the input driver, measured alone in the first row).
//
//	go run ./bench/stream [-image tiny] [-state-dir DIR] [-seconds 10] [-interval 20ms]
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/bench/internal/farm"
	"github.com/deskfarm/deskfarm/bench/internal/stats"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

func main() {
	image := flag.String("image", "tiny", "image to measure")
	seconds := flag.Int("seconds", 10, "measuring time per row")
	stateDir := flag.String("state-dir", "/var/lib/deskfarm-bench-stream", "`dir` for the VM (QEMU must reach it: not /tmp)")
	interval := flag.Duration("interval", 20*time.Millisecond, "time between clicks that change the desktop")
	flag.Parse()
	if err := run(*stateDir, *image, time.Duration(*seconds)*time.Second, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "bench/stream:", err)
		os.Exit(1)
	}
}

type row struct {
	viewers      int
	fps          float64 // per viewer, mean
	changes      float64 // damage notifications per second
	p50, p95     time.Duration
	cpu          float64 // % of one core
	kbPerSecView float64
}

func run(stateDir, image string, window, interval time.Duration) error {
	ctx := context.Background()
	m, log, err := farm.Open(ctx, stateDir)
	if err != nil {
		return err
	}
	defer m.Close()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: image, MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		return fmt.Errorf("create %s vm: %w", image, err)
	}
	defer m.Destroy(ctx, vm.ID)
	pool := desk.NewPool(m, log)
	defer pool.Close()
	d, err := pool.Get(ctx, vm.ID)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: web.NewServer(m, web.Options{Desks: pool, Logger: log})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	url := "ws://" + ln.Addr().String() + "/v1/vms/" + vm.ID + "/stream"
	fmt.Fprintf(os.Stderr, "vm %s ready; %v per row, a click every %v\n", vm.ID, window, interval)

	var rows []row
	for _, n := range []int{0, 1, 10} {
		r, err := measure(ctx, d, url, n, window, interval)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	fmt.Printf("Frame stream of one %s VM (%dx%d), %v per row, desktop changed every %v; CPU is deskfarm's process (server + input driver), %% of one core.\n\n",
		image, vm.Width, vm.Height, window, interval)
	fmt.Println("| viewers | changes/s | frames/s per viewer | change→frame p50 | p95 | KB/s per viewer | CPU |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.viewers == 0 {
			fmt.Printf("| 0 (input only) | %.0f | - | - | - | - | %.0f%% |\n", r.changes, r.cpu)
			continue
		}
		fmt.Printf("| %d | %.0f | %.1f | %s | %s | %.0f | %.0f%% |\n", r.viewers, r.changes, r.fps,
			stats.MS(r.p50), stats.MS(r.p95), r.kbPerSecView, r.cpu)
	}
	return nil
}

// measure connects n viewers, changes the desktop for window and collects
// what they received.
func measure(ctx context.Context, d *desk.Desk, url string, n int, window, interval time.Duration) (row, error) {
	type viewer struct {
		arrivals []time.Time
		bytes    int
	}
	vs := make([]*viewer, n)
	conns := make([]*websocket.Conn, n)
	var wg sync.WaitGroup
	for i := range vs {
		c, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			return row{}, fmt.Errorf("viewer %d: dial %s: %w", i, url, err)
		}
		conns[i] = c
		v := &viewer{}
		vs[i] = v
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, b, err := c.ReadMessage()
				if err != nil {
					return
				}
				v.arrivals = append(v.arrivals, time.Now())
				v.bytes += len(b)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // key frames out of the way

	// Damage as the mirror sees it.
	damage, stopDamage := d.Display.Damage()
	var changes []time.Time
	var cmu sync.Mutex
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		for range damage {
			cmu.Lock()
			changes = append(changes, time.Now())
			cmu.Unlock()
		}
	}()

	w, h := d.Display.Size()
	cpu0 := cpuTime()
	start := time.Now()
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	for time.Since(start) < window {
		x, y := 40+rng.IntN(w-80), 40+rng.IntN(h-80)
		if err := d.Display.Pointer(x, y, 1); err != nil {
			return row{}, err
		}
		if err := d.Display.Pointer(x, y, 0); err != nil {
			return row{}, err
		}
		time.Sleep(interval)
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	time.Sleep(300 * time.Millisecond) // the last frames
	stopDamage()
	<-subDone
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()

	r := row{viewers: n, changes: float64(len(changes)) / elapsed.Seconds(), cpu: 100 * cpu.Seconds() / elapsed.Seconds()}
	var delays []time.Duration
	frames, bytes := 0, 0
	for _, v := range vs {
		in := 0
		for _, a := range v.arrivals {
			if !a.Before(start) && a.Before(start.Add(elapsed)) {
				in++
			}
		}
		frames += in
		bytes += v.bytes
		// Each change is shown by the first frame that arrives after it.
		j := 0
		for _, c := range changes {
			for j < len(v.arrivals) && v.arrivals[j].Before(c) {
				j++
			}
			if j == len(v.arrivals) {
				break
			}
			delays = append(delays, v.arrivals[j].Sub(c))
		}
	}
	if n > 0 {
		r.fps = float64(frames) / float64(n) / elapsed.Seconds()
		r.kbPerSecView = float64(bytes) / 1024 / float64(n) / elapsed.Seconds()
		sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
		r.p50, r.p95 = stats.Pct(delays, 50), stats.Pct(delays, 95)
	}
	return r, nil
}

// cpuTime returns this process's user+system CPU time (from /proc).
func cpuTime() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}
