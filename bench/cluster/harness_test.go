package clusterbench

// The harness: a control plane, node agents on loopback, a single-host
// server, HTTP calls as a user makes them, and an audit of the apiserver's
// watch history of Desktop objects.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/cluster"
	"github.com/deskfarm/deskfarm/internal/kubetest"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/web"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

const (
	ctlToken     = "bench-control-token-0123456789abcdef"
	viewerToken  = "bench-viewer-token-0123456789abcdef"
	clusterToken = "bench-cluster-token-0123456789abcdef"
)

// resetDelay is the p50 of a real reset: docs/benchmarks.md, "deskfarm
// reset (QEMU loadvm + clock set)", 274 ms median of 20 on the desktop
// image (bench/reset, 2026-11-30). Every simulated desktop's reset sleeps
// it, so a desktop comes back free as late as a real one would.
const resetDelay = 274 * time.Millisecond

// slowFarm is the in-memory farm whose resets take resetDelay.
type slowFarm struct{ *vmmtest.Farm }

func (f slowFarm) Reset(ctx context.Context, id string) (vmm.ResetResult, error) {
	t := time.NewTimer(resetDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return vmm.ResetResult{}, ctx.Err()
	}
	return f.Farm.Reset(ctx, id)
}

// node is one in-process node agent: its farm, pool, cluster agent and
// front door.
type node struct {
	name  string
	url   string
	farm  slowFarm
	pools *pool.Manager
	agent *cluster.Agent
	srv   *http.Server
	ln    net.Listener
	done  chan struct{} // the agent's Run returned
}

func newFarm(prefix string) slowFarm {
	f := vmmtest.New()
	f.IDFormat = prefix + "%d"
	f.ExecFn = func(r vmm.ExecRequest) (vmm.ExecResult, error) { return vmm.ExecResult{Stdout: []byte("ok")}, nil }
	return slowFarm{f}
}

func newPools(b *testing.B, farm slowFarm, cfg pool.Config, log *slog.Logger) *pool.Manager {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	p, err := pool.New(context.Background(), farm, cfg, pool.Options{StateDir: b.TempDir(), Log: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// startNode runs an agent as serve's cluster mode builds one
// (cmd/deskfarm/serve.go, clusteragent.go): a pool with no pools until
// the DesktopPools set them, the agent, and a web server on its own
// loopback port, which is its advertise URL.
func startNode(b *testing.B, cp *kubetest.ControlPlane, ns, name string, lease time.Duration, log *slog.Logger) *node {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	n := &node{name: name, url: "http://" + ln.Addr().String(), farm: newFarm(name + "-vm"), ln: ln, done: make(chan struct{})}
	log = log.With("node", name)
	n.pools = newPools(b, n.farm, pool.DefaultConfig("", 0), log)
	n.agent, err = cluster.New(context.Background(), cluster.Options{
		Config: cp.Config, Namespace: ns, Node: name, AdvertiseURL: n.url, ClusterToken: clusterToken,
		LeaseDuration: lease, Local: n.pools, Log: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	go func() { defer close(n.done); _ = n.agent.Run() }()
	n.srv = &http.Server{Handler: web.NewServer(n.farm, web.Options{
		Token: ctlToken, ViewerToken: viewerToken, Logger: log, Pools: n.pools,
		Cluster: n.agent, ClusterToken: clusterToken, AdvertiseURL: n.url,
	}), ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = n.srv.Serve(ln) }()
	b.Cleanup(func() { n.kill() })
	return n
}

// kill is the closest to kill -9 in-process: the agent stops at once
// (Close leaves its Lease and objects as they are), and its front door
// drops every connection. The pool's VMs stay where they are.
func (n *node) kill() {
	n.srv.Close()
	n.agent.Close()
	<-n.done
}

// single is today's single-host server over the same in-memory farm.
func startSingle(b *testing.B, warm int, log *slog.Logger) (string, *pool.Manager) {
	farm := newFarm("single-vm")
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "single", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: warm, Max: warm}}}
	p := newPools(b, farm, cfg, log)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: web.NewServer(farm, web.Options{Token: ctlToken, ViewerToken: viewerToken, Logger: log, Pools: p})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), p
}

// createPool creates a DesktopPool object, as kubectl apply would.
func createPool(b *testing.B, dyn dynamic.Interface, ns, name string, perNode int) {
	p := &cluster.DesktopPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: cluster.GroupVersion.String(), Kind: cluster.KindDesktopPool},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: cluster.DesktopPoolSpec{Image: "tiny", MemoryMiB: 256, VCPUs: 1, WarmPerNode: perNode, MaxPerNode: perNode,
			DefaultTTLSeconds: 600},
	}
	u, err := p.Unstructured()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := dyn.Resource(cluster.DesktopPoolResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		b.Fatalf("create DesktopPool %s: %v", name, err)
	}
}

// The HTTP client of the claimers: one connection pool for all.
var hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 600, MaxConnsPerHost: 0}}

// apiErr is an error answer of the API.
type apiErr struct {
	status int
	code   string
}

func (e *apiErr) Error() string { return fmt.Sprintf("HTTP %d %s", e.status, e.code) }

func codeOf(err error) string {
	var e *apiErr
	if errors.As(err, &e) {
		return e.code
	}
	if err != nil {
		return "transport"
	}
	return ""
}

func call(ctx context.Context, method, url string, in, out any) error {
	var body io.Reader
	if in != nil {
		j, _ := json.Marshal(in)
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+ctlToken)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e api.ErrorResponse
		_ = json.Unmarshal(raw, &e)
		return &apiErr{status: resp.StatusCode, code: e.Error.Code}
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// start is POST /v1/episodes on base, timed.
func start(base, poolName string) (api.Episode, time.Duration, error) {
	var ep api.Episode
	t0 := time.Now()
	err := call(context.Background(), "POST", base+"/v1/episodes", api.StartEpisodeRequest{Pool: poolName}, &ep)
	return ep, time.Since(t0), err
}

// end is DELETE /v1/episodes/{id} on base, timed.
func end(base, id string) (time.Duration, error) {
	t0 := time.Now()
	err := call(context.Background(), "DELETE", base+"/v1/episodes/"+id, nil, nil)
	return time.Since(t0), err
}

// ends counts the ends that base did not find and the owner (ep.URL)
// ended: an agent's Locate missing a live episode (see docs).
var notFoundEnds atomic.Int64

// endAny ends ep through base, and through its owner if base answers
// episode_not_found.
func endAny(base string, ep api.Episode) error {
	_, err := end(base, ep.ID)
	if codeOf(err) == api.CodeEpisodeNotFound && ep.URL != "" && ep.URL != base {
		notFoundEnds.Add(1)
		_, err = end(ep.URL, ep.ID)
	}
	return err
}

// execOn is POST /v1/episodes/{id}/exec on base, timed.
func execOn(base, id string) (time.Duration, error) {
	t0 := time.Now()
	var res api.ExecResponse
	err := call(context.Background(), "POST", base+"/v1/episodes/"+id+"/exec", api.ExecRequest{Argv: []string{"true"}}, &res)
	return time.Since(t0), err
}

// audit follows the apiserver's watch of Desktop objects from before the
// first claim, and checks every event: a desktop leased by one episode is
// never leased by another before it was free again, and an episode is
// never on two desktops. It also counts the writes of each episode (the
// events from its claim until its desktop is free again).
type audit struct {
	mu         sync.Mutex
	desks      map[string]*deskTrack
	epOn       map[string]string // episode -> desktop
	violations []string
	events     int
	reconnects int
	gaps       int // watches that had to relist (410 Gone): history not seen whole
	episodes   []int
	giveBacks  int
	leases     []landing
	// hist is every event of each desktop, for the log of those that
	// were given back (a failed bind) or double held.
	hist  map[string][]string
	odd   map[string]bool
	start time.Time
}

type deskTrack struct {
	node, pool, state string
	leasedBy          string // episode of the open lease ("" once free)
	writes            int
}

// landing is a claim that won a desktop, as the watch saw it.
type landing struct {
	node, episode string
	at            time.Time
}

func startAudit(b *testing.B, ctx context.Context, dyn dynamic.Interface, ns string) *audit {
	a := &audit{desks: map[string]*deskTrack{}, epOn: map[string]string{}, hist: map[string][]string{},
		odd: map[string]bool{}, start: time.Now()}
	res := dyn.Resource(cluster.DesktopResource).Namespace(ns)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range list.Items {
		a.see(watch.Added, &list.Items[i])
	}
	rv := list.GetResourceVersion()
	go func() {
		for ctx.Err() == nil {
			w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					a.gap()
					if l, err := res.List(ctx, metav1.ListOptions{}); err == nil {
						rv = l.GetResourceVersion()
					}
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					if ev.Type == watch.Error {
						if s, ok := ev.Object.(*metav1.Status); ok && s.Code == http.StatusGone {
							a.gap()
							if l, err := res.List(ctx, metav1.ListOptions{}); err == nil {
								rv = l.GetResourceVersion()
							}
						}
					}
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type != watch.Bookmark {
					a.see(ev.Type, u)
				}
			}
			w.Stop()
			a.mu.Lock()
			a.reconnects++
			a.mu.Unlock()
		}
	}()
	return a
}

func (a *audit) gap() {
	a.mu.Lock()
	a.gaps++
	a.mu.Unlock()
}

func (a *audit) see(kind watch.EventType, u *unstructured.Unstructured) {
	d, err := cluster.DesktopFrom(u)
	if err != nil {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events++
	a.hist[d.Name] = append(a.hist[d.Name], fmt.Sprintf("+%.3fs %s rv=%s %s ep=%s by=%s claimedAt=%v",
		now.Sub(a.start).Seconds(), kind, d.ResourceVersion, d.Status.State, d.Status.Episode, d.Status.ClaimedBy, d.Status.ClaimedAt))
	if kind == watch.Deleted {
		delete(a.desks, d.Name)
		return
	}
	t := a.desks[d.Name]
	if t == nil {
		t = &deskTrack{node: d.Spec.Node, pool: d.Spec.Pool}
		a.desks[d.Name] = t
	}
	state, ep := string(d.Status.State), d.Status.Episode
	switch state {
	case "leased":
		if t.leasedBy != "" && t.leasedBy != ep {
			a.violations = append(a.violations, fmt.Sprintf("desktop %s: leased by %s, then by %s without being free between",
				d.Name, t.leasedBy, ep))
			a.odd[d.Name] = true
		}
		if on, ok := a.epOn[ep]; ok && on != d.Name {
			a.violations = append(a.violations, fmt.Sprintf("episode %s on two desktops: %s and %s", ep, on, d.Name))
			a.odd[d.Name], a.odd[on] = true, true
		}
		a.epOn[ep] = d.Name
		if t.leasedBy != ep {
			t.leasedBy, t.writes = ep, 0
			a.leases = append(a.leases, landing{node: d.Spec.Node, episode: ep, at: now})
		}
		t.writes++
	case "free":
		if t.leasedBy != "" {
			t.writes++
			if t.state == "leased" {
				a.giveBacks++ // leased -> free: a claim given back, no episode ran
				a.odd[d.Name] = true
			} else {
				a.episodes = append(a.episodes, t.writes)
			}
		}
		t.leasedBy, t.writes = "", 0
	default:
		if t.leasedBy != "" {
			t.writes++
		}
	}
	t.state = state
}

// counts is the number of desktops of poolName per state ("" pool: all).
func (a *audit) counts(poolName string) map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := map[string]int{}
	for _, t := range a.desks {
		if poolName == "" || t.pool == poolName {
			c[t.state]++
		}
	}
	return c
}

// dump writes the event history of the odd desktops (given back, double
// held) and of the ones not free now to w.
func (a *audit) dump(w io.Writer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for name, t := range a.desks {
		if a.odd[name] || t.state != "free" {
			fmt.Fprintf(w, "desktop %s (now %s):\n  %s\n", name, t.state, strings.Join(a.hist[name], "\n  "))
		}
	}
}

// waitFree waits until want desktops of poolName are free, both in a
// fresh List and in the audit's view (so the watch has caught up); it
// fails the benchmark (not at once: the run goes on) if they are not
// within.
func (a *audit) waitFree(b *testing.B, dyn dynamic.Interface, ns, poolName string, want int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	res := dyn.Resource(cluster.DesktopResource).Namespace(ns)
	for {
		listed := 0
		l, err := res.List(context.Background(), metav1.ListOptions{LabelSelector: cluster.LabelPool + "=" + poolName})
		if err == nil {
			for _, u := range l.Items {
				if u.GetLabels()[cluster.LabelState] == "free" {
					listed++
				}
			}
		}
		c := a.counts(poolName)
		if c["free"] >= want && listed >= want {
			return true
		}
		if time.Now().After(deadline) {
			b.Errorf("pool %s: %v in the watch, %d free listed, after %s, want %d free", poolName, c, listed, within, want)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (a *audit) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.desks)
}

func (a *audit) giveBackCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.giveBacks
}

func (a *audit) landingsSince(node string, since time.Time) []landing {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []landing
	for _, l := range a.leases {
		if l.node == node && !l.at.Before(since) {
			out = append(out, l)
		}
	}
	return out
}

// writesPerEpisode summarizes the episodes that ended since the first
// skip ones: mean and max of their writes.
func (a *audit) writesPerEpisode(skip int) (n int, mean float64, max int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	eps := a.episodes[min(skip, len(a.episodes)):]
	sum := 0
	for _, w := range eps {
		sum += w
	}
	if len(eps) == 0 {
		return 0, 0, 0
	}
	return len(eps), float64(sum) / float64(len(eps)), slices.Max(eps)
}

func (a *audit) episodeCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.episodes)
}

// sumStats adds the agents' counters.
func sumStats(nodes []*node) cluster.Stats {
	var s cluster.Stats
	for _, n := range nodes {
		t := n.agent.Stats()
		s.Claims += t.Claims
		s.Bound += t.Bound
		s.ClaimConflicts += t.ClaimConflicts
		s.Relists += t.Relists
		s.GiveBacks += t.GiveBacks
		s.DesktopWrites += t.DesktopWrites
		s.PublisherWrites += t.PublisherWrites
		s.StatusWrites += t.StatusWrites
		s.LeaseWrites += t.LeaseWrites
		s.Conflicts += t.Conflicts
		s.Retries += t.Retries
	}
	return s
}

// pct is the q-quantile (0..1) of ds, nearest rank.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
