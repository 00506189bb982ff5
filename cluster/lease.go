package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationURL on a node Lease is the agent's advertise URL.
const AnnotationURL = "deskfarm.dev/url"

// leaseLoop creates the node Lease and renews it every third of its
// duration until ctx ends; a failed renewal is retried at the next tick, so
// an apiserver outage shorter than two thirds of a duration loses nothing.
func (a *Agent) leaseLoop(ctx context.Context) {
	every := a.opts.LeaseDuration / 3
	var lease *coordv1.Lease
	failing := true
	for {
		var err error
		lease, err = a.renew(ctx, lease)
		if err == nil {
			now := time.Now().UnixNano()
			if failing {
				a.upSince.Store(now)
			}
			a.lastRenew.Store(now)
			a.renewFail.Store(nil)
		} else if ctx.Err() == nil {
			f := &renewFailure{since: time.Now(), err: err}
			if last := a.renewFail.Load(); last != nil {
				f.since = last.since
			}
			a.renewFail.Store(f)
		}
		switch {
		case err != nil && !failing:
			a.log.Warn("node lease renewal failed", "op", "lease", "err", err)
			failing = true
		case err == nil && failing:
			a.log.Info("node lease renewed", "op", "lease")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// renewFailure is a run of failed Lease renewals: since its first, and
// the last one's error.
type renewFailure struct {
	since time.Time
	err   error
}

// Health is the agent's view of the apiserver from its Lease renewals.
func (a *Agent) Health() Health {
	h := Health{Node: a.opts.Node, LeaseDuration: a.opts.LeaseDuration}
	if t := a.lastRenew.Load(); t != 0 {
		h.LastRenewal = time.Unix(0, t)
	}
	if f := a.renewFail.Load(); f != nil {
		h.Since, h.Err = f.since, f.err
		return h
	}
	if t := a.upSince.Load(); t != 0 {
		h.Reachable, h.Since = true, time.Unix(0, t)
	}
	return h
}

// renew writes the Lease from last (the object of the last write, nil at
// first or after a conflict) and returns the stored object.
func (a *Agent) renew(ctx context.Context, last *coordv1.Lease) (*coordv1.Lease, error) {
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	leases := a.kube.CoordinationV1().Leases(a.opts.Namespace)
	name := LeaseName(a.opts.Node)
	if last == nil {
		got, err := leases.Get(cctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := a.leaseSpec(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.opts.Namespace}})
			out, err := leases.Create(cctx, l, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("create lease %s: %w", name, err)
			}
			a.n.leaseWrite.Add(1)
			return out, nil
		case err != nil:
			return nil, fmt.Errorf("get lease %s: %w", name, err)
		}
		last = got
	}
	out, err := leases.Update(cctx, a.leaseSpec(last.DeepCopy()), metav1.UpdateOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			a.n.conflicts.Add(1)
		}
		return nil, fmt.Errorf("renew lease %s: %w", name, err)
	}
	a.n.leaseWrite.Add(1)
	return out, nil
}

func (a *Agent) leaseSpec(l *coordv1.Lease) *coordv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	secs := int32(a.opts.LeaseDuration.Round(time.Second) / time.Second)
	if secs < 1 {
		secs = 1
	}
	holder := a.opts.Node
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder || l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationURL] = a.opts.AdvertiseURL
	return l
}

// alive says whether node's agent renewed its Lease within its duration
// (as this agent's cache has it): the claim path's rule, which skips a
// node at once. (With the apiserver away no claim lands anyway.) This
// agent is always alive to itself.
func (a *Agent) alive(node string, now time.Time) bool {
	if node == a.opts.Node {
		return true
	}
	l, err := a.leases.Get(LeaseName(node))
	if err != nil {
		return false
	}
	return leaseLive(l, now)
}

// lost says whether node's agent is lost as Locate tells a holder (a 410
// ends its episode for it): its Lease expired while this agent's own
// renewals show the apiserver was up for a whole renew period after that
// expiry, during which a live agent would have renewed. An apiserver
// outage ages every cached Lease, but no node is lost for it.
func (a *Agent) lost(node string) bool {
	if node == a.opts.Node {
		return false
	}
	if l, err := a.leases.Get(LeaseName(node)); err == nil && !a.expiredWhileUp(l) {
		return false
	}
	// The cache says lost (or has no Lease). After an apiserver restart
	// the Lease watch can lag the agents' renewals by seconds (the cluster
	// E2E saw a live node called lost right after an outage), and a 410
	// ends the holder's episode: read the Lease itself before saying so.
	// An apiserver that does not answer now decides nothing.
	ctx, cancel := context.WithTimeout(a.ctx, locateReadTimeout)
	defer cancel()
	fresh, err := a.kube.CoordinationV1().Leases(a.opts.Namespace).Get(ctx, LeaseName(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		return false
	}
	return a.expiredWhileUp(fresh)
}

// expiredWhileUp: l has expired, and this agent's own renewals show the
// apiserver served for a whole renew period after that expiry, during
// which a live agent would have renewed.
func (a *Agent) expiredWhileUp(l *coordv1.Lease) bool {
	if leaseLive(l, time.Now()) {
		return false
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	deadline := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	return lostAfter(deadline, time.Unix(0, a.upSince.Load()), time.Unix(0, a.lastRenew.Load()), a.opts.LeaseDuration/3)
}

// lostAfter: the apiserver, up since upSince and last written at lastOK,
// served for at least period after deadline.
func lostAfter(deadline, upSince, lastOK time.Time, period time.Duration) bool {
	from := deadline
	if upSince.After(from) {
		from = upSince
	}
	return lastOK.Sub(from) >= period
}

// leaseLive: now is within the Lease's renewTime + duration.
func leaseLive(l *coordv1.Lease, now time.Time) bool {
	if l == nil {
		return false
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	d := time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	return now.Before(l.Spec.RenewTime.Add(d))
}

// unavailable says err means the apiserver did not answer (or answered
// that it cannot serve now): the caller maps it to ErrUnavailable. An
// answer that is about the request (409, 404, 422, 403, ...) is not.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code >= 500 || code == 429 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
	}
	// Not an answer at all: refused, reset, DNS, TLS.
	return !errors.Is(err, context.Canceled)
}

// apiError maps an apiserver error on a claim's path: ErrUnavailable when
// it did not answer, else err wrapped with what was being done.
func apiError(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
