package cluster

import (
	"context"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReasonNodeLost ends the local episodes of an agent that finds, on its
// return, that its node was lost meanwhile: their holders were told
// node_lost by every other agent, and may have claimed elsewhere, so the
// episodes are over and their VMs are reset and offered again.
const ReasonNodeLost = "node_lost"

// wasLost reads this node's Lease and the others' as they are now, before
// this agent renews its own: was the node lost while this agent was away?
// A Lease that has not expired means a quick restart: the episodes go on.
// An expired one means lost only if the apiserver served meanwhile, which
// another node's renewal after the expiry shows (or there is no other
// node, whose claims could have gone elsewhere). An apiserver that does
// not answer decides nothing: the episodes go on.
func (a *Agent) wasLost(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	leases := a.kube.CoordinationV1().Leases(a.opts.Namespace)
	mine, err := leases.Get(cctx, LeaseName(a.opts.Node), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err != nil {
		return false
	}
	all, err := leases.List(cctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	return lostWhileAway(mine, all.Items, time.Now())
}

// lostWhileAway is wasLost's rule, on the Leases read.
func lostWhileAway(mine *coordv1.Lease, all []coordv1.Lease, now time.Time) bool {
	if leaseLive(mine, now) || mine.Spec.RenewTime == nil || mine.Spec.LeaseDurationSeconds == nil {
		return false
	}
	expired := mine.Spec.RenewTime.Add(time.Duration(*mine.Spec.LeaseDurationSeconds) * time.Second)
	others := 0
	for _, l := range all {
		if l.Name == mine.Name || l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			continue
		}
		others++
		if l.Spec.RenewTime.After(expired) {
			return true
		}
	}
	return others == 0
}

// endLostEpisodes ends every episode the local pool still holds, with
// ReasonNodeLost; the publisher then shows the VMs resetting and free.
func (a *Agent) endLostEpisodes(ctx context.Context) {
	for _, d := range a.opts.Local.Desktops() {
		if d.State != pool.DesktopLeased || d.Episode == "" {
			continue
		}
		a.log.Warn("ending an episode of a node that was lost while its agent was away", "op", "return",
			"episode", d.Episode, "vm", d.VM, "pool", d.Pool)
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if _, err := a.opts.Local.End(ctx, d.Episode, ReasonNodeLost); err != nil {
				a.log.Warn("end a lost node's episode failed", "op", "return", "episode", d.Episode, "vm", d.VM, "err", err)
			}
		}()
	}
}
