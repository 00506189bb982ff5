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
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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

// episode leases a VM, sends n random requests and ends the episode.
func episode(ctx context.Context, c *client.Client, base string, o options, r *rand.Rand, fig *figures, n int) {
	var ep api.Episode
	var asked time.Time
	for {
		asked = time.Now()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		var err error
		ep, err = c.StartEpisode(sctx, api.StartEpisodeRequest{Pool: o.pool, TTLS: 600})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if api.IsCode(err, api.CodePoolFull) || api.IsCode(err, api.CodeHostFull) {
			time.Sleep(time.Second)
			continue
		}
		fig.mu.Lock()
		fig.startErrs++
		fig.mu.Unlock()
		fig.unexpectedf(o.verbose, "start episode: %v", err)
		time.Sleep(2 * time.Second)
		return
	}
	fig.mu.Lock()
	fig.episodes++
	fig.mu.Unlock()

	// A lease starts from the ready state (issue 9: a dirty warm VM is
	// reset before it is leased again): no marker that another episode's
	// "exec on another VM" wrote and saw answered before this lease was
	// asked for is in the guest. (A marker whose write answered later may
	// have landed legitimately, on this lease.)
	res, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"sh", "-c", "cat " + dirtyMarker + " 2>/dev/null; true"}, TimeoutS: 30})
	var stale []string
	for _, tok := range strings.Fields(res.Stdout) {
		if at, ok := markers.answered(tok); ok && at.Before(asked) {
			stale = append(stale, tok)
		}
	}
	if err != nil {
		fig.unexpectedf(o.verbose, "marker check on episode %s (VM %s): %v", ep.ID, ep.VM, err)
	}
	if len(stale) > 0 || !ep.CleanStart {
		fig.mu.Lock()
		fig.dirty++
		fig.mu.Unlock()
		fig.unexpectedf(o.verbose, "episode %s (VM %s) started dirty: clean_start %v, markers written before the lease %v", ep.ID, ep.VM, ep.CleanStart, stale)
	}

	lost := false
	mine := 0 // this episode's unexpected answers
	for range n {
		o1 := ops[r.IntN(len(ops))]
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := o1.run(rctx, c, base, ep, r)
		cancel()
		code := errCode(err)
		fig.mu.Lock()
		fig.requests++
		if o1.invalid {
			fig.invalid++
		}
		if err != nil {
			fig.byCode[code]++
		}
		fig.mu.Unlock()
		switch {
		case code == api.CodeEpisodeNotFound || code == api.CodeEpisodeEnded:
			lost = true
			mine++
			fig.unexpectedf(o.verbose, "%s on episode %s (VM %s): the lease is gone: %v", o1.name, ep.ID, ep.VM, err)
		case !o1.accepts(err):
			mine++
			fig.unexpectedf(o.verbose, "%s on episode %s (VM %s): %v", o1.name, ep.ID, ep.VM, err)
		}
		if lost || ctx.Err() != nil {
			break
		}
	}
	// A check mid-life: the farm still lists the lease as ours.
	if !lost {
		if got, err := c.GetEpisode(ctx, ep.ID); err != nil || got.State != api.EpisodeActive || got.VM != ep.VM {
			lost = true
			fig.unexpectedf(o.verbose, "episode %s before its end: state %q VM %q (want active on %s): %v", ep.ID, got.State, got.VM, ep.VM, err)
		}
	}
	ectx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	end, err := c.EndEpisode(ectx, ep.ID)
	fig.mu.Lock()
	defer fig.mu.Unlock()
	switch {
	case err != nil:
		lost = true
		if len(fig.samples) < 8 {
			fig.samples = append(fig.samples, fmt.Sprintf("end episode %s: %v", ep.ID, err))
		}
		fig.unexpected++
	case end.VMReplaced:
		fig.replaced++
	case mine == 0 && !lost:
		fig.clean++
	}
	if lost {
		fig.lost++
	}
}

func errCode(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*api.Error](err); ok {
		return e.Code
	}
	return "transport"
}

// op is one kind of request an episode sends.
type op struct {
	name    string
	invalid bool
	// codes the op accepts as its answer besides success; nil: only success.
	codes []string
	// mustFail: success is unexpected.
	mustFail bool
	run      func(ctx context.Context, c *client.Client, base string, ep api.Episode, r *rand.Rand) error
}

func (o op) accepts(err error) bool {
	if err == nil {
		return !o.mustFail
	}
	return slices.Contains(o.codes, errCode(err))
}

// dirtyMarker is the file "exec on another VM" appends a token to; no
// lease may start with a token whose write was answered before it.
const dirtyMarker = "/tmp/soak-dirty"

// markers records when each marker write was answered.
var markers = markerLog{at: map[string]time.Time{}}

type markerLog struct {
	mu sync.Mutex
	n  int
	at map[string]time.Time
}

func (m *markerLog) next() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	return fmt.Sprintf("m%d", m.n)
}

func (m *markerLog) done(tok string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at[tok] = time.Now()
}

func (m *markerLog) answered(tok string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.at[tok]
	return t, ok
}

// Screen coordinates in the agent's space: the pool's screenshot size
// "auto" of a 1280x800 guest is 1280x800 (WXGA).
const screenW, screenH = 1280, 800

func act(action string) func(context.Context, *client.Client, string, api.Episode, *rand.Rand) error {
	return func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Action: json.RawMessage(action), RunOptions: api.RunOptions{Screenshot: api.ScreenshotNever}})
		return err
	}
}

var ops = []op{
	{name: "click", run: func(ctx context.Context, c *client.Client, b string, ep api.Episode, r *rand.Rand) error {
		return act(fmt.Sprintf(`{"kind":"click","x":%d,"y":%d}`, r.IntN(screenW), r.IntN(screenH)))(ctx, c, b, ep, r)
	}},
	{name: "move+screenshot", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Action: json.RawMessage(fmt.Sprintf(`{"kind":"move","x":%d,"y":%d}`, r.IntN(screenW), r.IntN(screenH)))})
		return err
	}},
	{name: "type", run: act(`{"kind":"type","text":"soak test 123\n"}`)},
	{name: "key chord", run: act(`{"kind":"key","keys":["ctrl+a"]}`)},
	{name: "scroll", run: act(`{"kind":"scroll","x":640,"y":400,"direction":"down","amount":3}`)},
	{name: "action list", run: act(`{"kind":"wait","duration_ms":50}`)},
	{name: "claude click", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		in := fmt.Sprintf(`{"action":"left_click","coordinate":[%d,%d]}`, r.IntN(screenW), r.IntN(screenH))
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20251124", Input: json.RawMessage(in)})
		return err
	}},
	{name: "claude screenshot", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
		_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20250124", Input: json.RawMessage(`{"action":"screenshot"}`)})
		return err
	}},
	{name: "screenshot route", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
		_, err := c.Screenshot(ctx, client.Episode(ep.ID), api.ScreenshotOptions{Format: api.FormatJPEG}, io.Discard)
		return err
	}},
	{name: "exec echo", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		want := fmt.Sprint(r.Uint32())
		res, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"echo", want}, TimeoutS: 30})
		if err == nil && (res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != want) {
			return fmt.Errorf("exec echo %s: exit %d, stdout %q", want, res.ExitCode, res.Stdout)
		}
		return err
	}},
	{name: "file write+read", run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
		b := make([]byte, 1+r.IntN(64<<10))
		crand.Read(b)
		path := fmt.Sprintf("/tmp/soak-%d", r.IntN(4))
		if err := c.WriteFile(ctx, client.Episode(ep.ID), path, bytes.NewReader(b), int64(len(b)), 0o600); err != nil {
			return err
		}
		var got bytes.Buffer
		if _, err := c.ReadFile(ctx, client.Episode(ep.ID), path, &got); err != nil {
			return err
		}
		if !bytes.Equal(got.Bytes(), b) {
			return fmt.Errorf("read back %s: %d bytes differ from the %d written", path, got.Len(), len(b))
		}
		return nil
	}},

	// Invalid on purpose: each must be refused with its code, and leave
	// the episode usable.
	{name: "exec on another VM", invalid: true, codes: []string{api.CodeNotLeased},
		// Another worker's leased VM takes it (a client may drive any
		// lease); a warm VM must refuse it with not_leased, and if it did
		// not, the next lease of that VM finds the marker.
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
			vms, err := c.ListVMs(ctx)
			if err != nil {
				return err
			}
			vms = slices.DeleteFunc(vms, func(v api.VM) bool { return v.ID == ep.VM })
			if len(vms) == 0 {
				return nil
			}
			v := vms[r.IntN(len(vms))]
			tok := markers.next()
			_, err = c.Exec(ctx, client.VM(v.ID), api.ExecRequest{Argv: []string{"sh", "-c", "echo " + tok + " >> " + dirtyMarker}, TimeoutS: 30})
			if err == nil {
				markers.done(tok)
			}
			if api.IsCode(err, api.CodeNotRunning) || api.IsCode(err, api.CodeNotFound) {
				return nil // booting, or ended and replaced in between
			}
			return err
		}},
	{name: "malformed JSON", invalid: true, mustFail: true, codes: []string{api.CodeBadJSON, api.CodeInvalidRequest},
		run: func(ctx context.Context, _ *client.Client, base string, ep api.Episode, r *rand.Rand) error {
			bodies := []string{`{"action":`, `[1,2`, `{"kind":"click","x":"ten"}`, "\x00\xff", `{"tool":"computer_20251124","input":{"action":`}
			return rawPost(ctx, base+"/v1/episodes/"+ep.ID+"/actions", bodies[r.IntN(len(bodies))])
		}},
	{name: "out-of-bounds click", invalid: true, mustFail: true, codes: []string{api.CodeOutOfBounds, api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, b string, ep api.Episode, r *rand.Rand) error {
			return act(fmt.Sprintf(`{"kind":"click","x":%d,"y":%d}`, screenW+r.IntN(5000), r.IntN(screenH)))(ctx, c, b, ep, r)
		}},
	{name: "claude out-of-bounds", invalid: true, mustFail: true, codes: []string{api.CodeOutOfBounds, api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, r *rand.Rand) error {
			_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_20251124", Input: json.RawMessage(`{"action":"left_click","coordinate":[99999,-5]}`)})
			return err
		}},
	{name: "unknown key", invalid: true, mustFail: true, codes: []string{api.CodeUnknownKey, api.CodeInvalidRequest},
		run: act(`{"kind":"key","keys":["NoSuchKey"]}`)},
	{name: "unknown kind", invalid: true, mustFail: true, codes: []string{api.CodeUnsupportedAction, api.CodeInvalidRequest},
		run: act(`{"kind":"teleport","x":1,"y":1}`)},
	{name: "unknown tool", invalid: true, mustFail: true, codes: []string{api.CodeUnsupportedAction, api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Tool: "computer_19990101", Input: json.RawMessage(`{"action":"screenshot"}`)})
			return err
		}},
	{name: "exec timeout", invalid: true, mustFail: true, codes: []string{api.CodeTimeout},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"sleep", "30"}, TimeoutS: 1})
			return err
		}},
	{name: "exec missing program", invalid: true, codes: []string{api.CodeAgentError},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			res, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{Argv: []string{"/no/such/program"}, TimeoutS: 10})
			if err == nil && res.ExitCode == 0 {
				return errors.New("exec of a missing program exited 0")
			}
			return err
		}},
	{name: "exec without argv", invalid: true, mustFail: true, codes: []string{api.CodeInvalidRequest},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.Exec(ctx, client.Episode(ep.ID), api.ExecRequest{})
			return err
		}},
	{name: "read missing file", invalid: true, mustFail: true, codes: []string{api.CodeAgentError, api.CodeNotFound},
		run: func(ctx context.Context, c *client.Client, _ string, ep api.Episode, _ *rand.Rand) error {
			_, err := c.ReadFile(ctx, client.Episode(ep.ID), "/no/such/file", io.Discard)
			return err
		}},
}

// rawPost sends body as JSON without encoding it: the client refuses to
// send what is not JSON.
func rawPost(ctx context.Context, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if t := os.Getenv(client.EnvToken); t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	var er api.ErrorResponse
	if json.Unmarshal(b, &er) == nil && er.Error.Code != "" {
		return &api.Error{Status: resp.StatusCode, ErrorBody: er.Error}
	}
	return &api.Error{Status: resp.StatusCode, ErrorBody: api.ErrorBody{Code: fmt.Sprintf("http_%d", resp.StatusCode), Message: string(b)}}
}
