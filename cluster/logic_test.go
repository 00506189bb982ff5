package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fill"
	"github.com/deskfarm/deskfarm/pool"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

type cand struct{ name, node string }

func TestCandidateOrder(t *testing.T) {
	cands := []cand{{"a.1", "a"}, {"b.1", "b"}, {"self.1", "self"}, {"c.1", "c"}, {"self.2", "self"},
		{"b.2", "b"}, {"lost.1", "lost"}, {"self.3", "self"}}
	alive := func(n string) bool { return n != "lost" }
	nodeOf := func(c cand) string { return c.node }
	names := func(cs []cand) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.name)
		}
		return out
	}
	got := names(candidateOrder(cands, nodeOf, "self", alive, 0, 0))
	want := []string{"self.1", "self.2", "self.3", "a.1", "b.1", "c.1", "b.2"}
	if !slices.Equal(got, want) {
		t.Fatalf("order(0,0) = %v, want %v", got, want)
	}
	got = names(candidateOrder(cands, nodeOf, "self", alive, 1, 2))
	want = []string{"self.2", "self.3", "self.1", "c.1", "b.2", "a.1", "b.1"}
	if !slices.Equal(got, want) {
		t.Fatalf("order(1,2) = %v, want %v", got, want)
	}
	// Offsets spread concurrent claimers: over many offsets every other
	// node's desktop comes first about equally often.
	first := map[string]int{}
	for r := range uint64(400) {
		o := candidateOrder(cands, nodeOf, "nobody", alive, 0, r)
		first[o[0].name]++
	}
	if len(first) != 7 || first["lost.1"] != 0 {
		t.Fatalf("first candidates over 400 offsets: %v", first)
	}
}

func mt(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

func TestDesiredStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	grace := 30 * time.Second
	knownSet := map[string]time.Time{"ep-old": now.Add(-time.Hour), "ep-new": now.Add(-time.Second)}
	known := func(ep string) (time.Time, bool) { t, ok := knownSet[ep]; return t, ok }
	free := pool.Desktop{VM: "v", Pool: "p", State: pool.DesktopFree}
	leased := func(ep string) pool.Desktop {
		return pool.Desktop{VM: "v", Pool: "p", State: pool.DesktopLeased, Episode: ep, ExpiresAt: now.Add(time.Hour)}
	}
	claimed := func(ep string, at time.Time) DesktopStatus {
		return DesktopStatus{State: pool.DesktopLeased, Episode: ep, ClaimedBy: "other", ClaimedAt: mt(at), ExpiresAt: mt(at.Add(time.Hour))}
	}
	for _, tc := range []struct {
		name      string
		local     pool.Desktop
		cur       DesktopStatus
		write     bool
		wantState pool.DesktopState
		wantEp    string
	}{
		{"free stays free", free, DesktopStatus{State: pool.DesktopFree}, false, pool.DesktopFree, ""},
		{"booting becomes free", free, DesktopStatus{State: pool.DesktopBooting}, true, pool.DesktopFree, ""},
		{"claim in flight is not clobbered", free, claimed("ep-x", now.Add(-5*time.Second)), false, pool.DesktopLeased, "ep-x"},
		{"stale claim is given back", free, claimed("ep-x", now.Add(-31*time.Second)), true, pool.DesktopFree, ""},
		{"ended episode: leased -> resetting", pool.Desktop{VM: "v", Pool: "p", State: pool.DesktopResetting},
			claimed("ep-old", now.Add(-time.Minute)), true, pool.DesktopResetting, ""},
		{"ended episode right after its claim: known wins over grace", free,
			claimed("ep-new", now.Add(-2*time.Second)), true, pool.DesktopFree, ""},
		{"reset done: resetting -> free", free, DesktopStatus{State: pool.DesktopResetting}, true, pool.DesktopFree, ""},
		{"held episode matches: no write for expiry drift", leased("ep-old"),
			DesktopStatus{State: pool.DesktopLeased, Episode: "ep-old", ExpiresAt: mt(now)}, false, pool.DesktopLeased, "ep-old"},
		{"just bound here: wait for the claim write", leased("ep-new"), DesktopStatus{State: pool.DesktopFree}, false, pool.DesktopFree, ""},
		{"held long, object lost it (outage): owner republishes", leased("ep-old"), DesktopStatus{State: pool.DesktopFree},
			true, pool.DesktopLeased, "ep-old"},
		{"another claim in flight over a held episode waits", leased("ep-old"), claimed("ep-x", now.Add(-time.Second)),
			false, pool.DesktopLeased, "ep-x"},
		{"dead", pool.Desktop{VM: "v", Pool: "p", State: pool.DesktopDead}, DesktopStatus{State: pool.DesktopFree},
			true, pool.DesktopDead, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, write := desiredStatus(tc.local, tc.cur, known, "self", now, grace)
			if write != tc.write || st.State != tc.wantState || st.Episode != tc.wantEp {
				t.Fatalf("desiredStatus = %+v, write %v; want state %s episode %q write %v", st, write, tc.wantState, tc.wantEp, tc.write)
			}
			if write && st.State != pool.DesktopLeased && (st.ClaimedAt != nil || st.ExpiresAt != nil || st.Claim != "") {
				t.Fatalf("unleased status keeps a holder: %+v", st)
			}
		})
	}
}

func TestPoolConfig(t *testing.T) {
	var p DesktopPool
	fill.All(&p.Spec)
	p.Name = "tiny"
	c := poolConfig([]*DesktopPool{&p, {ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: DesktopPoolSpec{Image: "desktop"}}})
	if len(c.Pools) != 2 || c.Pools[0].Name != "a" || c.Pools[1].Name != "tiny" {
		t.Fatalf("pools %+v: want a, tiny sorted", c.Pools)
	}
	got := c.Pools[1]
	if z := fill.Zeros(got); len(z) != 0 {
		t.Errorf("pool.PoolConfig fields left unset: %v", z)
	}
	s := p.Spec
	want := pool.PoolConfig{Name: "tiny", Image: s.Image, MemoryMiB: s.MemoryMiB, VCPUs: s.VCPUs, Width: s.Width,
		Height: s.Height, MinWarm: s.WarmPerNode, Max: s.MaxPerNode, ScreenshotSize: s.ScreenshotSize,
		DefaultTTL: pool.Seconds(s.DefaultTTLSeconds), MaxTTL: pool.Seconds(s.MaxTTLSeconds), Network: s.Network,
		Forwards: s.Forwards, Record: s.Record, RecordOptions: pool.RecordOptions{A11y: s.RecordOptions.A11y,
			KeepFiles: s.RecordOptions.KeepFiles, NoVideo: s.RecordOptions.NoVideo}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("translated\n got %+v\nwant %+v", got, want)
	}
	// Zeros become pool's defaults, as a --pools file's would.
	d := c.Pools[0]
	if d.Max != 1 || d.DefaultTTL != pool.DefaultTTL || d.MaxTTL != pool.DefaultMaxTTL || c.MaxBoots != pool.DefaultMaxBoots {
		t.Errorf("defaults not applied: %+v (max_boots %d)", d, c.MaxBoots)
	}
}

func TestWithNodeStatus(t *testing.T) {
	st := DesktopPoolStatus{Nodes: []PoolNodeStatus{{Node: "a", Free: 1}, {Node: "c", Free: 3}}}
	got := withNodeStatus(st, PoolNodeStatus{Node: "b", Leased: 2})
	got = withNodeStatus(got, PoolNodeStatus{Node: "a", Free: 5})
	want := []PoolNodeStatus{{Node: "a", Free: 5}, {Node: "b", Leased: 2}, {Node: "c", Free: 3}}
	if fmt.Sprint(got.Nodes) != fmt.Sprint(want) || st.Nodes[0].Free != 1 {
		t.Fatalf("nodes %+v, want %+v (and the input unchanged: %+v)", got.Nodes, want, st.Nodes)
	}
	counts := nodeCounts("n", []pool.Desktop{{Pool: "p", State: pool.DesktopFree}, {Pool: "p", State: pool.DesktopLeased},
		{Pool: "q", State: pool.DesktopBooting}, {Pool: "p", State: pool.DesktopFree}})
	if c := counts["p"]; c != (PoolNodeStatus{Node: "n", Free: 2, Leased: 1}) {
		t.Fatalf("counts p = %+v", c)
	}
}

func TestUnavailable(t *testing.T) {
	gr := schema.GroupResource{Group: Group, Resource: "desktops"}
	refused := &url.Error{Op: "Put", URL: "https://127.0.0.1:1", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), true},
		{apierrors.NewServiceUnavailable("etcd"), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewTimeoutError("x", 1), true},
		{apierrors.NewInternalError(errors.New("boom")), true},
		{apierrors.NewConflict(gr, "n.v", errors.New("rv")), false},
		{apierrors.NewNotFound(gr, "n.v"), false},
		{apierrors.NewForbidden(gr, "n.v", errors.New("rbac")), false},
		{apierrors.NewBadRequest("bad"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := unavailable(tc.err); got != tc.want {
			t.Errorf("unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if err := apiError("claim x", refused); !errors.Is(err, ErrUnavailable) {
		t.Errorf("apiError(refused) = %v: not ErrUnavailable", err)
	}
}

func TestDecideClaim(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	alive := func(n string) bool { return n != "lost" }
	old := now.Add(-time.Minute)
	for _, tc := range []struct {
		name      string
		st        DesktopClaimStatus
		inFlight  bool
		lastTry   time.Time
		firstSeen time.Time
		local     bool
		want      claimAction
	}{
		{"new claim, local free", DesktopClaimStatus{}, false, time.Time{}, now, true, claimTake},
		{"new claim, nothing local: defer to a node that has one", DesktopClaimStatus{}, false, time.Time{}, now, false, claimSkip},
		{"new claim, nothing local, deferred long enough", DesktopClaimStatus{}, false, time.Time{}, old, false, claimTake},
		{"pending after no desktop, tried just now", DesktopClaimStatus{Phase: ClaimPending, Message: "no free desktop"}, false, now, old, true, claimSkip},
		{"pending after no desktop, tried long ago", DesktopClaimStatus{Phase: ClaimPending, Message: "no free desktop"}, false, old, old, true, claimTake},
		{"binding by a live other", DesktopClaimStatus{Phase: ClaimBinding, BoundBy: "b"}, false, time.Time{}, old, true, claimSkip},
		{"binding by a lost node: retake", DesktopClaimStatus{Phase: ClaimBinding, BoundBy: "lost"}, false, time.Time{}, old, true, claimTake},
		{"binding by self in flight", DesktopClaimStatus{Phase: ClaimBinding, BoundBy: "self"}, true, time.Time{}, old, true, claimSkip},
		{"binding by self after a restart", DesktopClaimStatus{Phase: ClaimBinding, BoundBy: "self"}, false, time.Time{}, old, true, claimTake},
		{"bound", DesktopClaimStatus{Phase: ClaimBound, BoundBy: "lost"}, false, time.Time{}, old, true, claimSkip},
		{"ended", DesktopClaimStatus{Phase: ClaimEnded}, false, time.Time{}, old, true, claimSkip},
	} {
		if got := decideClaim(tc.st, "self", alive, tc.inFlight, tc.lastTry, tc.firstSeen, tc.local, now); got != tc.want {
			t.Errorf("%s: decideClaim = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLostAfter(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	period := 5 * time.Second
	for _, tc := range []struct {
		name                    string
		deadline, upSince, last time.Time
		want                    bool
	}{
		{"apiserver up all along, a period past the deadline", t0, t0.Add(-time.Hour), t0.Add(period), true},
		{"apiserver up, less than a period past", t0, t0.Add(-time.Hour), t0.Add(period - time.Second), false},
		{"our renewals failing since before the deadline (outage)", t0, t0.Add(-time.Hour), t0.Add(-time.Second), false},
		{"apiserver back just now: the node has had no period to renew", t0, t0.Add(time.Minute), t0.Add(time.Minute + time.Second), false},
		{"apiserver back a period ago and still no renewal", t0, t0.Add(time.Minute), t0.Add(time.Minute + period), true},
	} {
		if got := lostAfter(tc.deadline, tc.upSince, tc.last, period); got != tc.want {
			t.Errorf("%s: lostAfter = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPoolEpisode: every field of the owner's answer reaches the claimer's
// pool.Episode (what web turns back into the API answer).
func TestPoolEpisode(t *testing.T) {
	var e api.Episode
	fill.All(&e)
	got := poolEpisode(e)
	// Recording and TrajectoryURL come from the trajectories, not the pool.
	if bad := fill.Converted(e, got, fill.Skip{Renamed: []string{"ViewerURL", "OSWorldAddress", "Node", "URL",
		"Recording", "TrajectoryURL"}}); len(bad) != 0 {
		t.Fatal(bad)
	}
}

func TestLostWhileAway(t *testing.T) {
	now := time.Now()
	dur := int32(4)
	lease := func(name string, renewed time.Time) coordv1.Lease {
		h := name
		rt := metav1.NewMicroTime(renewed)
		return coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(name)},
			Spec: coordv1.LeaseSpec{HolderIdentity: &h, RenewTime: &rt, LeaseDurationSeconds: &dur}}
	}
	for _, c := range []struct {
		name   string
		mine   time.Time
		others []time.Time
		want   bool
	}{
		{"quick restart: my lease still live", now.Add(-2 * time.Second), []time.Time{now}, false},
		{"killed, others renewed after my expiry", now.Add(-30 * time.Second), []time.Time{now.Add(-time.Second)}, true},
		{"apiserver was down: nobody renewed after my expiry", now.Add(-30 * time.Second), []time.Time{now.Add(-29 * time.Second)}, false},
		{"the only node, expired", now.Add(-30 * time.Second), nil, true},
	} {
		mine := lease("me", c.mine)
		all := []coordv1.Lease{mine}
		for i, o := range c.others {
			all = append(all, lease(fmt.Sprintf("n%d", i), o))
		}
		if got := lostWhileAway(&mine, all, now); got != c.want {
			t.Errorf("%s: lostWhileAway %v, want %v", c.name, got, c.want)
		}
	}
}

// A bind that finishes while a publisher pass runs on a snapshot taken
// before it: the fresh claim must not be written back to free (bench/cluster
// found it 1,521 times in 500 claims).
func TestPublishPassKeepsBindFinishedMidPass(t *testing.T) {
	passStart := time.Now()
	boundAt := passStart.Add(5 * time.Millisecond)
	claimed := metav1.NewTime(passStart.Add(-20 * time.Millisecond))
	known := func(ep string) (time.Time, bool) { return boundAt, ep == "ep-0123456789ab" }
	stale := pool.Desktop{VM: "vm1", Pool: "p", State: pool.DesktopFree}
	cur := DesktopStatus{State: pool.DesktopLeased, Episode: "ep-0123456789ab", ClaimedBy: "b", ClaimedAt: &claimed}
	if st, write := desiredStatus(stale, cur, knownBy(known, passStart), "a", passStart, DefaultBindGrace); write {
		t.Fatalf("publisher pass from before the bind writes %+v over the fresh claim", st)
	}
	// Without the snapshot rule the same pass would write it free.
	if _, write := desiredStatus(stale, cur, known, "a", passStart, DefaultBindGrace); !write {
		t.Fatal("the test no longer shows the race it guards against")
	}
}
