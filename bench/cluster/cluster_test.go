package clusterbench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/internal/kubetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
)

// Sizes of the run: 3 nodes of 330 + 10 desktops (1,020 Desktop objects).
const (
	nodeCount    = 3
	benchPerNode = 330 // pool "bench": exclusivity, local hits, scale
	remotePer    = 10  // pool "remote": node b's are held, so b's claims go elsewhere
	singleWarm   = 60  // the single-host server's pool: enough to outlast resets at a sequential claim rate
	nodeLease    = 3 * time.Second

	exclusivityClaims = 500
	latencyN          = 200
	scaleClaimers     = 100
	scaleClaims       = 1000
	execN             = 30
)

// table collects the printed results.
type table struct {
	rows  [][3]string
	start time.Time
}

// add records a row and prints it at once, so a run cut short still shows
// what it measured.
func (t *table) add(what, value, goal string) {
	t.rows = append(t.rows, [3]string{what, value, goal})
	fmt.Printf("[+%5.1fs] %s: %s\n", time.Since(t.start).Seconds(), what, value)
}

func (t *table) print() {
	fmt.Println("\n| measurement | result | goal |\n|---|---|---|")
	for _, r := range t.rows {
		fmt.Printf("| %s | %s | %s |\n", r[0], r[1], r[2])
	}
	fmt.Println()
}

func dist(ds []time.Duration) string {
	return fmt.Sprintf("p50 %.1f / p95 %.1f / p99 %.1f ms (n=%d)", ms(pct(ds, .5)), ms(pct(ds, .95)), ms(pct(ds, .99)), len(ds))
}

// BenchmarkCluster runs every measurement of issue 15's benchmarks once,
// side by side: see docs/benchmarks.md, "Cluster (issue 15)". Desktops
// are simulated (the in-memory vmm farm, resets taking resetDelay); the
// pools, cluster agents, front doors, kube-apiserver and etcd are real.
func BenchmarkCluster(b *testing.B) {
	logf, err := os.Create("/tmp/deskfarm-bench-cluster.log")
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	log := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Printf("bench/cluster: desktops are SIMULATED (vmmtest in-memory farm, reset sleeps %s = p50 of a real reset);\n"+
		"pool.Manager, cluster.Agent, the web front doors, kube-apiserver and etcd are real, all on 127.0.0.1. Agent log: %s\n",
		resetDelay, logf.Name())
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at start: %s", la)
	}
	t0 := time.Now()
	cp := kubetest.Start(b, kubetest.Options{})
	cp.InstallCRDs(b)
	ns := cp.Namespace(b)
	cfg := *cp.Config
	cfg.QPS, cfg.Burst = 500, 1000
	dyn, err := dynamic.NewForConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aud := startAudit(b, ctx, dyn, ns)
	var nodes []*node
	for i := range nodeCount {
		nodes = append(nodes, startNode(b, cp, ns, string(rune('a'+i)), nodeLease, log))
	}
	createPool(b, dyn, ns, "bench", benchPerNode)
	createPool(b, dyn, ns, "remote", remotePer)
	single, _ := startSingle(b, singleWarm, log)
	if !aud.waitFree(b, dyn, ns, "bench", nodeCount*benchPerNode, 2*time.Minute) ||
		!aud.waitFree(b, dyn, ns, "remote", nodeCount*remotePer, time.Minute) {
		b.FailNow()
	}
	fmt.Printf("control plane, 3 agents and %d free Desktop objects ready in %s\n",
		nodeCount*(benchPerNode+remotePer), time.Since(t0).Round(100*time.Millisecond))
	tab := table{start: t0}
	defer aud.dump(logf)
	tab.add("Desktop objects (3 nodes)", fmt.Sprint(aud.total()), "1,000")
	tab.add("node Lease duration", nodeLease.String(), "")

	b.ResetTimer()
	r := &run{b: b, tab: &tab, aud: aud, nodes: nodes, dyn: dyn, ns: ns}
	r.exclusivity()
	r.latency(single)
	r.scale()
	r.lostNode()
	r.lostControlPlane(cp)
	b.StopTimer()

	tab.add("ends an agent answered episode_not_found for a live episode (ended through its owner instead)",
		fmt.Sprint(notFoundEnds.Load()), "0")
	tab.add("leased -> free with no reset between, in the watch (a give-back, or an owner's publisher writing over a fresh claim)",
		fmt.Sprint(aud.giveBackCount()), "= give-backs in Stats")
	tab.add("give-backs in the agents' Stats (failed binds)", fmt.Sprint(sumStats(nodes).GiveBacks), "")
	aud.mu.Lock()
	viol, events, reconnects, gaps := aud.violations, aud.events, aud.reconnects, aud.gaps
	aud.mu.Unlock()
	tab.add("audit: watch events seen / reconnects / relists (history gaps)", fmt.Sprintf("%d / %d / %d", events, reconnects, gaps), "0 gaps")
	tab.add("audit: double holders (whole run)", fmt.Sprint(len(viol)), "0")
	b.ReportMetric(float64(len(viol)), "double_holders")
	tab.print()
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at end: %s", la)
	}
	fmt.Printf("total %s\n", time.Since(t0).Round(100*time.Millisecond))
	if len(viol) > 0 {
		b.Fatalf("%d double holders in the watch history, first: %s", len(viol), strings.Join(viol[:min(5, len(viol))], "; "))
	}
}

// run is one benchmark run's shared parts.
type run struct {
	b     *testing.B
	tab   *table
	aud   *audit
	nodes []*node
	dyn   dynamic.Interface
	ns    string
}

// locatable claims through owner (a local episode) until other finds
// the episode (GET through other answers), ending those it does not
// find: an owner's publisher may write over a fresh claim (see
// docs/benchmarks.md), and a proxied measurement needs one other agents
// can locate.
func (r *run) locatable(owner, other *node) (api.Episode, int) {
	for try := 1; try <= 10; try++ {
		ep, _, err := start(owner.url, "bench")
		if err != nil || ep.Node != owner.name {
			r.b.Fatalf("episode on %s: %+v %v", owner.name, ep, err)
		}
		time.Sleep(300 * time.Millisecond)
		if err := call(context.Background(), "GET", other.url+"/v1/episodes/"+ep.ID, nil, nil); err == nil {
			return ep, try
		}
		endAny(owner.url, ep)
	}
	r.b.Fatalf("10 episodes on %s, none that %s could locate", owner.name, other.name)
	return api.Episode{}, 0
}

// settle waits until want desktops of poolName are free again.
func (r *run) settle(poolName string, want int) {
	r.aud.waitFree(r.b, r.dyn, r.ns, poolName, want, 40*time.Second)
}

// exclusivity: 500 claims at once through the 3 front doors, spread
// evenly; then all ended and back to free. It also gives the writes per
// episode.
func (r *run) exclusivity() {
	b, tab, aud, nodes := r.b, r.tab, r.aud, r.nodes
	s0, e0 := sumStats(nodes), aud.episodeCount()
	eps := make([]api.Episode, exclusivityClaims)
	lat := make([]time.Duration, exclusivityClaims)
	errs := make([]error, exclusivityClaims)
	var wg sync.WaitGroup
	begin := time.Now()
	for i := range exclusivityClaims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eps[i], lat[i], errs[i] = start(nodes[i%nodeCount].url, "bench")
		}()
	}
	wg.Wait()
	wall := time.Since(begin)
	held := map[string]string{}
	var ok []time.Duration
	failed := map[string]int{}
	for i, ep := range eps {
		if errs[i] != nil {
			failed[codeOf(errs[i])]++
			continue
		}
		ok = append(ok, lat[i])
		key := ep.Node + "/" + ep.VM
		if other, dup := held[key]; dup {
			b.Fatalf("desktop %s answered to episodes %s and %s", key, other, ep.ID)
		}
		held[key] = ep.ID
	}
	sem := make(chan struct{}, 50)
	for i, ep := range eps {
		if errs[i] != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := endAny(nodes[(i+1)%nodeCount].url, ep); err != nil {
				failed["end "+codeOf(err)]++
			}
		}()
	}
	wg.Wait()
	r.settle("bench", nodeCount*benchPerNode)
	s1 := sumStats(nodes)
	n, mean, maxW := aud.writesPerEpisode(e0)
	tab.add(fmt.Sprintf("exclusivity: %d concurrent claims via 3 agents", exclusivityClaims),
		fmt.Sprintf("%d ok in %s, %d distinct desktops, failures %v; %s", len(ok), wall.Round(time.Millisecond), len(held), failed, dist(ok)),
		"no double holder")
	tab.add("exclusivity: claim conflicts (409) / relists / give-backs / publisher retries",
		fmt.Sprintf("%d / %d / %d / %d", s1.ClaimConflicts-s0.ClaimConflicts, s1.Relists-s0.Relists,
			s1.GiveBacks-s0.GiveBacks, s1.Retries-s0.Retries), "")
	perStats := float64(s1.DesktopWrites-s0.DesktopWrites) / float64(max(1, len(ok)))
	tab.add("apiserver Desktop writes per episode (claim+end+free), watch audit",
		fmt.Sprintf("mean %.2f, max %d over %d episodes", mean, maxW, n), "≤ 3")
	tab.add("apiserver Desktop writes per episode, agents' Stats", fmt.Sprintf("%.2f (%d writes / %d episodes; all 409s: %d)",
		perStats, s1.DesktopWrites-s0.DesktopWrites, len(ok), s1.Conflicts-s0.Conflicts), "≤ 3")
	b.ReportMetric(float64(s1.ClaimConflicts-s0.ClaimConflicts), "excl_conflicts")
	b.ReportMetric(mean, "writes/episode")
	b.ReportMetric(perStats, "stats_writes/episode")
}

// sequential claims one episode at a time through base; land says
// whether it landed where it should. Each episode is ended in the
// background right away (an end waits for the reset), as another user's
// would be, so the claims are timed back to back.
func sequential(base, poolName string, n int, land func(api.Episode) bool) (lat []time.Duration, misplaced int, failed map[string]int) {
	failed = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		ep, d, err := start(base, poolName)
		if err != nil {
			mu.Lock()
			failed[codeOf(err)]++
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			continue
		}
		lat = append(lat, d)
		if !land(ep) {
			misplaced++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := endAny(base, ep); err != nil {
				mu.Lock()
				failed["end "+codeOf(err)]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, misplaced, failed
}

// latency: a local hit, a remote claim and the single-host server, N
// sequential claims each.
func (r *run) latency(single string) {
	b, tab, nodes := r.b, r.tab, r.nodes
	a, bn := nodes[0], nodes[1]
	local, mis, failed := sequential(a.url, "bench", latencyN, func(ep api.Episode) bool { return ep.Node == a.name })
	tab.add("claim latency, local hit (via a, on a)", fmt.Sprintf("%s; not local %d, failures %v", dist(local), mis, failed), "p99 ≤ 100 ms")
	r.settle("bench", nodeCount*benchPerNode)
	// Node b's own desktops of pool remote are all held: b's claims go to a or c.
	holdFailed := map[string]int{}
	for held := 0; held < remotePer; {
		ep, _, err := start(bn.url, "remote")
		switch {
		case err != nil:
			holdFailed[codeOf(err)]++
			if len(holdFailed) > 0 && holdFailed[codeOf(err)] > 100 {
				b.Fatalf("hold b's remote desktops: %v", holdFailed)
			}
			time.Sleep(50 * time.Millisecond)
		case ep.Node != bn.name:
			b.Fatalf("hold b's remote desktops: episode on %q, want b (local first)", ep.Node)
		default:
			held++
		}
	}
	tab.add("claims via b of its own 10 free remote desktops, one at a time (holding them)",
		fmt.Sprintf("10 held; failed claims meanwhile %v", holdFailed), "no failure")
	r.settle("remote", 2*remotePer)
	remote, mis, failed := sequential(bn.url, "remote", latencyN, func(ep api.Episode) bool { return ep.Node != bn.name })
	tab.add("claim latency, remote (via b, b's own taken: on a or c, bind over HTTP)",
		fmt.Sprintf("%s; landed on b %d, failures %v", dist(remote), mis, failed), "p99 ≤ 100 ms")
	r.settle("remote", 2*remotePer)
	one, _, failed := sequential(single, "single", latencyN, func(api.Episode) bool { return true })
	tab.add("claim latency, single-host server (no cluster)", fmt.Sprintf("%s; failures %v", dist(one), failed), "")
	tab.add("p99 ratio local / single, remote / single", fmt.Sprintf("%.2fx, %.2fx",
		ms(pct(local, .99))/ms(pct(one, .99)), ms(pct(remote, .99))/ms(pct(one, .99))), "")
	b.ReportMetric(ms(pct(local, .99)), "local_p99_ms")
	b.ReportMetric(ms(pct(remote, .99)), "remote_p99_ms")
	b.ReportMetric(ms(pct(one, .99)), "single_p99_ms")
	b.ReportMetric(ms(pct(remote, .99))/ms(pct(one, .99)), "remote/single_p99")
}

// scale: 100 claimers (spread over the 3 agents), each claiming and ending
// in a loop, until 1,000 claims were made, over the 1,020 objects.
func (r *run) scale() {
	b, tab, aud, nodes := r.b, r.tab, r.aud, r.nodes
	s0 := sumStats(nodes)
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	failed := map[string]int{}
	var wg sync.WaitGroup
	begin := time.Now()
	for j := range scaleClaimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := nodes[j%nodeCount].url
			for next.Add(1) <= scaleClaims {
				ep, d, err := start(base, "bench")
				mu.Lock()
				if err != nil {
					failed[codeOf(err)]++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
				if err == nil {
					if err := endAny(base, ep); err != nil {
						mu.Lock()
						failed["end "+codeOf(err)]++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(begin)
	s1 := sumStats(nodes)
	rate := float64(len(lat)) / wall.Seconds()
	tab.add(fmt.Sprintf("scale: %d claimers, %d claims (each then ended), %d objects", scaleClaimers, scaleClaims, aud.total()),
		fmt.Sprintf("%.0f claims/s (%s wall); claim %s; failures %v; 409s %d", rate, wall.Round(time.Millisecond), dist(lat), failed,
			s1.ClaimConflicts-s0.ClaimConflicts), "")
	b.ReportMetric(rate, "scale_claims/s")
	b.ReportMetric(ms(pct(lat, .99)), "scale_p99_ms")
	r.settle("bench", nodeCount*benchPerNode)
}

// execs times n execs of episode id through base.
func execs(base, id string, n int) (lat []time.Duration, failed map[string]int) {
	failed = map[string]int{}
	for range n {
		d, err := execOn(base, id)
		if err != nil {
			failed[codeOf(err)]++
			continue
		}
		lat = append(lat, d)
	}
	return lat, failed
}

// lostControlPlane: a running episode on a, exec through a (its owner) and
// through b (proxied) before and while the apiserver is stopped; a new
// claim while it is down; the time until claims work after it returns.
func (r *run) lostControlPlane(cp *kubetest.ControlPlane) {
	b, tab, nodes := r.b, r.tab, r.nodes
	a, bn := nodes[0], nodes[1]
	ep, tries := r.locatable(a, bn)
	tab.add("claims via a until b could locate the episode (the others ended)", fmt.Sprint(tries), "1")
	row := func(when string) {
		for _, via := range []*node{a, bn} {
			lat, failed := execs(via.url, ep.ID, execN)
			how := "owner"
			if via != a {
				how = "proxied"
			}
			tab.add(fmt.Sprintf("exec via %s (%s), %s", via.name, how, when), fmt.Sprintf("%s; failures %v", dist(lat), failed), "keeps answering")
		}
	}
	row("apiserver up")
	// While the apiserver stops: every 100 ms, is it answering, and does
	// an exec through b (proxied) answer?
	type sample struct {
		at        time.Duration
		api       bool
		proxyCode string
	}
	var samples []sample
	sampling := make(chan struct{})
	sampled := make(chan struct{})
	begin := time.Now()
	go func() {
		defer close(sampled)
		probe := r.dyn.Resource(cluster.DesktopPoolResource).Namespace(r.ns)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, aerr := probe.List(pctx, metav1.ListOptions{Limit: 1})
			cancel()
			_, perr := execOn(bn.url, ep.ID)
			samples = append(samples, sample{at: time.Since(begin), api: aerr == nil, proxyCode: codeOf(perr)})
		}
	}()
	cp.StopAPIServer(b)
	stopped := time.Now()
	stopTook := stopped.Sub(begin)
	restarted := false
	defer func() {
		if !restarted {
			cp.StartAPIServer(b)
		}
	}()
	time.Sleep(500 * time.Millisecond)
	close(sampling)
	<-sampled
	lastAPI, firstLost := time.Duration(-1), time.Duration(-1)
	for _, x := range samples {
		if x.api {
			lastAPI = x.at
		}
		if x.proxyCode != "" && firstLost < 0 {
			firstLost = x.at
		}
	}
	tab.add("apiserver stop: StopAPIServer took / apiserver last answered at / first failed proxied exec via b at (100 ms samples)",
		fmt.Sprintf("%s / +%s / +%s (node Lease %s)", stopTook.Round(100*time.Millisecond), lastAPI.Round(100*time.Millisecond),
			firstLost.Round(100*time.Millisecond), nodeLease), "proxied calls go on")
	row("apiserver down, after StopAPIServer returned")
	for _, via := range []*node{bn, a} {
		_, d, err := start(via.url, "bench")
		tab.add(fmt.Sprintf("new claim via %s, apiserver down", via.name), fmt.Sprintf("%s after %.1f ms", codeOf(err), ms(d)),
			"fails at once, cluster_unavailable")
		if via == bn {
			b.ReportMetric(ms(d), "cp_down_claim_fail_ms")
		}
	}
	if w := time.Until(stopped.Add(nodeLease + time.Second)); w > 0 {
		time.Sleep(w)
	}
	row(fmt.Sprintf("apiserver down > one Lease (%s)", nodeLease))
	down := time.Since(stopped)
	t0 := time.Now()
	cp.StartAPIServer(b)
	restarted = true
	ready := time.Since(t0)
	t1 := time.Now()
	fails := map[string]int{}
	var back time.Duration
	for time.Since(t1) < time.Minute {
		e, _, err := start(bn.url, "bench")
		if err == nil {
			back = time.Since(t1)
			endAny(bn.url, e)
			break
		}
		fails[codeOf(err)]++
		time.Sleep(50 * time.Millisecond)
	}
	tab.add("apiserver restart: until /readyz, then until a claim via b succeeds",
		fmt.Sprintf("%s, then %s (failed meanwhile: %v; outage %s)", ready.Round(time.Millisecond), back.Round(time.Millisecond), fails,
			down.Round(100*time.Millisecond)), "converges without restart")
	b.ReportMetric(ms(back), "cp_back_claim_ms")
	if err := endAny(a.url, ep); err != nil {
		tab.add("end the outage's episode via a", codeOf(err), "")
	}
}

// lostNode: b claims continuously (its own remote desktops are held, so
// its claims land on a or c); c is killed; the watch shows when the last
// claim landed on c.
func (r *run) lostNode() {
	b, tab, aud, nodes := r.b, r.tab, r.aud, r.nodes
	a, bn, c := nodes[0], nodes[1], nodes[2]
	onC, tries := r.locatable(c, a)
	tab.add("claims via c until a could locate the episode (the others ended)", fmt.Sprint(tries), "1")
	type result struct {
		at   time.Time
		node string
		code string
		d    time.Duration
	}
	var mu sync.Mutex
	var res []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ep, d, err := start(bn.url, "remote")
				mu.Lock()
				res = append(res, result{at: time.Now(), node: ep.Node, code: codeOf(err), d: d})
				mu.Unlock()
				if err == nil {
					endAny(bn.url, ep)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	killed := time.Now()
	c.kill()
	time.Sleep(nodeLease + 2*time.Second)
	close(stop)
	wg.Wait()
	_, gerr := func() (api.Episode, error) {
		var ep api.Episode
		return ep, call(context.Background(), "GET", a.url+"/v1/episodes/"+onC.ID, nil, &ep)
	}()

	var beforeC, afterOK, afterC int
	var lastErr time.Time
	var during []time.Duration
	errs := map[string]int{}
	for _, r := range res {
		if r.at.Before(killed) {
			if r.node == c.name {
				beforeC++
			}
			continue
		}
		during = append(during, r.d)
		if r.code != "" {
			errs[r.code]++
			lastErr = r.at
			continue
		}
		afterOK++
		if r.node == c.name {
			afterC++
		}
	}
	lands := aud.landingsSince(c.name, killed)
	last := time.Duration(0)
	late := 0
	for _, l := range lands {
		last = max(last, l.at.Sub(killed))
		if l.at.Sub(killed) > nodeLease {
			late++
		}
	}
	lastErrAt := "none"
	if !lastErr.IsZero() {
		lastErrAt = lastErr.Sub(killed).Round(time.Millisecond).String()
	}
	tab.add("lost node: c killed (agent closed, front door dropped) while b claims in a loop (2 claimers)",
		fmt.Sprintf("before: %d of %d claims on c; after: %d ok (%d answered on c), errors %v, last error at +%s; claim %s",
			beforeC, len(res)-len(during), afterOK, afterC, errs, lastErrAt, dist(during)), "")
	tab.add("lost node: claims written onto c's desktops after the kill (watch)",
		fmt.Sprintf("%d, the last at +%s; after one Lease (%s): %d", len(lands), last.Round(time.Millisecond), nodeLease, late),
		"none after one Lease")
	tab.add("lost node: c's running episode via a, after one Lease", fmt.Sprintf("%s", codeOf(gerr)), "node_lost (410)")
	b.ReportMetric(ms(last), "lostnode_last_landing_ms")
	if late > 0 {
		b.Errorf("%d claims landed on lost node c more than one Lease (%s) after its kill", late, nodeLease)
	}
}
