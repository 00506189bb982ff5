package cluster

import (
	"context"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Publisher backoff after a failed write, doubling up to the cap.
const (
	publishBackoffMin = 200 * time.Millisecond
	publishBackoffMax = 5 * time.Second
	// knownKeep is how long an ended episode stays known: far beyond the
	// time its object takes to be republished.
	knownKeep = 10 * time.Minute
)

// publishLoop makes this node's Desktop objects match Local.Desktops: on
// Local.Changed, on a relevant watch event, every Resync, and again with
// backoff after a failed write, so an apiserver outage converges without a
// restart.
func (a *Agent) publishLoop(ctx context.Context) {
	resync := time.NewTicker(a.opts.Resync)
	defer resync.Stop()
	backoff := publishBackoffMin
	for {
		ok := a.publish(ctx)
		kick(a.claimKick) // a desktop freed may serve a pending DesktopClaim
		var retry <-chan time.Time
		if ok {
			backoff = publishBackoffMin
		} else {
			retry = time.After(backoff)
			backoff = min(2*backoff, publishBackoffMax)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.opts.Local.Changed():
		case <-a.publishKick:
		case <-resync.C:
		case <-retry:
			a.n.retries.Add(1)
		}
	}
}

// publish is one pass; it reports whether every write succeeded.
func (a *Agent) publish(ctx context.Context) bool {
	now := time.Now()
	locals := a.opts.Local.Desktops()
	for _, l := range locals {
		if l.State == pool.DesktopLeased && l.Episode != "" {
			a.markKnown(l.Episode, now)
		}
	}
	a.forgetKnown(knownKeep, now)
	objs := map[string]*Desktop{}
	cached, _ := a.desktopInf.GetIndexer().ByIndex(indexNode, a.opts.Node)
	for _, o := range cached {
		if d, err := DesktopFrom(o.(*unstructured.Unstructured)); err == nil {
			objs[d.Name] = d
		}
	}
	ok := true
	for _, l := range locals {
		name := DesktopName(a.opts.Node, l.VM)
		cur := objs[name]
		delete(objs, name)
		if cur == nil {
			ok = a.create(ctx, name, l, now) && ok
			continue
		}
		st, write := desiredStatus(l, cur.Status, knownBy(a.knownAt, now), a.opts.Node, now, a.opts.BindGrace)
		spec := a.spec(l)
		if !write && cur.Spec == spec {
			continue
		}
		prev := cur.Status
		next := *cur
		next.Spec, next.Status = spec, st
		if !a.write(ctx, &next) {
			ok = false
			continue
		}
		if prev.Claim != "" && prev.State == pool.DesktopLeased && (st.State != pool.DesktopLeased || st.Episode != prev.Episode) {
			a.claimEpisodeEnded(prev.Claim, prev.Episode)
		}
	}
	// Objects of this node with no local VM: the VM is gone (destroyed,
	// or lost across a restart).
	for _, d := range objs {
		ok = a.delete(ctx, d) && ok
	}
	return ok
}

// knownBy is known as of the pass's start, when it read Local.Desktops: an
// episode bound since then is not "held" by that snapshot, whose VM still
// shows free. Without it a bind finishing mid-pass had its fresh claim
// written back to free (bench/cluster saw 1,521 such writes in 500 claims).
func knownBy(known func(string) (time.Time, bool), at time.Time) func(string) (time.Time, bool) {
	return func(ep string) (time.Time, bool) {
		t, ok := known(ep)
		return t, ok && !t.After(at)
	}
}

func (a *Agent) spec(l pool.Desktop) DesktopSpec {
	s := DesktopSpec{Node: a.opts.Node, Pool: l.Pool, VM: l.VM, URL: a.opts.AdvertiseURL}
	if p := a.cachedPool(l.Pool); p != nil {
		s.Image = p.Spec.Image
	}
	return s
}

// desiredStatus is what the owner publishes for local VM l whose object
// shows cur, and whether that needs a write. The owner's view wins, except
// over a claim in flight: a leased object whose episode the local pool has
// not held is left alone until its claim is older than grace (a bind takes
// far less), and a local episode the object does not show yet (its claim
// write not yet in the cache) is left alone for grace too. Expiry drift
// alone never causes a write.
func desiredStatus(l pool.Desktop, cur DesktopStatus, known func(string) (time.Time, bool), self string,
	now time.Time, grace time.Duration) (DesktopStatus, bool) {
	localLeased := l.State == pool.DesktopLeased && l.Episode != ""
	if localLeased && cur.State == pool.DesktopLeased && cur.Episode == l.Episode {
		return cur, false
	}
	if !localLeased && cur.State == l.State && cur.Episode == "" {
		return cur, false
	}
	if cur.State == pool.DesktopLeased && cur.Episode != l.Episode {
		if _, held := known(cur.Episode); !held && cur.ClaimedAt != nil && now.Sub(cur.ClaimedAt.Time) < grace {
			return cur, false // a claim in flight: its bind is coming
		}
	}
	if localLeased {
		if first, ok := known(l.Episode); ok && now.Sub(first) < grace {
			return cur, false // bound here just now: the claim write will show up
		}
	}
	return ownerStatus(l, self, now), true
}

// ownerStatus is the status the owner writes for local VM l.
func ownerStatus(l pool.Desktop, self string, now time.Time) DesktopStatus {
	if l.State != pool.DesktopLeased || l.Episode == "" {
		return DesktopStatus{State: l.State}
	}
	st := DesktopStatus{State: pool.DesktopLeased, Episode: l.Episode, ClaimedBy: self}
	t := metav1.NewTime(now)
	st.ClaimedAt = &t
	if !l.ExpiresAt.IsZero() {
		e := metav1.NewTime(l.ExpiresAt)
		st.ExpiresAt = &e
	}
	return st
}

func (a *Agent) create(ctx context.Context, name string, l pool.Desktop, now time.Time) bool {
	d := &Desktop{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.opts.Namespace}, Spec: a.spec(l)}
	d.Status = ownerStatus(l, a.opts.Node, now)
	return a.put(ctx, d, true)
}

func (a *Agent) write(ctx context.Context, d *Desktop) bool { return a.put(ctx, d, false) }

// put creates or (conditionally, with d's resourceVersion) updates d.
func (a *Agent) put(ctx context.Context, d *Desktop, create bool) bool {
	d.Labels = desktopLabels(d)
	u, err := d.Unstructured()
	if err != nil {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	if create {
		_, err = a.desktops.Create(cctx, u, metav1.CreateOptions{})
	} else {
		_, err = a.desktops.Update(cctx, u, metav1.UpdateOptions{})
	}
	switch {
	case err == nil:
		a.n.desktopWrites.Add(1)
		a.n.publisherWrites.Add(1)
		a.log.Debug("published", "op", "publish", "vm", d.Spec.VM, "state", d.Status.State, "episode", d.Status.Episode)
		return true
	case apierrors.IsConflict(err):
		a.n.conflicts.Add(1) // a claim won the race, or the cache lags: next pass
	case apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err):
		// The cache lags: the next pass sees the object (or its absence).
	default:
		a.log.Warn("publish desktop failed", "op", "publish", "vm", d.Spec.VM, "state", d.Status.State, "err", err)
	}
	return false
}

func (a *Agent) delete(ctx context.Context, d *Desktop) bool {
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	rv := d.ResourceVersion
	err := a.desktops.Delete(cctx, d.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil:
		a.n.desktopWrites.Add(1)
		a.n.publisherWrites.Add(1)
		a.log.Info("deleted desktop without a VM", "op", "publish", "vm", d.Spec.VM)
		return true
	case apierrors.IsNotFound(err):
		return true
	case apierrors.IsConflict(err):
		a.n.conflicts.Add(1)
	default:
		a.log.Warn("delete desktop failed", "op", "publish", "vm", d.Spec.VM, "err", err)
	}
	return false
}
