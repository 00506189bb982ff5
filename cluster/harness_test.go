package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/kubetest"
	"github.com/deskfarm/deskfarm/pool"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

const testClusterToken = "cluster-token-for-tests"

// testAgent is one node: an Agent over a memLocal, with the bind route
// served on its advertise URL as web serves it (cluster token, BindRequest
// in, pool.Episode out).
type testAgent struct {
	*Agent
	local *memLocal
	url   string
}

func startAgent(t *testing.T, cp *kubetest.ControlPlane, ns, node string, local *memLocal, lease time.Duration,
	tweak ...func(*Options)) *testAgent {
	t.Helper()
	var ag atomic.Pointer[Agent]
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+BindPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(ClusterTokenHeader) != testClusterToken {
			http.Error(w, "no cluster token", http.StatusUnauthorized)
			return
		}
		var req BindRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ep, err := ag.Load().Bind(r.Context(), req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		_ = json.NewEncoder(w).Encode(wireEpisode(ep))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := Options{Config: cp.Config, Namespace: ns, Node: node,
		AdvertiseURL: srv.URL, ClusterToken: testClusterToken, LeaseDuration: lease, Local: local, Log: log}
	for _, f := range tweak {
		f(&opts)
	}
	a, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ag.Store(a)
	ta := &testAgent{Agent: a, local: local, url: srv.URL}
	t.Cleanup(func() { _ = a.Close() })
	return ta
}

// controlPlane starts a real apiserver with the CRDs and a fresh namespace.
func controlPlane(t *testing.T) (*kubetest.ControlPlane, string, dynamic.Interface) {
	t.Helper()
	cp := kubetest.Start(t, kubetest.Options{})
	cp.InstallCRDs(t)
	ns := cp.Namespace(t)
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cp, ns, dyn
}

func createPool(t *testing.T, dyn dynamic.Interface, ns, name string, spec DesktopPoolSpec) {
	t.Helper()
	p := &DesktopPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	u, err := p.Unstructured()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(DesktopPoolResource).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pool %s: %v", name, err)
	}
}

// waitFor polls cond until it holds, failing the test after limit. The
// limit is a hang guard, not a measurement.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeIn counts the free desktops of poolName in a's cache.
func freeIn(a *Agent, poolName string) int {
	objs, _ := a.desktopInf.GetIndexer().ByIndex(indexFree, poolName)
	return len(objs)
}

func getDesktop(t *testing.T, dyn dynamic.Interface, ns, name string) *Desktop {
	t.Helper()
	u, err := dyn.Resource(DesktopResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get desktop %s: %v", name, err)
	}
	d, err := DesktopFrom(u)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// auditEvent is one Desktop change as the apiserver's watch delivered it.
type auditEvent struct {
	typ     watch.EventType
	desktop string
	rv      string
	state   pool.DesktopState
	episode string
}

// audit records every Desktop change in a namespace from the apiserver's
// watch, from before the test's first claim, and checks the one rule that
// matters: a desktop never passes from one holder to another without being
// released in between, and no episode holds two desktops at once.
type audit struct {
	mu      sync.Mutex
	events  []auditEvent
	last    map[string]auditEvent
	holding map[string]string // episode -> desktop it holds now
	faults  []string
}

func startAudit(t *testing.T, dyn dynamic.Interface, ns string) *audit {
	t.Helper()
	res := dyn.Resource(DesktopResource).Namespace(ns)
	list, err := res.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	au := &audit{last: map[string]auditEvent{}, holding: map[string]string{}}
	for i := range list.Items {
		au.record(watch.Added, &list.Items[i])
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rv := list.GetResourceVersion()
	go func() {
		for ctx.Err() == nil {
			w, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(100 * time.Millisecond) // the apiserver is away: watch again from rv
				continue
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type != watch.Bookmark {
					au.record(ev.Type, u)
				}
			}
		}
	}()
	return au
}

func (au *audit) record(typ watch.EventType, u *unstructured.Unstructured) {
	d, err := DesktopFrom(u)
	if err != nil {
		return
	}
	ev := auditEvent{typ: typ, desktop: d.Name, rv: d.ResourceVersion, state: d.Status.State, episode: d.Status.Episode}
	au.mu.Lock()
	defer au.mu.Unlock()
	prev, seen := au.last[d.Name]
	if seen && prev.rv == ev.rv {
		return
	}
	au.events = append(au.events, ev)
	au.last[d.Name] = ev
	if seen && prev.state == pool.DesktopLeased && prev.episode != ev.episode && ev.state == pool.DesktopLeased {
		au.faults = append(au.faults, d.Name+": held by "+prev.episode+" then "+ev.episode+" with no release between")
	}
	if seen && prev.state == pool.DesktopLeased && au.holding[prev.episode] == d.Name {
		delete(au.holding, prev.episode)
	}
	if ev.state == pool.DesktopLeased && typ != watch.Deleted {
		if other, ok := au.holding[ev.episode]; ok && other != d.Name {
			au.faults = append(au.faults, ev.episode+" holds "+other+" and "+d.Name)
		}
		au.holding[ev.episode] = d.Name
	}
}

func (au *audit) check(t *testing.T) {
	t.Helper()
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, f := range au.faults {
		t.Errorf("double holder: %s", f)
	}
}

// leasedBy says whether the watch saw desktop leased by episode.
func (au *audit) leasedBy(desktop, episode string) bool {
	au.mu.Lock()
	defer au.mu.Unlock()
	for _, e := range au.events {
		if e.desktop == desktop && e.episode == episode && e.state == pool.DesktopLeased {
			return true
		}
	}
	return false
}

// total is the number of Desktop writes the watch has seen.
func (au *audit) total() int {
	au.mu.Lock()
	defer au.mu.Unlock()
	return len(au.events)
}

// writesFor counts the apiserver writes of episode's desktop from the
// claim that leased it through the first release to free after it; it
// returns -1 while that release has not been seen.
func (au *audit) writesFor(desktop, episode string) int {
	au.mu.Lock()
	defer au.mu.Unlock()
	n := 0
	for _, e := range au.events {
		if e.desktop != desktop {
			continue
		}
		switch {
		case n == 0 && e.state == pool.DesktopLeased && e.episode == episode:
			n = 1
		case n > 0:
			n++
			if e.state == pool.DesktopFree {
				return n
			}
		}
	}
	return -1
}

// claimRetry claims until a desktop is free (ErrNoDesktop means all are
// held now; they come back as episodes end). took is the last call's time.
func claimRetry(ctx context.Context, a *Agent, poolName string) (Placement, pool.Episode, time.Duration, error) {
	for {
		start := time.Now()
		p, ep, err := a.Claim(ctx, poolName, time.Minute)
		took := time.Since(start)
		if !errors.Is(err, ErrNoDesktop) {
			return p, ep, took, err
		}
		select {
		case <-ctx.Done():
			return p, ep, took, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// getDesktopOK says whether the apiserver has desktop name in state.
func getDesktopOK(dyn dynamic.Interface, ns, name string, state pool.DesktopState) bool {
	u, err := dyn.Resource(DesktopResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	d, err := DesktopFrom(u)
	return err == nil && d.Status.State == state
}

// wireEpisode is ep as web's bind route answers it (web.apiEpisode).
func wireEpisode(ep pool.Episode) api.Episode {
	return api.Episode{ID: ep.ID, VM: ep.VM, Pool: ep.Pool, State: string(ep.State), Warm: ep.Warm,
		BootSeconds: ep.BootSeconds, CreatedAt: ep.CreatedAt, ExpiresAt: ep.ExpiresAt, TTLSeconds: ep.TTLSeconds,
		ScreenshotSize: ep.ScreenshotSize, CleanStart: ep.CleanStart, ResetBeforeLeaseMS: ep.ResetBeforeLeaseMS,
		EndedAt: ep.EndedAt, EndReason: ep.EndReason, ResetSeconds: ep.ResetSeconds, VMReplaced: ep.VMReplaced}
}
