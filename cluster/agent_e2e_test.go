package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var metaList = metav1.ListOptions{}

// TestClaimsNeverDoubleHeldE2E: three agents on one real apiserver, each
// with its own node pool, race 200 claims over 3x8 desktops (claimers on
// every agent, episodes ended as soon as they start, so desktops are
// reclaimed over and over). The apiserver's watch history shows no desktop
// ever passing from one holder to another without a release, every claim
// that succeeded is in that history, and each episode cost at most 3
// writes.
func TestClaimsNeverDoubleHeldE2E(t *testing.T) {
	cp, ns, dyn := controlPlane(t)
	const perNode, claims, workersPerAgent = 8, 200, 4
	au := startAudit(t, dyn, ns)
	createPool(t, dyn, ns, "tiny", DesktopPoolSpec{Image: "tiny", WarmPerNode: perNode, DefaultTTLSeconds: 60})
	agents := map[string]*testAgent{}
	for _, n := range []string{"n1", "n2", "n3"} {
		agents[n] = startAgent(t, cp, ns, n, newMemLocal(5*time.Millisecond, -1), 15*time.Second)
	}
	for _, a := range agents {
		waitFor(t, a.Node()+" sees all desktops free", time.Minute, func() bool { return freeIn(a.Agent, "tiny") == 3*perNode })
	}
	type won struct {
		p    Placement
		by   string
		took time.Duration // the Claim call that won
	}
	var (
		next    atomic.Int64
		mu      sync.Mutex
		results []won
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	for _, a := range agents {
		for range workersPerAgent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= claims {
					p, ep, took, err := claimRetry(ctx, a.Agent, "tiny")
					if err != nil {
						t.Errorf("claim via %s: %v", a.Node(), err)
						return
					}
					if ep.ID != p.Episode || ep.VM != p.VM {
						t.Errorf("claim via %s: episode %s on %s, placement %+v", a.Node(), ep.ID, ep.VM, p)
					}
					// The caller's next call (to this agent) finds it at once,
					// whether or not the watch has brought the claim yet.
					if got, err := a.Locate(p.Episode); err != nil || got.Desktop != p.Desktop {
						t.Errorf("Locate right after the claim via %s: %+v, %v", a.Node(), got, err)
					}
					mu.Lock()
					results = append(results, won{p, a.Node(), took})
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
					if _, err := agents[p.Node].local.End(ctx, p.Episode, pool.ReasonDeleted); err != nil {
						t.Errorf("end %s on %s: %v", p.Episode, p.Node, err)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(results) != claims {
		t.Fatalf("%d claims succeeded, want %d", len(results), claims)
	}
	for _, a := range agents {
		waitFor(t, "every desktop free again", time.Minute, func() bool { return freeIn(a.Agent, "tiny") == 3*perNode })
	}
	au.check(t)
	remote, maxWrites := 0, 0
	for _, r := range results {
		if !au.leasedBy(r.p.Desktop, r.p.Episode) {
			t.Errorf("claim %s of %s is not in the apiserver's history", r.p.Episode, r.p.Desktop)
		}
		if r.p.Node != r.by {
			remote++
		}
		w := au.writesFor(r.p.Desktop, r.p.Episode)
		if w < 1 || w > 3 {
			t.Errorf("episode %s on %s: %d writes, want 1..3", r.p.Episode, r.p.Desktop, w)
		}
		maxWrites = max(maxWrites, w)
	}
	var lat []time.Duration
	for _, r := range results {
		lat = append(lat, r.took)
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	t.Logf("winning Claim calls: p50 %s, p95 %s, p99 %s, max %s", pct(0.5), pct(0.95), pct(0.99), lat[len(lat)-1])
	var conflicts, relists, retries int64
	for _, a := range agents {
		s := a.Stats()
		conflicts += s.ClaimConflicts
		relists += s.Relists
		retries += s.Retries
		if s.Claims != s.Bound {
			t.Errorf("%s: %d claims won, %d bound (give-backs %d)", a.Node(), s.Claims, s.Bound, s.GiveBacks)
		}
	}
	t.Logf("%d claims in %s (%d remote), %d watch events, claim conflicts %d, relists %d, publisher retries %d, max writes/episode %d",
		claims, elapsed.Round(time.Millisecond), remote, len(au.events), conflicts, relists, retries, maxWrites)
}

// TestWritesPerEpisodeE2E: one API episode costs 3 apiserver writes, as
// the apiserver's own watch counts them: the claim, leased -> resetting,
// resetting -> free.
func TestWritesPerEpisodeE2E(t *testing.T) {
	cp, ns, dyn := controlPlane(t)
	au := startAudit(t, dyn, ns)
	createPool(t, dyn, ns, "tiny", DesktopPoolSpec{Image: "tiny", WarmPerNode: 1})
	a := startAgent(t, cp, ns, "n1", newMemLocal(300*time.Millisecond, -1), 15*time.Second)
	waitFor(t, "one free desktop", time.Minute, func() bool { return freeIn(a.Agent, "tiny") == 1 })
	// The cache can show a write before the agent counts it (the watch
	// event may beat Update's return: CI at f843e90 counted the boot's
	// free write inside the episode), so both counts settle first: every
	// write the apiserver saw is one the agent counted, and no other.
	settled := func(what string) int64 {
		var n int64
		waitFor(t, what, 30*time.Second, func() bool {
			n = a.Stats().DesktopWrites
			return n == int64(au.total())
		})
		return n
	}
	before := settled("the agent's write count to match the apiserver's before the episode")
	ctx := context.Background()
	p, _, err := a.Claim(ctx, "tiny", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Local || p.Node != "n1" || p.URL != a.url {
		t.Fatalf("placement %+v: want local on n1 at %s", p, a.url)
	}
	if _, err := a.local.End(ctx, p.Episode, pool.ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the desktop free again", time.Minute, func() bool { return au.writesFor(p.Desktop, p.Episode) > 0 })
	if w := au.writesFor(p.Desktop, p.Episode); w != 3 {
		t.Fatalf("%d writes for one episode in the apiserver's history, want 3", w)
	}
	after := settled("the agent's write count to match the apiserver's after the episode")
	if d := after - before; d != 3 {
		t.Fatalf("agent counted %d Desktop writes for one episode, want 3", d)
	}
}

// TestLostNodeE2E: an agent that stops renewing its Lease (Close: as a
// kill -9, it leaves its Lease and objects behind) gets no claim once one
// Lease duration has passed, and its episodes locate as ErrNodeLost. Before
// that, the same claimer's claim lands on it and binds remotely.
func TestLostNodeE2E(t *testing.T) {
	cp, ns, dyn := controlPlane(t)
	createPool(t, dyn, ns, "tiny", DesktopPoolSpec{Image: "tiny", WarmPerNode: 2})
	const lease = 3 * time.Second
	a := startAgent(t, cp, ns, "a", newMemLocal(5*time.Millisecond, 0), lease) // no VMs of its own
	b := startAgent(t, cp, ns, "b", newMemLocal(5*time.Millisecond, -1), lease)
	waitFor(t, "a sees b's desktops and Lease", time.Minute, func() bool {
		return freeIn(a.Agent, "tiny") == 2 && a.alive("b", time.Now())
	})
	ctx := context.Background()
	p, ep, err := a.Claim(ctx, "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p.Node != "b" || p.Local || !b.local.holds(ep.ID) {
		t.Fatalf("claim through a: %+v (b holds it: %v), want bound on b", p, b.local.holds(ep.ID))
	}
	if got, err := a.Locate(p.Episode); err != nil || got.Node != "b" || got.URL != b.url {
		t.Fatalf("Locate on a = %+v, %v", got, err)
	}
	_ = b.Close()
	stopped := time.Now()
	// b renewed last before it stopped: one Lease duration on, no claim
	// may land on it.
	time.Sleep(time.Until(stopped.Add(lease)))
	for range 20 {
		q, _, err := a.Claim(ctx, "tiny", time.Minute)
		if !errors.Is(err, ErrNoDesktop) {
			t.Fatalf("claim with only a lost node's desktops free = %+v, %v; want ErrNoDesktop", q, err)
		}
	}
	waitFor(t, "b's episode to locate as node lost", 10*lease, func() bool {
		_, err := a.Locate(p.Episode)
		return errors.Is(err, ErrNodeLost)
	})
	t.Logf("b's episode located as node lost %s after its agent stopped (lease %s)", time.Since(stopped).Round(time.Millisecond), lease)
	got, err := a.Locate(p.Episode)
	if got.Node != "b" || got.Episode != p.Episode {
		t.Fatalf("Locate of a lost node's episode = %+v, %v: want its placement with the error", got, err)
	}
	for _, vm := range []string{"tiny-0", "tiny-1"} {
		if d := getDesktop(t, dyn, ns, DesktopName("b", vm)); d.Status.State != pool.DesktopFree && d.Status.Episode != p.Episode {
			t.Fatalf("b's desktop %s got claimed while b was lost: %+v", vm, d.Status)
		}
	}
	if _, err := a.Locate("ep-000000000000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Locate of an unknown episode: %v, want ErrNotFound", err)
	}
}

// TestAPIServerDownE2E: with the apiserver stopped (its graceful stop
// alone takes longer than the 15 s Lease), a claim fails with
// ErrUnavailable at once, Locate still answers from the cache, and no node
// is called lost for the outage; an episode
// ended during the outage shows up free once the apiserver is back, with
// no agent restarted, and claims work again.
func TestAPIServerDownE2E(t *testing.T) {
	cp, ns, dyn := controlPlane(t)
	createPool(t, dyn, ns, "tiny", DesktopPoolSpec{Image: "tiny", WarmPerNode: 2})
	a := startAgent(t, cp, ns, "a", newMemLocal(5*time.Millisecond, -1), 15*time.Second)
	b := startAgent(t, cp, ns, "b", newMemLocal(5*time.Millisecond, -1), 15*time.Second)
	waitFor(t, "a sees 4 desktops", time.Minute, func() bool { return freeIn(a.Agent, "tiny") == 4 })
	ctx := context.Background()
	// An episode on b claimed through b, located through a.
	p, _, err := b.Claim(ctx, "tiny", time.Minute)
	if err != nil || p.Node != "b" {
		t.Fatalf("claim on b: %+v, %v", p, err)
	}
	waitFor(t, "a to locate b's episode", time.Minute, func() bool { _, err := a.Locate(p.Episode); return err == nil })

	stopAt := time.Now()
	cp.StopAPIServer(t)
	t.Logf("apiserver stopped in %s", time.Since(stopAt).Round(time.Millisecond))
	start := time.Now()
	_, _, err = a.Claim(ctx, "tiny", time.Minute)
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim with the apiserver down: %v, want ErrUnavailable", err)
	}
	t.Logf("claim with the apiserver down failed after %s: %v", took.Round(time.Millisecond), err)
	if took > 2*APITimeout {
		t.Fatalf("claim with the apiserver down took %s, past its %s cap", took, APITimeout)
	}
	got, err := a.Locate(p.Episode)
	if err != nil || got.Node != "b" || got.Desktop != p.Desktop {
		t.Fatalf("Locate with the apiserver down = %+v, %v", got, err)
	}
	if _, err := b.local.End(ctx, p.Episode, pool.ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the publisher tries (and fails) during the outage
	cp.StartAPIServer(t)
	waitFor(t, "the episode ended during the outage to show free", time.Minute, func() bool {
		return getDesktopOK(dyn, ns, p.Desktop, pool.DesktopFree)
	})
	if _, err := a.Locate(p.Episode); !errors.Is(err, ErrNotFound) {
		waitFor(t, "a's cache to drop the ended episode", time.Minute, func() bool {
			_, err := a.Locate(p.Episode)
			return errors.Is(err, ErrNotFound)
		})
	}
	waitFor(t, "a claim to work again", time.Minute, func() bool {
		_, _, err := a.Claim(ctx, "tiny", time.Minute)
		return err == nil
	})
	t.Logf("publisher retries on b: %d", b.Stats().Retries)
}

// TestDesktopClaimKubectlE2E: a DesktopClaim made with kubectl gets an
// episode (status Bound with episode, node and URLs) that the node's pool
// holds; kubectl shows desktops with their state in its own column;
// deleting the claim ends the episode in the pool, and a claim whose
// episode ends on its own goes Ended. Each agent writes its own entry of
// the DesktopPool's status.
func TestDesktopClaimKubectlE2E(t *testing.T) {
	cp, ns, dyn := controlPlane(t)
	createPool(t, dyn, ns, "tiny", DesktopPoolSpec{Image: "tiny", WarmPerNode: 2, DefaultTTLSeconds: 600})
	a := startAgent(t, cp, ns, "a", newMemLocal(5*time.Millisecond, -1), 15*time.Second)
	b := startAgent(t, cp, ns, "b", newMemLocal(5*time.Millisecond, -1), 15*time.Second)
	waitFor(t, "4 free desktops", time.Minute, func() bool { return freeIn(a.Agent, "tiny") == 4 && freeIn(b.Agent, "tiny") == 4 })
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "claim.yaml")
	manifest := fmt.Sprintf("apiVersion: deskfarm.dev/v1alpha1\nkind: DesktopClaim\nmetadata:\n  name: mine\n  namespace: %s\nspec:\n  pool: tiny\n  ttlSeconds: 300\n", ns)
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply: %v (%s)", err, out)
	}
	var phase, episode, node string
	waitFor(t, "the claim to be Bound", time.Minute, func() bool {
		out, err := cp.Kubectl(ctx, "-n", ns, "get", "desktopclaim", "mine", "-o",
			"jsonpath={.status.phase} {.status.episode} {.status.node}")
		f := strings.Fields(out)
		if err != nil || len(f) != 3 {
			return false
		}
		phase, episode, node = f[0], f[1], f[2]
		return phase == string(ClaimBound)
	})
	owner := map[string]*testAgent{"a": a, "b": b}[node]
	if owner == nil || !owner.local.holds(episode) {
		t.Fatalf("claim Bound to %s on node %q, which does not hold it", episode, node)
	}
	out, err := cp.Kubectl(ctx, "-n", ns, "get", "desktopclaim", "mine", "-o", "jsonpath={.status.url} {.status.viewerURL}")
	if want := owner.url + " " + owner.url + "/episodes/" + episode; err != nil || out != want {
		t.Fatalf("claim URLs %q, want %q (%v)", out, want, err)
	}
	wide, err := cp.Kubectl(ctx, "-n", ns, "get", "desktops", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl get desktops -o wide:\n%s", wide)
	lines := strings.Split(strings.TrimSpace(wide), "\n")
	if h := strings.Fields(lines[0]); len(h) < 9 || h[1] != "STATE" || h[2] != "NODE" || h[7] != "VM" || h[8] != "URL" {
		t.Fatalf("header %q: want NAME STATE NODE POOL EPISODE EXPIRES AGE VM URL", lines[0])
	}
	leasedRows := 0
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 5 && f[1] == "leased" && f[4] == episode {
			leasedRows++
			if _, err := time.Parse(time.RFC3339, f[5]); err != nil {
				t.Errorf("EXPIRES of the leased row is %q, want a timestamp", f[5])
			}
		}
	}
	if leasedRows != 1 || len(lines) != 5 {
		t.Fatalf("%d rows leased to %s in %d rows, want 1 in 4", leasedRows, episode, len(lines)-1)
	}
	if _, err := cp.Kubectl(ctx, "-n", ns, "delete", "desktopclaim", "mine", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim's episode to end in the pool", time.Minute, func() bool {
		return owner.local.endReason(episode) == ReasonClaimDeleted
	})
	// A claim whose episode ends on its own (TTL, DELETE of the episode)
	// goes Ended.
	manifest = strings.ReplaceAll(manifest, "name: mine", "name: other")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(ctx, "apply", "-f", file); err != nil {
		t.Fatalf("kubectl apply: %v (%s)", err, out)
	}
	waitFor(t, "the second claim to be Bound", time.Minute, func() bool {
		out, err := cp.Kubectl(ctx, "-n", ns, "get", "desktopclaim", "other", "-o", "jsonpath={.status.phase} {.status.episode} {.status.node}")
		f := strings.Fields(out)
		if err != nil || len(f) != 3 || f[0] != string(ClaimBound) {
			return false
		}
		episode, owner = f[1], map[string]*testAgent{"a": a, "b": b}[f[2]]
		return true
	})
	if _, err := owner.local.End(ctx, episode, pool.ReasonExpired); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second claim to be Ended", time.Minute, func() bool {
		out, err := cp.Kubectl(ctx, "-n", ns, "get", "desktopclaim", "other", "-o", "jsonpath={.status.phase}")
		return err == nil && out == string(ClaimEnded)
	})
	pools, err := cp.Kubectl(ctx, "-n", ns, "get", "desktoppool", "tiny", "-o", "jsonpath={.status.nodes[*].node}")
	if err != nil || pools != "a b" {
		waitFor(t, "both nodes in the pool's status", time.Minute, func() bool {
			pools, err = cp.Kubectl(ctx, "-n", ns, "get", "desktoppool", "tiny", "-o", "jsonpath={.status.nodes[*].node}")
			return err == nil && pools == "a b"
		})
	}
}

// TestReturningAgentE2E: an agent that comes back (same node, its pool
// recovered with one VM fewer and the others reset) reconciles its
// objects: the VM that is gone loses its Desktop, and desktops whose
// episodes did not survive are offered free again once their claims are
// older than the bind grace.
func TestReturningAgentE2E(t *testing.T) {
	cp, ns, dyn := controlPlane(t)
	createPool(t, dyn, ns, "tiny", DesktopPoolSpec{Image: "tiny", WarmPerNode: 3})
	first := startAgent(t, cp, ns, "a", newMemLocal(5*time.Millisecond, -1), 15*time.Second)
	waitFor(t, "3 free desktops", time.Minute, func() bool { return freeIn(first.Agent, "tiny") == 3 })
	ctx := context.Background()
	for range 3 {
		if _, _, err := first.Claim(ctx, "tiny", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all 3 leased in the cache", time.Minute, func() bool { return freeIn(first.Agent, "tiny") == 0 })
	_ = first.Close()
	// The pool came back with tiny-0 and tiny-1 (reset: free), tiny-2 gone.
	const grace = 2 * time.Second
	back := startAgent(t, cp, ns, "a", newMemLocal(5*time.Millisecond, 2), 15*time.Second,
		func(o *Options) { o.BindGrace = grace })
	waitFor(t, "the returning agent to reconcile", time.Minute, func() bool {
		return getDesktopOK(dyn, ns, DesktopName("a", "tiny-0"), pool.DesktopFree) &&
			getDesktopOK(dyn, ns, DesktopName("a", "tiny-1"), pool.DesktopFree) && freeIn(back.Agent, "tiny") == 2
	})
	list, err := dyn.Resource(DesktopResource).Namespace(ns).List(ctx, metaList)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		var names []string
		for _, u := range list.Items {
			names = append(names, u.GetName())
		}
		t.Fatalf("desktops after the return: %v, want a.tiny-0 and a.tiny-1 (a.tiny-2 has no VM)", names)
	}
	if _, _, err := back.Claim(ctx, "tiny", time.Minute); err != nil {
		t.Fatalf("claim after the return: %v", err)
	}
}

// TestCRDValidationE2E: the apiserver refuses what the schemas rule out
// (a state or network outside its enum, a count below its minimum, a
// missing required field), and takes a well-formed object of each kind.
func TestCRDValidationE2E(t *testing.T) {
	_, ns, dyn := controlPlane(t)
	ctx := context.Background()
	create := func(res schema.GroupVersionResource, obj interface {
		Unstructured() (*unstructured.Unstructured, error)
	}) error {
		u, err := obj.Unstructured()
		if err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(res).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		return err
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: ns} }
	for _, tc := range []struct {
		name string
		res  schema.GroupVersionResource
		obj  interface {
			Unstructured() (*unstructured.Unstructured, error)
		}
		valid bool
	}{
		{"desktop", DesktopResource, &Desktop{ObjectMeta: meta("n.v1"), Spec: DesktopSpec{Node: "n", Pool: "p", VM: "v1"},
			Status: DesktopStatus{State: pool.DesktopFree}}, true},
		{"desktop state outside the enum", DesktopResource, &Desktop{ObjectMeta: meta("n.v2"),
			Spec: DesktopSpec{Node: "n", Pool: "p", VM: "v2"}, Status: DesktopStatus{State: "stolen"}}, false},
		{"desktop without a vm", DesktopResource, &Desktop{ObjectMeta: meta("n.v3"), Spec: DesktopSpec{Node: "n", Pool: "p"}}, false},
		{"pool", DesktopPoolResource, &DesktopPool{ObjectMeta: meta("tiny"), Spec: DesktopPoolSpec{Image: "tiny", WarmPerNode: 1,
			Network: "user", MemoryMiB: 512, Forwards: []int{9222}}}, true},
		{"pool network outside the enum", DesktopPoolResource, &DesktopPool{ObjectMeta: meta("p2"),
			Spec: DesktopPoolSpec{Image: "tiny", Network: "bridge"}}, false},
		{"pool memory below the minimum", DesktopPoolResource, &DesktopPool{ObjectMeta: meta("p3"),
			Spec: DesktopPoolSpec{Image: "tiny", MemoryMiB: 64}}, false},
		{"pool warm below zero", DesktopPoolResource, &DesktopPool{ObjectMeta: meta("p4"),
			Spec: DesktopPoolSpec{Image: "tiny", WarmPerNode: -1}}, false},
		{"pool without an image", DesktopPoolResource, &DesktopPool{ObjectMeta: meta("p5")}, false},
		{"claim", DesktopClaimResource, &DesktopClaim{ObjectMeta: meta("c1"), Spec: DesktopClaimSpec{Pool: "tiny", TTLSeconds: 60}}, true},
		{"claim without a pool", DesktopClaimResource, &DesktopClaim{ObjectMeta: meta("c2")}, false},
	} {
		err := create(tc.res, tc.obj)
		switch {
		case tc.valid && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case !tc.valid && !apierrors.IsInvalid(err):
			t.Errorf("%s: %v, want Invalid", tc.name, err)
		}
	}
}
