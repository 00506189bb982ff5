package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/pool"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrNotClaimed: a bind named a Desktop that is not claimed by that
// episode on this node (the owner refuses it; the claimer gives it back).
var ErrNotClaimed = errors.New("desktop not claimed by that episode on this node")

// maxBindFailures bounds how many won desktops one Claim tries to bind.
const maxBindFailures = 3

// newEpisodeID is the claimer's episode id: "ep-" + 12 hex, as the pool's.
func newEpisodeID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ep-" + hex.EncodeToString(b)
}

// Claim leases a free desktop of poolName anywhere in the cluster,
// preferring this node, and binds it (see Front).
func (a *Agent) Claim(ctx context.Context, poolName string, ttl time.Duration) (Placement, pool.Episode, error) {
	return a.claim(ctx, poolName, ttl, "")
}

// claim is Claim for a DesktopClaim named claimName ("" for the API).
func (a *Agent) claim(ctx context.Context, poolName string, ttl time.Duration, claimName string) (Placement, pool.Episode, error) {
	if !a.synced() {
		return Placement{}, pool.Episode{}, fmt.Errorf("claim in pool %s: %w: caches not synced", poolName, ErrUnavailable)
	}
	if ttl <= 0 {
		ttl = a.defaultTTL(poolName)
	}
	bindFailures := 0
	var lastBind error
	for pass := 0; pass < 2; pass++ {
		var cands []*unstructured.Unstructured
		if pass == 0 {
			var skipped int
			cands, skipped = a.cachedCandidates(poolName)
			if len(cands) == 0 && skipped == 0 {
				break // nothing free anywhere as far as the cache knows
			}
		} else {
			// Every cached candidate was taken under us: the cache lags the
			// claims; one fresh List, then give up.
			a.n.relists.Add(1)
			var err error
			if cands, err = a.listCandidates(ctx, poolName); err != nil {
				return Placement{}, pool.Episode{}, err
			}
		}
		for _, u := range a.order(cands) {
			episode := newEpisodeID()
			won, err := a.tryClaim(ctx, u, episode, ttl, claimName)
			if err != nil {
				if errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
					return Placement{}, pool.Episode{}, err
				}
				if errors.Is(err, errLost) {
					continue
				}
				return Placement{}, pool.Episode{}, err
			}
			a.n.claims.Add(1)
			p := placement(won, a.opts.Node)
			ep, err := a.bind(ctx, won, ttl)
			if err != nil {
				a.log.Warn("bind failed; giving the desktop back", "op", "claim", "episode", episode,
					"vm", won.Spec.VM, "owner", won.Spec.Node, "err", err)
				a.giveBack(won)
				if ctx.Err() != nil {
					return Placement{}, pool.Episode{}, fmt.Errorf("claim %s: %w", won.Name, ctx.Err())
				}
				if bindFailures++; bindFailures >= maxBindFailures {
					// A stable code, not 500: no desktop could be had now
					// (bench/cluster met it with a node just killed).
					return Placement{}, pool.Episode{}, fmt.Errorf("claim in pool %s: %w: %d binds failed, the last: %w",
						poolName, ErrNoDesktop, bindFailures, err)
				}
				lastBind = err
				continue
			}
			a.n.bound.Add(1)
			a.noteClaim(p, u.GetResourceVersion())
			a.log.Debug("claimed", "op", "claim", "episode", episode, "vm", won.Spec.VM, "owner", won.Spec.Node)
			return p, ep, nil
		}
	}
	if lastBind != nil {
		return Placement{}, pool.Episode{}, lastBind
	}
	return Placement{}, pool.Episode{}, fmt.Errorf("pool %s: %w", poolName, ErrNoDesktop)
}

// errLost: the claim write lost (409, or the object is gone): try the next.
var errLost = errors.New("claim lost")

// tryClaim is write 1 of an episode: free -> leased with the cached
// resourceVersion, so the apiserver picks one winner.
func (a *Agent) tryClaim(ctx context.Context, u *unstructured.Unstructured, episode string, ttl time.Duration, claimName string) (*Desktop, error) {
	d, err := DesktopFrom(u)
	if err != nil {
		return nil, errLost
	}
	// One claim write per desktop at a time from this agent: its own
	// concurrent claimers would only make each other lose.
	a.mu.Lock()
	if a.claiming[d.Name] {
		a.mu.Unlock()
		return nil, errLost
	}
	a.claiming[d.Name] = true
	a.tried[d.Name] = d.ResourceVersion
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.claiming, d.Name)
		a.mu.Unlock()
	}()
	now := metav1.NewTime(time.Now())
	exp := metav1.NewTime(now.Add(ttl))
	d.Status = DesktopStatus{State: pool.DesktopLeased, Episode: episode, ClaimedBy: a.opts.Node,
		ClaimedAt: &now, ExpiresAt: &exp, Claim: claimName}
	d.Labels = desktopLabels(d)
	nu, err := d.Unstructured()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	out, err := a.desktops.Update(cctx, nu, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		a.n.conflicts.Add(1)
		a.n.claimConflicts.Add(1)
		return nil, errLost
	case apierrors.IsNotFound(err):
		return nil, errLost
	case err != nil:
		return nil, apiError("claim "+d.Name, err)
	}
	a.n.desktopWrites.Add(1)
	won, err := DesktopFrom(out)
	if err != nil {
		return nil, err
	}
	return won, nil
}

// cachedCandidates are the cache's free desktops of the pool, less those
// whose cached version this agent already wrote against.
func (a *Agent) cachedCandidates(poolName string) (cands []*unstructured.Unstructured, skipped int) {
	objs, _ := a.desktopInf.GetIndexer().ByIndex(indexFree, poolName)
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		u := o.(*unstructured.Unstructured)
		if a.tried[u.GetName()] == u.GetResourceVersion() {
			skipped++
			continue
		}
		out = append(out, u)
	}
	return out, skipped
}

// listCandidates reads the pool's free desktops from the apiserver.
func (a *Agent) listCandidates(ctx context.Context, poolName string) ([]*unstructured.Unstructured, error) {
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	sel := labels.SelectorFromSet(labels.Set{LabelPool: poolName, LabelState: string(pool.DesktopFree)})
	list, err := a.desktops.List(cctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, apiError("list free desktops of pool "+poolName, err)
	}
	out := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// order puts the candidates in claim order (candidateOrder) for this
// agent now, dropping lost nodes.
func (a *Agent) order(cands []*unstructured.Unstructured) []*unstructured.Unstructured {
	now := time.Now()
	a.mu.Lock()
	r1, r2 := a.rng.Uint64(), a.rng.Uint64()
	a.mu.Unlock()
	alive := map[string]bool{}
	return candidateOrder(cands, func(u *unstructured.Unstructured) string { return u.GetLabels()[LabelNode] },
		a.opts.Node, func(node string) bool {
			v, ok := alive[node]
			if !ok {
				v = a.alive(node, now)
				alive[node] = v
			}
			return v
		}, r1, r2)
}

// candidateOrder is the claim order: this node's candidates first, then
// the other live nodes' ones, each group rotated by a random offset (r1,
// r2) so concurrent claimers spread over the free desktops instead of all
// writing the first. Candidates of nodes alive says are lost are dropped.
func candidateOrder[T any](cands []T, nodeOf func(T) string, self string, alive func(string) bool, r1, r2 uint64) []T {
	var local, other []T
	for _, c := range cands {
		switch n := nodeOf(c); {
		case n == self:
			local = append(local, c)
		case alive(n):
			other = append(other, c)
		}
	}
	return append(rotate(local, r1), rotate(other, r2)...)
}

func rotate[T any](s []T, r uint64) []T {
	if len(s) < 2 {
		return s
	}
	k := int(r % uint64(len(s)))
	return append(s[k:len(s):len(s)], s[:k]...)
}

// placement is the claimed desktop as Front's callers see it.
func placement(d *Desktop, self string) Placement {
	p := Placement{Episode: d.Status.Episode, Desktop: d.Name, Node: d.Spec.Node, URL: d.Spec.URL,
		VM: d.Spec.VM, Pool: d.Spec.Pool, Local: d.Spec.Node == self}
	if d.Status.ExpiresAt != nil {
		p.ExpiresAt = d.Status.ExpiresAt.Time
	}
	return p
}

// bind starts the claimed episode on the desktop's owner.
func (a *Agent) bind(ctx context.Context, d *Desktop, ttl time.Duration) (pool.Episode, error) {
	if d.Spec.Node == a.opts.Node {
		ep, err := a.opts.Local.StartOn(ctx, d.Spec.Pool, d.Spec.VM, d.Status.Episode, ttl)
		if err != nil {
			return pool.Episode{}, fmt.Errorf("bind %s locally: %w", d.Name, err)
		}
		a.markKnown(ep.ID, time.Now())
		return ep, nil
	}
	return a.bindRemote(ctx, d, ttl)
}

// BindError is a bind route's refusal as the claimer saw it.
type BindError struct {
	Desktop, URL string
	Status       int
	Body         string
}

func (e *BindError) Error() string {
	return fmt.Sprintf("bind %s at %s: HTTP %d: %s", e.Desktop, e.URL, e.Status, e.Body)
}

// bindRemote is POST {owner}/v1/cluster/bind; the owner answers 200 with
// the episode as the API writes it (api.Episode).
func (a *Agent) bindRemote(ctx context.Context, d *Desktop, ttl time.Duration) (pool.Episode, error) {
	body, _ := json.Marshal(BindRequest{Desktop: d.Name, Episode: d.Status.Episode, Pool: d.Spec.Pool,
		VM: d.Spec.VM, TTLSeconds: ttl.Seconds()})
	url := strings.TrimRight(d.Spec.URL, "/") + BindPath
	cctx, cancel := context.WithTimeout(ctx, BindTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return pool.Episode{}, fmt.Errorf("bind %s: %w", d.Name, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ClusterTokenHeader, a.opts.ClusterToken)
	resp, err := a.http.Do(req)
	if err != nil {
		return pool.Episode{}, fmt.Errorf("bind %s at %s: %w", d.Name, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return pool.Episode{}, &BindError{Desktop: d.Name, URL: url, Status: resp.StatusCode,
			Body: strings.TrimSpace(string(b[:min(len(b), 512)]))}
	}
	var ep api.Episode
	if err := json.Unmarshal(b, &ep); err != nil {
		return pool.Episode{}, fmt.Errorf("bind %s at %s: decode answer: %w", d.Name, url, err)
	}
	return poolEpisode(ep), nil
}

// poolEpisode is the owner's answer as the claimer's caller takes it.
func poolEpisode(e api.Episode) pool.Episode {
	return pool.Episode{ID: e.ID, VM: e.VM, Pool: e.Pool, State: pool.EpisodeState(e.State), Warm: e.Warm,
		BootSeconds: e.BootSeconds, CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt, TTLSeconds: e.TTLSeconds,
		ScreenshotSize: e.ScreenshotSize, CleanStart: e.CleanStart, ResetBeforeLeaseMS: e.ResetBeforeLeaseMS,
		EndedAt: e.EndedAt, EndReason: e.EndReason, ResetSeconds: e.ResetSeconds, VMReplaced: e.VMReplaced}
}

// giveBack writes the desktop free again after a failed bind, if it is
// still this claim's. A failure here is only logged: the owner's publisher
// gives it back after the bind grace.
func (a *Agent) giveBack(d *Desktop) {
	ctx, cancel := context.WithTimeout(context.Background(), APITimeout)
	defer cancel()
	episode := d.Status.Episode
	for range 3 {
		if d.Status.State != pool.DesktopLeased || d.Status.Episode != episode {
			return
		}
		d.Status = DesktopStatus{State: pool.DesktopFree}
		d.Labels = desktopLabels(d)
		u, err := d.Unstructured()
		if err != nil {
			return
		}
		_, err = a.desktops.Update(ctx, u, metav1.UpdateOptions{})
		if err == nil {
			a.n.desktopWrites.Add(1)
			a.n.giveBacks.Add(1)
			return
		}
		if !apierrors.IsConflict(err) {
			a.log.Warn("give back failed", "op", "claim", "episode", episode, "vm", d.Spec.VM, "err", err)
			return
		}
		a.n.conflicts.Add(1)
		got, err := a.desktops.Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return
		}
		if d, err = DesktopFrom(got); err != nil {
			return
		}
	}
}

// Bind serves the bind route on the owner (see Front).
func (a *Agent) Bind(ctx context.Context, req BindRequest) (pool.Episode, error) {
	d, err := a.cachedDesktop(req.Desktop)
	if err != nil || !a.claimedFor(d, req) {
		// The claim write may not have reached this agent's watch yet.
		cctx, cancel := context.WithTimeout(ctx, APITimeout)
		u, gerr := a.desktops.Get(cctx, req.Desktop, metav1.GetOptions{})
		cancel()
		if gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return pool.Episode{}, fmt.Errorf("bind %s: %w", req.Desktop, ErrNotClaimed)
			}
			return pool.Episode{}, apiError("bind: read desktop "+req.Desktop, gerr)
		}
		if d, err = DesktopFrom(u); err != nil {
			return pool.Episode{}, err
		}
	}
	if !a.claimedFor(d, req) {
		return pool.Episode{}, fmt.Errorf("bind %s for episode %s (it shows node %s, state %s, episode %q): %w",
			req.Desktop, req.Episode, d.Spec.Node, d.Status.State, d.Status.Episode, ErrNotClaimed)
	}
	ttl := time.Duration(req.TTLSeconds * float64(time.Second))
	ep, err := a.opts.Local.StartOn(ctx, d.Spec.Pool, d.Spec.VM, req.Episode, ttl)
	if err != nil {
		return pool.Episode{}, fmt.Errorf("bind %s: %w", req.Desktop, err)
	}
	a.markKnown(ep.ID, time.Now())
	a.log.Debug("bound", "op", "bind", "episode", ep.ID, "vm", d.Spec.VM, "claimer", d.Status.ClaimedBy)
	return ep, nil
}

func (a *Agent) claimedFor(d *Desktop, req BindRequest) bool {
	return d != nil && d.Spec.Node == a.opts.Node && d.Status.State == pool.DesktopLeased &&
		d.Status.Episode == req.Episode && d.Spec.VM == req.VM && d.Spec.Pool == req.Pool
}

func (a *Agent) cachedDesktop(name string) (*Desktop, error) {
	o, ok, err := a.desktopInf.GetIndexer().GetByKey(a.opts.Namespace + "/" + name)
	if err != nil || !ok {
		return nil, fmt.Errorf("desktop %s not in cache", name)
	}
	return DesktopFrom(o.(*unstructured.Unstructured))
}

// recentClaim is a claim this agent won, and the resourceVersion it
// claimed against: while the cache still shows that version, the watch has
// not brought the claim yet.
type recentClaim struct {
	p     Placement
	stale string
	wonAt time.Time
}

// recentKeep bounds how long a recent claim is remembered.
const recentKeep = time.Minute

func (a *Agent) noteClaim(p Placement, staleRV string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for ep, r := range a.recent {
		if now.Sub(r.wonAt) > recentKeep {
			delete(a.recent, ep)
		}
	}
	a.recent[p.Episode] = recentClaim{p: p, stale: staleRV, wonAt: now}
}

// Locate finds the episode's desktop in the cache (see Front). It answers
// ErrNotFound when no Desktop holds it, and the placement with ErrNodeLost
// when its owner's Lease has expired. An episode this agent has just
// claimed is found even before its watch brings the claim.
func (a *Agent) Locate(episode string) (Placement, error) {
	objs, _ := a.desktopInf.GetIndexer().ByIndex(indexEpisode, episode)
	for _, o := range objs {
		d, err := DesktopFrom(o.(*unstructured.Unstructured))
		if err != nil || d.Status.State != pool.DesktopLeased || d.Status.Episode != episode {
			continue
		}
		return a.located(placement(d, a.opts.Node))
	}
	a.mu.Lock()
	r, ok := a.recent[episode]
	a.mu.Unlock()
	if ok {
		o, exists, _ := a.desktopInf.GetIndexer().GetByKey(a.opts.Namespace + "/" + r.p.Desktop)
		if exists && o.(*unstructured.Unstructured).GetResourceVersion() == r.stale {
			return a.located(r.p)
		}
	}
	// Not in the cache: an episode another agent claimed a moment ago may
	// not have reached this agent's watch yet (the cluster E2E's first
	// call through another agent met that). One read of the apiserver
	// settles it; an apiserver that does not answer leaves not-found.
	if d := a.readEpisode(episode); d != nil {
		return a.located(placement(d, a.opts.Node))
	}
	return Placement{}, fmt.Errorf("episode %s: %w", episode, ErrNotFound)
}

// locateReadTimeout bounds Locate's read of the apiserver on a cache miss:
// a call for an unknown episode must not hang on an apiserver away.
const locateReadTimeout = 2 * time.Second

// readEpisode reads the Desktop leased to episode from the apiserver; nil
// when none is, or the apiserver did not answer.
func (a *Agent) readEpisode(episode string) *Desktop {
	if !validEpisodeLabel(episode) {
		return nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, locateReadTimeout)
	defer cancel()
	sel := labels.SelectorFromSet(labels.Set{LabelEpisode: episode})
	list, err := a.desktops.List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil
	}
	for i := range list.Items {
		d, err := DesktopFrom(&list.Items[i])
		if err == nil && d.Status.State == pool.DesktopLeased && d.Status.Episode == episode {
			return d
		}
	}
	return nil
}

// validEpisodeLabel: episode can be a label value (a client's id is
// untrusted input, and a bad selector is an error, not a miss).
func validEpisodeLabel(episode string) bool {
	return len(validation.IsValidLabelValue(episode)) == 0 && episode != ""
}

func (a *Agent) located(p Placement) (Placement, error) {
	if a.lost(p.Node) {
		return p, fmt.Errorf("episode %s on node %s: %w", p.Episode, p.Node, ErrNodeLost)
	}
	return p, nil
}

// defaultTTL is the pool's declared default TTL, else pool.DefaultTTL.
func (a *Agent) defaultTTL(poolName string) time.Duration {
	if p := a.cachedPool(poolName); p != nil && p.Spec.DefaultTTLSeconds > 0 {
		return time.Duration(p.Spec.DefaultTTLSeconds) * time.Second
	}
	return pool.DefaultTTL.Duration()
}

func (a *Agent) cachedPool(name string) *DesktopPool {
	o, ok, err := a.poolInf.GetIndexer().GetByKey(a.opts.Namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	p, err := DesktopPoolFrom(o.(*unstructured.Unstructured))
	if err != nil {
		return nil
	}
	return p
}
