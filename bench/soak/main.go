// Command soak runs parallel episodes against a deskfarm for a set time,
// each a random mix of valid and invalid requests (neutral actions, Claude
// tool calls, exec, file writes and reads, malformed JSON, out-of-bounds
// coordinates, unknown keys and kinds, commands that time out), then
// counts what the farm lost or leaked: leases, libvirt domains, overlays
// (VM directories), fds and goroutines of the serve process, and its RSS
// growth. It prints a Markdown table and exits 1 if anything was lost or
// leaked (issue 9: the goal is zero of each).
//
// By default it builds and serves its own farm (the real binary, like the
// fault tests: internal/farmproc) with a pool "soak" of tiny VMs on
// /var/lib/deskfarm-soak, and removes it at the end:
//
//	go run ./bench/soak [-duration 20m] [-parallel 2] [-image tiny]
//
// Against a farm already serving, give its URL, pool, pid and state dir
// (for fds, RSS, domains and overlays):
//
//	go run ./bench/soak -server http://127.0.0.1:8080 -pool desktop -pid PID -state-dir /var/lib/deskfarm
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmproc"
	"github.com/deskfarm/deskfarm/vmm"
)

// DefaultStateDir is the soak farm's own state dir (QEMU must reach it, so
// not /tmp); scripts/check-leftovers.sh checks it.
const DefaultStateDir = "/var/lib/deskfarm-soak"

// Leak tolerances: the baseline is taken after a warm-up round of
// episodes, the end figure once the pool is back to the same warm VMs, so
// anything the farm holds per VM or per request should be back where it
// was. A few fds or goroutines of in-between work (an HTTP keep-alive, a
// timer) are noise, not a leak.
const (
	fdSlack        = 4
	goroutineSlack = 10
)

type options struct {
	duration time.Duration
	parallel int
	server   string
	pool     string
	pid      int
	stateDir string
	image    string
	memory   int
	seed     uint64
	verbose  bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 20*time.Minute, "how long to run episodes (CI: 2m)")
	flag.IntVar(&o.parallel, "parallel", 2, "episodes at once")
	flag.StringVar(&o.server, "server", "", "a serving farm's URL; empty: build and serve one")
	flag.StringVar(&o.pool, "pool", "soak", "pool to lease from")
	flag.IntVar(&o.pid, "pid", 0, "with -server: the serve process, for fds and RSS")
	flag.StringVar(&o.stateDir, "state-dir", DefaultStateDir, "the farm's state dir, for domains and overlays")
	flag.StringVar(&o.image, "image", "tiny", "image of the pool of a farm soak serves")
	flag.IntVar(&o.memory, "memory-mib", 320, "memory of each VM of a farm soak serves")
	flag.Uint64Var(&o.seed, "seed", 0, "random seed; 0: from the clock (printed)")
	flag.BoolVar(&o.verbose, "v", false, "log every unexpected answer")
	flag.Parse()
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	ok, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/soak:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// figures is what the run counts.
type figures struct {
	mu          sync.Mutex
	episodes    int            // started
	clean       int            // ended with a reset, no lost lease, nothing unexpected
	replaced    int            // ended, but the VM was replaced
	lost        int            // leases that vanished or could not be ended
	dirty       int            // leases that did not start from the ready state
	startErrs   int            // starts refused for other reasons than a full pool
	requests    int            // requests sent in episodes
	invalid     int            // of which deliberately invalid
	unexpected  int            // answers other than the op expects
	byCode      map[string]int // error codes of the answers, invalid or not
	samples     []string       // a few unexpected answers
	startedIDs  []string
	unendedIDs  []string
	warmupDone  time.Time
	lastFinish  time.Time
	firstCancel error
}

func (f *figures) unexpectedf(verbose bool, format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unexpected++
	msg := fmt.Sprintf(format, args...)
	if len(f.samples) < 8 {
		f.samples = append(f.samples, msg)
	}
	if verbose {
		fmt.Fprintln(os.Stderr, "unexpected:", msg)
	}
}

// sample is one reading of what the serve process holds.
type sample struct {
	proc       farmproc.Proc
	goroutines int
	heapMiB    float64 // go_memstats_heap_inuse_bytes: Go's share of RSS
	vms        int
}

func run(o options) (ok bool, err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var farm *farmproc.Farm
	c, pid := (*client.Client)(nil), o.pid
	if o.server == "" {
		if o.stateDir == "/var/lib/deskfarm" {
			return false, errors.New("refusing to serve a soak farm on a user's /var/lib/deskfarm; give -state-dir")
		}
		if extra, err := farmproc.Purge(ctx, o.stateDir); err != nil || len(extra) > 0 {
			fmt.Fprintf(os.Stderr, "removed what an earlier run left in %s: %v %v\n", o.stateDir, extra, err)
		}
		os.Remove(o.stateDir + "/pools.json")
		dir, err := os.MkdirTemp("", "deskfarm-soak-")
		if err != nil {
			return false, err
		}
		defer func() {
			if ok {
				os.RemoveAll(dir)
			} else {
				fmt.Fprintf(os.Stderr, "the server's log is kept in %s/serve.log\n", dir)
			}
		}()
		fmt.Fprintln(os.Stderr, "building deskfarm")
		bin, err := farmproc.Build(ctx, dir)
		if err != nil {
			return false, err
		}
		logf, err := os.Create(dir + "/serve.log")
		if err != nil {
			return false, err
		}
		defer logf.Close()
		pools := fmt.Sprintf("pools:\n  - name: %s\n    image: %s\n    memory_mib: %d\n    vcpus: 1\n    min_warm: %d\n    max: %d\n",
			o.pool, o.image, o.memory, o.parallel, o.parallel+1)
		farm, err = farmproc.Start(ctx, farmproc.Config{Bin: bin, StateDir: o.stateDir, Pools: pools, Log: logf})
		if err != nil {
			return false, err
		}
		defer func() {
			if !ok {
				if b, err := os.ReadFile(dir + "/serve.log"); err == nil {
					lines := strings.Split(string(b), "\n")
					fmt.Fprintf(os.Stderr, "last lines of the server's log:\n%s\n", strings.Join(lines[max(0, len(lines)-40):], "\n"))
				}
			}
		}()
		c, pid = farm.Client, farm.PID()
		fmt.Fprintf(os.Stderr, "serving on %s (pid %d), state dir %s\n", farm.URL, pid, o.stateDir)
	} else {
		c, err = client.New(o.server, client.WithToken(os.Getenv(client.EnvToken)))
		if err != nil {
			return false, err
		}
	}
	base := c.Server()

	minWarm, err := waitSettled(ctx, c, o.pool, 5*time.Minute)
	if err != nil {
		return false, err
	}
	fig := &figures{byCode: map[string]int{}}
	rng := rand.New(rand.NewPCG(o.seed, o.seed^0x5eed))
	fmt.Fprintf(os.Stderr, "pool %s: %d warm; warm-up round of %d episodes (seed %d)\n", o.pool, minWarm, o.parallel, o.seed)

	// Warm-up: one short episode per worker, so what the farm creates once
	// per VM on first use (its desk session) is in the baseline.
	var wg sync.WaitGroup
	for w := range o.parallel {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(o.seed+uint64(w)+1, 1))
			episode(ctx, c, base, o, r, fig, 3)
		})
	}
	wg.Wait()
	if _, err := waitSettled(ctx, c, o.pool, 5*time.Minute); err != nil {
		return false, err
	}
	before, err := measure(ctx, c, base, pid)
	if err != nil {
		return false, err
	}
	rssStart := before.proc.RSSKiB
	*fig = figures{byCode: map[string]int{}}

	fmt.Fprintf(os.Stderr, "soaking for %s with %d parallel episodes\n", o.duration, o.parallel)
	t0 := time.Now()
	deadline := t0.Add(o.duration)
	for w := range o.parallel {
		seed := rng.Uint64()
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(deadline) && ctx.Err() == nil {
				episode(ctx, c, base, o, r, fig, 4+r.IntN(12))
			}
		})
	}
	go func() {
		for time.Since(t0) < o.duration && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
				fig.mu.Lock()
				fmt.Fprintf(os.Stderr, "%s: %d episodes, %d requests, %d unexpected, %d lost\n",
					time.Since(t0).Round(time.Second), fig.episodes, fig.requests, fig.unexpected, fig.lost)
				fig.mu.Unlock()
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(t0)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}

	// Every episode soak started was ended; the farm must list none.
	eps, err := c.ListEpisodes(ctx)
	if err != nil {
		return false, err
	}
	for _, e := range eps {
		if e.Pool == o.pool && e.State != api.EpisodeEnded {
			fig.lost++
			fig.unendedIDs = append(fig.unendedIDs, e.ID)
		}
	}
	if _, err := waitSettled(ctx, c, o.pool, 5*time.Minute); err != nil {
		return false, err
	}
	// The lowest of a few readings: a request in flight (a metrics scrape,
	// a pool check) holds an fd or goroutine for a moment.
	after, err := measure(ctx, c, base, pid)
	if err != nil {
		return false, err
	}
	for range 4 {
		time.Sleep(2 * time.Second)
		s, err := measure(ctx, c, base, pid)
		if err != nil {
			return false, err
		}
		if s.proc.FDs < after.proc.FDs || (s.proc.FDs == after.proc.FDs && s.goroutines < after.goroutines) {
			rss := after.proc.RSSKiB
			after = s
			after.proc.RSSKiB = max(rss, s.proc.RSSKiB)
		}
	}

	// Domains and overlays the farm does not list.
	vms, err := c.ListVMs(ctx)
	if err != nil {
		return false, err
	}
	known := map[string]bool{}
	for _, v := range vms {
		known[v.ID], known[v.Domain] = true, true
	}
	var leakedDoms, leakedDirs, standbys []string
	doms, err := farmproc.Domains(o.stateDir)
	if err != nil {
		return false, err
	}
	paused, err := farmproc.PausedDomains(o.stateDir)
	if err != nil {
		return false, err
	}
	for _, d := range doms {
		switch {
		case known[d]:
		case slices.Contains(paused, d) && len(standbys) == 0:
			// The farm's standby for the pool's image and size (serve
			// runs with --standby): one, paused, not listed. A second
			// unlisted domain, or a running one, is a leak.
			standbys = append(standbys, d)
			known[strings.TrimPrefix(d, vmm.DomainPrefix)] = true
		default:
			leakedDoms = append(leakedDoms, d)
		}
	}
	dirs, err := farmproc.VMDirs(o.stateDir)
	if err != nil {
		return false, err
	}
	for _, d := range dirs {
		if !known[d] {
			leakedDirs = append(leakedDirs, d)
		}
	}
	var purged []string
	if farm != nil {
		if err := farm.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		purged, err = farmproc.Purge(context.Background(), o.stateDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "purge:", err)
		}
	}

	fdGrowth := after.proc.FDs - before.proc.FDs
	grGrowth := after.goroutines - before.goroutines
	leakedFDs := 0
	if pid != 0 && fdGrowth > fdSlack {
		leakedFDs = fdGrowth
	}
	leakedGRs := 0
	if grGrowth > goroutineSlack {
		leakedGRs = grGrowth
	}

	w := os.Stdout
	fmt.Fprintf(w, "soak: %s, %d parallel episodes, pool %s (%d warm), seed %d\n\n", elapsed.Round(time.Second), o.parallel, o.pool, minWarm, o.seed)
	fmt.Fprintln(w, "| figure | value |")
	fmt.Fprintln(w, "|---|---|")
	row := func(k string, v any) { fmt.Fprintf(w, "| %s | %v |\n", k, v) }
	row("episodes run", fig.episodes)
	row("episodes ended clean", fig.clean)
	row("episodes ended with the VM replaced", fig.replaced)
	row("episode starts refused (not pool_full)", fig.startErrs)
	row("requests (of which invalid on purpose)", fmt.Sprintf("%d (%d)", fig.requests, fig.invalid))
	row("unexpected answers", fig.unexpected)
	row("**lost leases**", fig.lost)
	row("**dirty leases**", fig.dirty)
	row("standby VMs (made ahead, paused, not listed; at most 1)", len(standbys))
	row("**leaked domains**", len(leakedDoms)+countPrefix(purged, "domain "))
	row("**leaked overlays (VM dirs)**", len(leakedDirs)+countPrefix(purged, "dir "))
	if pid != 0 {
		row("**leaked fds**", fmt.Sprintf("%d (fds %d → %d, %s → %s)", leakedFDs, before.proc.FDs, after.proc.FDs, kinds(before.proc), kinds(after.proc)))
	} else {
		row("**leaked fds**", "n/a (no -pid)")
	}
	row("**leaked goroutines**", fmt.Sprintf("%d (go_goroutines %d → %d)", leakedGRs, before.goroutines, after.goroutines))
	if pid != 0 {
		row("RSS growth", fmt.Sprintf("%+.1f MiB (%.1f → %.1f MiB)", float64(after.proc.RSSKiB-rssStart)/1024, float64(rssStart)/1024, float64(after.proc.RSSKiB)/1024))
	}
	row("Go heap in use", fmt.Sprintf("%.1f → %.1f MiB", before.heapMiB, after.heapMiB))
	row("VMs before → after", fmt.Sprintf("%d → %d", before.vms, after.vms))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "error codes answered: %s\n", codes(fig.byCode))
	for _, s := range fig.samples {
		fmt.Fprintf(w, "unexpected: %s\n", s)
	}
	if len(fig.unendedIDs) > 0 {
		fmt.Fprintf(w, "episodes left active: %v\n", fig.unendedIDs)
	}
	if len(leakedDoms)+len(leakedDirs)+len(purged) > 0 {
		fmt.Fprintf(w, "leaked: domains %v, dirs %v, removed at the end past the farm: %v\n", leakedDoms, leakedDirs, purged)
	}
	bad := fig.lost + fig.dirty + len(leakedDoms) + len(leakedDirs) + len(purged) + leakedFDs + leakedGRs
	return bad == 0, nil
}

func countPrefix(l []string, p string) int {
	n := 0
	for _, s := range l {
		if strings.HasPrefix(s, p) {
			n++
		}
	}
	return n
}

func kinds(p farmproc.Proc) string {
	var ks []string
	for k, n := range p.FDByKind {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

func codes(m map[string]int) string {
	var ks []string
	for k, n := range m {
		ks = append(ks, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// waitSettled waits until the pool boots and ends nothing and holds its
// warm VMs, and returns how many.
func waitSettled(ctx context.Context, c *client.Client, pool string, within time.Duration) (int, error) {
	deadline := time.Now().Add(within)
	var last api.Pool
	for time.Now().Before(deadline) {
		ps, err := c.Pools(ctx)
		if err != nil {
			return 0, err
		}
		i := slices.IndexFunc(ps, func(p api.Pool) bool { return p.Name == pool })
		if i < 0 {
			return 0, fmt.Errorf("the farm has no pool %q", pool)
		}
		last = ps[i]
		if last.Booting == 0 && last.Ending == 0 && last.Leased == 0 && last.Warm >= last.MinWarm {
			return last.Warm, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return 0, fmt.Errorf("pool %s not settled within %s: %+v", pool, within, last)
}

func measure(ctx context.Context, c *client.Client, base string, pid int) (sample, error) {
	var s sample
	var err error
	if pid != 0 {
		if s.proc, err = farmproc.ReadProc(pid); err != nil {
			return s, fmt.Errorf("read /proc of deskfarm %d: %w", pid, err)
		}
	}
	if s.goroutines, err = farmproc.Goroutines(ctx, base); err != nil {
		return s, err
	}
	heap, err := farmproc.Metric(ctx, base, "go_memstats_heap_inuse_bytes")
	if err != nil {
		return s, err
	}
	s.heapMiB = heap / (1 << 20)
	vms, err := c.ListVMs(ctx)
	s.vms = len(vms)
	return s, err
}
