package main_test

// Cluster E2E of issue 15: three real `deskfarm serve` node agents, each in
// its own network namespace with its own state dir, on the host's libvirtd
// with real tiny VMs, joined through a real kube-apiserver and etcd. Every
// check is what a user sees: which node an episode landed on, pixels and
// files that come back through another agent, error codes, objects in the
// apiserver.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testbuf"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmproc"
	"github.com/deskfarm/deskfarm/internal/kubetest"
	"github.com/deskfarm/deskfarm/internal/testenv"
)

const (
	clusterToken   = "cluster-e2e-control-token-0123456789"
	clusterViewer  = "cluster-e2e-viewer-token-0123456789"
	clusterNodeKey = "cluster-e2e-node-token-0123456789"
	clusterLease   = 4 * time.Second
	// clusterBootTimeout: a tiny VM is ready 17-20 s after power-on, and
	// a guest hung in its boot (one sat 3 min in a CI run, 2026-12-02) is
	// replaced after this, plus the pool's 30 s backoff and a boot, within
	// the first wait for free desktops (clusterFirstFree).
	clusterBootTimeout = 90 * time.Second
	clusterFirstFree   = 4 * time.Minute
)

type clusterAgent struct {
	node    string
	ns      *kubetest.Netns
	farm    *farmproc.Farm
	c       *client.Client // control token
	viewer  *client.Client // viewer token
	log     *testbuf.Buffer
	state   string
	baseURL string
}

type clusterFarm struct {
	cp     *kubetest.ControlPlane
	ns     string
	agents []*clusterAgent
}

func startCluster(t *testing.T) *clusterFarm {
	t.Helper()
	pool, err := os.ReadFile("../../deploy/kubernetes/examples/pool-tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return startClusterOf(t, []string{"dfa", "dfb", "dfc"}, pool)
}

// startClusterOf starts one agent per network namespace name (nodes a,
// b, ...) with the DesktopPool manifest pool applied, and waits for one
// free desktop on each.
func startClusterOf(t *testing.T, netns []string, pool []byte) *clusterFarm {
	t.Helper()
	testenv.RequireVM(t, "tiny")
	ctx := context.Background()
	var nets []*kubetest.Netns
	for _, n := range netns {
		nets = append(nets, kubetest.NetNS(t, n))
	}
	cp := kubetest.Start(t, kubetest.Options{Host: kubetest.BridgeIP})
	cp.InstallCRDs(t)
	ns := cp.Namespace(t)
	// The example names namespace deskfarm; the test's own is fresh.
	applyYAML(t, cp, ns, bytes.ReplaceAll(pool, []byte("  namespace: deskfarm\n"), nil))
	bin, err := farmproc.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "cluster-token")
	os.WriteFile(keyFile, []byte(clusterNodeKey), 0o600)
	cf := &clusterFarm{cp: cp, ns: ns}
	for i, n := range nets {
		node := string(rune('a' + i))
		a := &clusterAgent{node: node, ns: n, log: &testbuf.Buffer{}, state: "/var/lib/deskfarm-test-cluster-" + netns[i]}
		farmproc.Purge(ctx, a.state)
		listen := n.IP + ":8080"
		a.baseURL = "http://" + listen
		a.farm, err = farmproc.Start(ctx, farmproc.Config{
			Bin: bin, StateDir: a.state, Listen: listen, Log: a.log, Prefix: []string{"ip", "netns", "exec", n.Name},
			Args: []string{"--kubeconfig", cp.Kubeconfig, "--node", node, "--advertise", a.baseURL,
				"--namespace", ns, "--node-lease", clusterLease.String(), "--cluster-token-file", keyFile,
				"--token", clusterToken, "--viewer-token", clusterViewer, "--ksm=false",
				"--boot-timeout", clusterBootTimeout.String()},
		})
		if err != nil {
			t.Fatalf("agent %s: %v\n%s", node, err, a.log)
		}
		a.c, _ = client.New(a.baseURL, client.WithToken(clusterToken))
		a.viewer, _ = client.New(a.baseURL, client.WithToken(clusterViewer))
		cf.agents = append(cf.agents, a)
	}
	t.Cleanup(func() {
		for _, a := range cf.agents {
			if t.Failed() {
				t.Logf("agent %s log:\n%s", a.node, tail(a.log.String(), 120))
				logConsoles(t, a)
			}
			if err := a.farm.Stop(); err != nil {
				t.Error(err)
			}
			extra, err := farmproc.Purge(context.Background(), a.state)
			if err != nil {
				t.Errorf("purge %s: %v", a.state, err)
			}
			if len(extra) > 0 {
				t.Errorf("agent %s: VMs it no longer knew (orphans): %v", a.node, extra)
			}
			os.RemoveAll(a.state)
		}
	})
	want := map[string]int{}
	for _, a := range cf.agents {
		want[a.node] = 1
	}
	cf.waitFree(t, want, clusterFirstFree)
	return cf
}

// logConsoles logs the last lines of each of a's VMs' serial consoles,
// where a guest that hangs in its boot says why.
func logConsoles(t *testing.T, a *clusterAgent) {
	logs, _ := filepath.Glob(filepath.Join(a.state, "vms", "*", "console.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		t.Logf("agent %s vm %s console:\n%s", a.node, filepath.Base(filepath.Dir(f)), tail(string(b), 30))
	}
}

// applyYAML is kubectl apply -n ns of a manifest, as a user would.
func applyYAML(t *testing.T, cp *kubetest.ControlPlane, ns string, manifest []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(context.Background(), "apply", "-n", ns, "-f", f); err != nil {
		t.Fatalf("kubectl apply %s: %v: %s", manifest, err, out)
	}
}

// desktop is the part of a Desktop object the tests read.
type desktop struct {
	Metadata struct{ Name string }                `json:"metadata"`
	Spec     struct{ Node, Pool, VM, URL string } `json:"spec"`
	Status   struct{ State, Episode string }      `json:"status"`
}

func (cf *clusterFarm) desktops(t *testing.T) []desktop {
	t.Helper()
	out, err := cf.cp.Kubectl(context.Background(), "get", "desktops", "-n", cf.ns, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get desktops: %v: %s", err, out)
	}
	var l struct{ Items []desktop }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kubectl get desktops -o json: %v", err)
	}
	return l.Items
}

// waitFree waits until each named node has at least n free desktops.
func (cf *clusterFarm) waitFree(t *testing.T, want map[string]int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got map[string]int
	for time.Now().Before(deadline) {
		got = map[string]int{}
		for _, d := range cf.desktops(t) {
			if d.Status.State == "free" {
				got[d.Spec.Node]++
			}
		}
		ok := true
		for n, c := range want {
			ok = ok && got[n] >= c
		}
		if ok {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	out, _ := cf.cp.Kubectl(context.Background(), "get", "desktops", "-n", cf.ns, "-o", "wide")
	t.Fatalf("free desktops per node %v, want %v, after %s:\n%s", got, want, within, out)
}

func (a *clusterAgent) start(t *testing.T) api.Episode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ep, err := a.c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny"})
	if err != nil {
		t.Fatalf("start an episode through agent %s: %v", a.node, err)
	}
	if ep.Node == "" || ep.URL == "" {
		t.Fatalf("episode %s through agent %s: node %q url %q, want both", ep.ID, a.node, ep.Node, ep.URL)
	}
	return ep
}

func (cf *clusterFarm) agent(node string) *clusterAgent {
	for _, a := range cf.agents {
		if a.node == node {
			return a
		}
	}
	return nil
}

func TestClusterE2E(t *testing.T) {
	cf := startCluster(t)
	t.Run("KubectlShowsDesktops", func(t *testing.T) { testKubectlDesktops(t, cf) })
	t.Run("ConcurrentClaims", func(t *testing.T) { testConcurrentClaims(t, cf) })
	t.Run("ProxiedEpisode", func(t *testing.T) { testProxiedEpisode(t, cf) })
	t.Run("DesktopClaim", func(t *testing.T) { testDesktopClaim(t, cf) })
	t.Run("APIServerDown", func(t *testing.T) { testAPIServerDown(t, cf) })
	t.Run("AgentKilled", func(t *testing.T) { testAgentKilled(t, cf) })
}

func testKubectlDesktops(t *testing.T, cf *clusterFarm) {
	out, err := cf.cp.Kubectl(context.Background(), "get", "desktops", "-n", cf.ns, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || !strings.Contains(lines[0], "STATE") || !strings.Contains(lines[0], "NODE") {
		t.Fatalf("kubectl get desktops -o wide: want a header with STATE and NODE and 3 rows:\n%s", out)
	}
	t.Logf("kubectl get desktops -o wide:\n%s", out)
}

// Three agents start episodes at once, twice over: every episode gets its
// own desktop, and the apiserver's objects agree with the episodes.
func testConcurrentClaims(t *testing.T, cf *clusterFarm) {
	var mu sync.Mutex
	var eps []api.Episode
	var wg sync.WaitGroup
	for _, a := range cf.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep := a.start(t)
			mu.Lock()
			eps = append(eps, ep)
			mu.Unlock()
		}()
	}
	wg.Wait()
	seen := map[string]string{}
	for _, ep := range eps {
		key := ep.Node + "/" + ep.VM
		if other, ok := seen[key]; ok {
			t.Errorf("desktop %s held by episodes %s and %s", key, other, ep.ID)
		}
		seen[key] = ep.ID
	}
	held := map[string]string{}
	for _, d := range cf.desktops(t) {
		if d.Status.State == "leased" {
			held[d.Status.Episode] = d.Spec.Node + "/" + d.Spec.VM
		}
	}
	for _, ep := range eps {
		if held[ep.ID] != ep.Node+"/"+ep.VM {
			t.Errorf("episode %s on %s/%s: the apiserver's desktop says %q", ep.ID, ep.Node, ep.VM, held[ep.ID])
		}
	}
	for _, ep := range eps {
		if _, err := cf.agents[0].c.EndEpisode(context.Background(), ep.ID); err != nil {
			t.Errorf("end %s through agent a: %v", ep.ID, err)
		}
	}
	cf.waitFree(t, map[string]int{"a": 1, "b": 1, "c": 1}, 2*time.Minute)
}

// An episode leased through agent b whose VM lives elsewhere: actions,
// screenshot, files and exec through b, and b's viewer token only watches.
func testProxiedEpisode(t *testing.T, cf *clusterFarm) {
	b := cf.agent("b")
	// b prefers its own node: its first episode is local, and it goes
	// elsewhere only once its own desktops are taken (at most maxPerNode).
	var ep api.Episode
	for i := 0; i < 3; i++ {
		e := b.start(t)
		defer b.c.EndEpisode(context.Background(), e.ID)
		if i == 0 && e.Node != "b" {
			t.Errorf("the first episode through b landed on %q, want b (local first)", e.Node)
		}
		if e.Node != "b" {
			ep = e
			break
		}
	}
	if ep.ID == "" {
		t.Fatal("three episodes through b all landed on b (its pool holds at most 2)")
	}
	if owner := cf.agent(ep.Node); ep.URL != owner.baseURL {
		t.Errorf("episode %s url %q, want owner %s's %q", ep.ID, ep.URL, ep.Node, owner.baseURL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tg := client.Episode(ep.ID)
	if _, err := b.c.Act(ctx, tg, api.ActionsRequest{Action: []byte(`{"kind":"click","x":100,"y":100}`)}); err != nil {
		t.Fatalf("click through b on %s's VM: %v", ep.Node, err)
	}
	var img bytes.Buffer
	if _, err := b.c.Screenshot(ctx, tg, api.ScreenshotOptions{}, &img); err != nil {
		t.Fatalf("screenshot through b: %v", err)
	}
	pic, err := png.Decode(bytes.NewReader(img.Bytes()))
	if err != nil {
		t.Fatalf("screenshot through b is no PNG: %v", err)
	}
	t.Logf("screenshot through b: %v", pic.Bounds())
	body := []byte(fmt.Sprintf("through b to %s at %s\n", ep.Node, time.Now()))
	if err := b.c.WriteFile(ctx, tg, "/tmp/proxied.txt", bytes.NewReader(body), int64(len(body)), 0o644); err != nil {
		t.Fatalf("write a file through b: %v", err)
	}
	var back bytes.Buffer
	if _, err := b.c.ReadFile(ctx, tg, "/tmp/proxied.txt", &back); err != nil || !bytes.Equal(back.Bytes(), body) {
		t.Fatalf("read the file back through b: %q, %v; want %q", back.Bytes(), err, body)
	}
	res, err := b.c.Exec(ctx, tg, api.ExecRequest{Argv: []string{"cat", "/tmp/proxied.txt"}})
	if err != nil || res.Stdout != string(body) {
		t.Fatalf("exec through b: %q, %v", res.Stdout, err)
	}
	// The viewer token through b watches and cannot act.
	if _, err := b.viewer.Screenshot(ctx, tg, api.ScreenshotOptions{}, &bytes.Buffer{}); err != nil {
		t.Errorf("viewer screenshot through b: %v", err)
	}
	_, err = b.viewer.Act(ctx, tg, api.ActionsRequest{Action: []byte(`{"kind":"click","x":10,"y":10}`)})
	if !api.IsCode(err, api.CodeViewerToken) {
		t.Errorf("viewer click through b: %v (code %q), want %q", err, errCode(err), api.CodeViewerToken)
	}
}

// A DesktopClaim made with kubectl gets an episode; deleting it ends it.
func testDesktopClaim(t *testing.T, cf *clusterFarm) {
	ctx := context.Background()
	claim := "apiVersion: deskfarm.dev/v1alpha1\nkind: DesktopClaim\nmetadata:\n  name: by-kubectl\nspec:\n  pool: tiny\n  ttlSeconds: 600\n"
	applyYAML(t, cf.cp, cf.ns, []byte(claim))
	var st struct {
		Status struct{ Phase, Episode, Node, URL string } `json:"status"`
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		out, err := cf.cp.Kubectl(ctx, "get", "desktopclaim", "by-kubectl", "-n", cf.ns, "-o", "json")
		if err == nil && json.Unmarshal([]byte(out), &st) == nil && st.Status.Phase == "Bound" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if st.Status.Phase != "Bound" || st.Status.Episode == "" {
		t.Fatalf("DesktopClaim by-kubectl: status %+v after a minute, want Bound with an episode", st.Status)
	}
	ep, err := cf.agents[0].c.GetEpisode(ctx, st.Status.Episode)
	if err != nil || ep.State != api.EpisodeActive || ep.Node != st.Status.Node {
		t.Fatalf("the claim's episode %s through agent a: %+v, %v", st.Status.Episode, ep, err)
	}
	if out, err := cf.cp.Kubectl(ctx, "delete", "desktopclaim", "by-kubectl", "-n", cf.ns, "--wait=false"); err != nil {
		t.Fatalf("kubectl delete desktopclaim: %v: %s", err, out)
	}
	deadline = time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ep, err = cf.agent(st.Status.Node).c.GetEpisode(ctx, st.Status.Episode)
		if (err == nil && ep.State == api.EpisodeEnded) || api.IsCode(err, api.CodeEpisodeNotFound) || api.IsCode(err, api.CodeEpisodeEnded) {
			cf.waitFree(t, map[string]int{"a": 1, "b": 1, "c": 1}, 2*time.Minute)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("episode %s still %q (%v) a minute after its DesktopClaim was deleted", st.Status.Episode, ep.State, err)
}

// With the apiserver stopped, a running episode's actions go on, through
// its owner and through another agent; a new claim fails at once with
// cluster_unavailable; when it returns, claims work again.
func testAPIServerDown(t *testing.T, cf *clusterFarm) {
	a, b := cf.agent("a"), cf.agent("b")
	ep := a.start(t)
	defer a.c.EndEpisode(context.Background(), ep.ID)
	cf.cp.StopAPIServer(t)
	restarted := false
	defer func() {
		if !restarted {
			cf.cp.StartAPIServer(t)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, via := range []*clusterAgent{cf.agent(ep.Node), b} {
		if _, err := via.c.Act(ctx, client.Episode(ep.ID), api.ActionsRequest{Action: []byte(`{"kind":"click","x":50,"y":50}`)}); err != nil {
			t.Errorf("click through %s with the apiserver down: %v", via.node, err)
		}
	}
	t0 := time.Now()
	_, err := b.c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny"})
	if !api.IsCode(err, api.CodeClusterUnavailable) {
		t.Errorf("a claim with the apiserver down: %v (code %q), want %q", err, errCode(err), api.CodeClusterUnavailable)
	}
	t.Logf("a claim with the apiserver down failed after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	// Each agent's /healthz says the apiserver is unreachable, and stays 200.
	for _, ag := range []*clusterAgent{a, b} {
		h := waitAPIServer(t, ag, api.APIServerUnreachable)
		t.Logf("agent %s's healthz with the apiserver down: %+v", ag.node, *h.Cluster)
		if h.Cluster.Error == "" || h.Cluster.LeaseRenewed == "" {
			t.Errorf("agent %s's healthz with the apiserver down tells no error or no last renewal: %+v", ag.node, *h.Cluster)
		}
	}
	cf.cp.StartAPIServer(t)
	restarted = true
	for _, ag := range []*clusterAgent{a, b} {
		waitAPIServer(t, ag, api.APIServerOK)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		e, err := b.c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny"})
		if err == nil {
			b.c.EndEpisode(context.Background(), e.ID)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claims still fail a minute after the apiserver returned: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitAPIServer waits up to 30 s for ag's /healthz to answer 200 and tell
// the apiserver as want (an api.APIServer* value), and returns the answer.
func waitAPIServer(t *testing.T, ag *clusterAgent, want string) api.HealthResponse {
	t.Helper()
	var h api.HealthResponse
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		h, err = ag.c.Health(context.Background())
		if err == nil && h.Cluster != nil && h.Cluster.APIServer == want && h.Cluster.Node == ag.node {
			return h
		}
	}
	t.Fatalf("agent %s's healthz 30 s on: %+v, %v; want 200 and the apiserver %q", ag.node, h, err, want)
	return h
}

// kill -9 of agent c: within a lease duration its node gets no claim and
// its episode answers node_lost through any agent; restarted, c offers its
// desktop again.
func testAgentKilled(t *testing.T, cf *clusterFarm) {
	a, c := cf.agent("a"), cf.agent("c")
	cf.waitFree(t, map[string]int{"a": 1, "b": 1, "c": 1}, 2*time.Minute)
	var onC api.Episode
	for i := 0; i < 3 && onC.ID == ""; i++ {
		ep := c.start(t)
		if ep.Node == "c" {
			onC = ep
		} else {
			defer a.c.EndEpisode(context.Background(), ep.ID)
		}
	}
	if onC.ID == "" {
		t.Fatal("no episode through c landed on c")
	}
	if err := c.farm.Kill9(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Until the node is called lost (its Lease expired, and a's own
	// renewals show the apiserver served past that), a call finds its
	// owner unreachable; after it, node_lost.
	var err error
	for deadline := killed.Add(3*clusterLease + 10*time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, err = a.c.GetEpisode(ctx, onC.ID)
		if !api.IsCode(err, api.CodeNodeUnreachable) {
			break
		}
	}
	if !api.IsCode(err, api.CodeNodeLost) {
		t.Errorf("episode %s on the killed node through a: %v (code %q), want %q", onC.ID, err, errCode(err), api.CodeNodeLost)
	}
	t.Logf("episode %s answered node_lost %s after the kill (lease %s)", onC.ID, time.Since(killed).Round(100*time.Millisecond), clusterLease)
	_, err = a.c.Act(ctx, client.Episode(onC.ID), api.ActionsRequest{Action: []byte(`{"kind":"click","x":5,"y":5}`)})
	if !api.IsCode(err, api.CodeNodeLost) {
		t.Errorf("click on the killed node's episode through a: %v (code %q), want %q", err, errCode(err), api.CodeNodeLost)
	}
	for i := 0; i < 2; i++ {
		ep, err := a.c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny"})
		if err == nil {
			if ep.Node == "c" {
				t.Errorf("episode %s landed on node c %s after its agent was killed", ep.ID, time.Since(killed))
			}
			defer a.c.EndEpisode(context.Background(), ep.ID)
		}
	}
	if err := c.farm.Restart(context.Background()); err != nil {
		t.Fatalf("restart agent c: %v", err)
	}
	cf.waitFree(t, map[string]int{"c": 1}, 3*time.Minute)
	// c ends the lost episode once it is back and publishes its desktop
	// free: a free desktop of c may show before that one is published (c's
	// other warm VM), so the check waits for the publication, not for c.
	returned := time.Now()
	for deadline := returned.Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		stale := ""
		for _, d := range cf.desktops(t) {
			if d.Spec.Node == "c" && d.Status.Episode == onC.ID {
				stale = d.Metadata.Name
			}
		}
		if stale == "" {
			t.Logf("c's desktops name no lost episode %s after c returned", time.Since(returned).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("desktop %s still names episode %s a minute after c returned", stale, onC.ID)
			break
		}
	}
}
