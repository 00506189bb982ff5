package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ReasonClaimDeleted ends an episode whose DesktopClaim was deleted.
const ReasonClaimDeleted = "claim_deleted"

// DesktopClaim pacing.
const (
	// claimRetryEvery: a claim that found no free desktop is tried again
	// by this agent at most this often.
	claimRetryEvery = 5 * time.Second
	// claimDefer: an agent with no free desktop of the claim's pool on its
	// own node waits this long before competing for the claim, so one that
	// has one usually binds it locally.
	claimDefer = time.Second
)

// claimState is the claim handler's memory.
type claimState struct {
	mu        sync.Mutex
	inFlight  map[string]bool      // claims this agent is binding now
	lastTry   map[string]time.Time // claims this agent tried and put back Pending
	firstSeen map[string]time.Time
}

func newClaimState() claimState {
	return claimState{inFlight: map[string]bool{}, lastTry: map[string]time.Time{}, firstSeen: map[string]time.Time{}}
}

// claimLoop serves DesktopClaims: on every claim event, after publisher
// passes, and every Resync.
func (a *Agent) claimLoop(ctx context.Context) {
	resync := time.NewTicker(a.opts.Resync)
	defer resync.Stop()
	retry := time.NewTicker(claimDefer)
	defer retry.Stop()
	for {
		a.serveClaims(ctx)
		select {
		case <-ctx.Done():
			return
		case <-a.claimKick:
		case <-retry.C:
		case <-resync.C:
			a.endOrphans(ctx)
		}
	}
}

// claimAction is what this agent does with a claim now.
type claimAction int

const (
	claimSkip claimAction = iota
	claimTake             // Pending (or Binding by a lost or restarted binder): take it
)

// decideClaim is the claim handler's rule for one claim.
func decideClaim(st DesktopClaimStatus, self string, alive func(string) bool, inFlight bool,
	lastTry, firstSeen time.Time, hasLocalFree bool, now time.Time) claimAction {
	switch st.Phase {
	case "", ClaimPending:
		if st.Message != "" && now.Sub(lastTry) < claimRetryEvery {
			return claimSkip
		}
		if !hasLocalFree && now.Sub(firstSeen) < claimDefer {
			return claimSkip
		}
		return claimTake
	case ClaimBinding:
		if st.BoundBy == self && !inFlight {
			return claimTake // this agent restarted mid-bind
		}
		if st.BoundBy != self && !alive(st.BoundBy) {
			return claimTake
		}
	}
	return claimSkip
}

func (a *Agent) serveClaims(ctx context.Context) {
	now := time.Now()
	cs := &a.claimState
	for _, o := range a.claimInf.GetIndexer().List() {
		c, err := DesktopClaimFrom(o.(*unstructured.Unstructured))
		if err != nil {
			continue
		}
		cs.mu.Lock()
		if _, ok := cs.firstSeen[c.Name]; !ok {
			cs.firstSeen[c.Name] = now
		}
		inFlight, lastTry, firstSeen := cs.inFlight[c.Name], cs.lastTry[c.Name], cs.firstSeen[c.Name]
		cs.mu.Unlock()
		free, _ := a.desktopInf.GetIndexer().ByIndex(indexFree, c.Spec.Pool)
		hasLocal := false
		for _, f := range free {
			if f.(*unstructured.Unstructured).GetLabels()[LabelNode] == a.opts.Node {
				hasLocal = true
				break
			}
		}
		if decideClaim(c.Status, a.opts.Node, func(n string) bool { return a.alive(n, now) }, inFlight,
			lastTry, firstSeen, hasLocal, now) != claimTake {
			continue
		}
		taken := *c
		taken.Status = DesktopClaimStatus{Phase: ClaimBinding, BoundBy: a.opts.Node}
		got, err := a.writeClaimStatus(ctx, &taken)
		if err != nil {
			continue // another agent took it (409), or the apiserver is away
		}
		cs.mu.Lock()
		cs.inFlight[c.Name] = true
		cs.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.bindClaim(ctx, got)
		}()
	}
}

// bindClaim claims a desktop for c (which this agent holds Binding) and
// writes the outcome.
func (a *Agent) bindClaim(ctx context.Context, c *DesktopClaim) {
	cs := &a.claimState
	defer func() {
		cs.mu.Lock()
		delete(cs.inFlight, c.Name)
		cs.mu.Unlock()
	}()
	log := a.log.With("op", "desktopclaim", "claim", c.Name)
	ttl := time.Duration(c.Spec.TTLSeconds) * time.Second
	p, ep, err := a.claim(ctx, c.Spec.Pool, ttl, c.Name)
	next := *c
	switch {
	case err == nil:
		exp := metav1.NewTime(ep.ExpiresAt)
		if ep.ExpiresAt.IsZero() {
			exp = metav1.NewTime(p.ExpiresAt)
		}
		next.Status = DesktopClaimStatus{Phase: ClaimBound, BoundBy: a.opts.Node, Episode: p.Episode,
			Node: p.Node, URL: p.URL, ViewerURL: strings.TrimRight(p.URL, "/") + "/episodes/" + p.Episode,
			Desktop: p.Desktop, ExpiresAt: &exp}
		log.Info("desktop claim bound", "episode", p.Episode, "vm", p.VM, "owner", p.Node)
	case errors.Is(err, ErrNoDesktop), errors.Is(err, ErrUnavailable):
		next.Status = DesktopClaimStatus{Phase: ClaimPending, Message: err.Error()}
		cs.mu.Lock()
		cs.lastTry[c.Name] = time.Now()
		cs.mu.Unlock()
	default:
		next.Status = DesktopClaimStatus{Phase: ClaimFailed, BoundBy: a.opts.Node, Message: err.Error()}
		log.Warn("desktop claim failed", "err", err)
	}
	for range 3 {
		if _, err := a.writeClaimStatus(ctx, &next); err == nil || !apierrors.IsConflict(err) {
			if err != nil && p.Episode != "" {
				log.Warn("desktop claim status not written", "episode", p.Episode, "err", err)
			}
			return
		}
		// Someone else wrote the claim (a kubectl edit?): reread, and keep
		// our outcome only if it is still ours to write.
		cur, err := a.getClaim(ctx, c.Name)
		if err != nil {
			if apierrors.IsNotFound(err) && p.Episode != "" {
				a.endLocalOrRemote(ctx, p, ReasonClaimDeleted)
			}
			return
		}
		if cur.Status.Phase != ClaimBinding || cur.Status.BoundBy != a.opts.Node {
			return
		}
		next.ObjectMeta = cur.ObjectMeta
	}
}

// endLocalOrRemote ends an episode this agent just bound for a claim that
// vanished meanwhile. A remote episode is left to its owner, which sees
// the claim gone on its resync (endOrphans).
func (a *Agent) endLocalOrRemote(ctx context.Context, p Placement, reason string) {
	if p.Local {
		if _, err := a.opts.Local.End(ctx, p.Episode, reason); err != nil {
			a.log.Warn("end episode of deleted claim", "op", "desktopclaim", "episode", p.Episode, "err", err)
		}
	}
}

func (a *Agent) getClaim(ctx context.Context, name string) (*DesktopClaim, error) {
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	u, err := a.claims.Get(cctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return DesktopClaimFrom(u)
}

// writeClaimStatus is a conditional status update of c (its
// resourceVersion as read).
func (a *Agent) writeClaimStatus(ctx context.Context, c *DesktopClaim) (*DesktopClaim, error) {
	u, err := c.Unstructured()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	out, err := a.claims.UpdateStatus(cctx, u, metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			a.n.conflicts.Add(1)
		}
		return nil, err
	}
	a.n.statusWrites.Add(1)
	return DesktopClaimFrom(out)
}

// claimDeleted ends the local episodes serving the deleted claim name.
func (a *Agent) claimDeleted(name string) {
	objs, _ := a.desktopInf.GetIndexer().ByIndex(indexNode, a.opts.Node)
	for _, o := range objs {
		d, err := DesktopFrom(o.(*unstructured.Unstructured))
		if err != nil || d.Status.Claim != name || d.Status.State != pool.DesktopLeased {
			continue
		}
		go a.endClaimEpisode(d) // off the informer's handler: an end resets the VM
	}
	a.claimState.mu.Lock()
	delete(a.claimState.lastTry, name)
	delete(a.claimState.firstSeen, name)
	a.claimState.mu.Unlock()
}

func (a *Agent) endClaimEpisode(d *Desktop) {
	ctx, cancel := context.WithTimeout(a.ctx, BindTimeout)
	defer cancel()
	if _, err := a.opts.Local.End(ctx, d.Status.Episode, ReasonClaimDeleted); err != nil {
		a.log.Warn("end episode of deleted claim", "op", "desktopclaim", "claim", d.Status.Claim,
			"episode", d.Status.Episode, "vm", d.Spec.VM, "err", err)
		return
	}
	a.log.Info("ended episode of deleted claim", "op", "desktopclaim", "claim", d.Status.Claim,
		"episode", d.Status.Episode, "vm", d.Spec.VM)
}

// endOrphans is the resync's safety net for a claim delete this agent's
// watch missed: a leased Desktop of this node serving a claim that no
// longer exists (confirmed by a read) has its episode ended.
func (a *Agent) endOrphans(ctx context.Context) {
	objs, _ := a.desktopInf.GetIndexer().ByIndex(indexNode, a.opts.Node)
	for _, o := range objs {
		d, err := DesktopFrom(o.(*unstructured.Unstructured))
		if err != nil || d.Status.Claim == "" || d.Status.State != pool.DesktopLeased {
			continue
		}
		if _, ok, _ := a.claimInf.GetIndexer().GetByKey(a.opts.Namespace + "/" + d.Status.Claim); ok {
			continue
		}
		if _, err := a.getClaim(ctx, d.Status.Claim); apierrors.IsNotFound(err) {
			a.endClaimEpisode(d)
		}
	}
}

// claimEpisodeEnded marks claim name Ended once its episode ended on this
// node (the publisher saw the lease go).
func (a *Agent) claimEpisodeEnded(name, episode string) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx := a.ctx
		for range 3 {
			c, err := a.getClaim(ctx, name)
			if err != nil || c.Status.Episode != episode || c.Status.Phase == ClaimEnded {
				return
			}
			c.Status.Phase = ClaimEnded
			c.Status.Message = fmt.Sprintf("episode %s ended", episode)
			if _, err := a.writeClaimStatus(ctx, c); !apierrors.IsConflict(err) {
				return
			}
		}
	}()
}
