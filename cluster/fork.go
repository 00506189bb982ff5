package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Forks across nodes (issue 17 item 7). The node of the forked episode
// makes the fork template once and streams it once to each other node
// that takes a share (ForkPath, authenticated with the cluster token like
// the bind route); that node makes its share of VMs from the one copy and
// leases them, and its publisher shows them as leased Desktops, so the
// new episodes are reached through any agent as claimed ones are. This
// file only says where a share fits; web runs the transfer.

// ForkPath is the route on a node that takes a share of a fork: the body
// is the fork template, ForkInfoHeader describes it.
const (
	ForkPath       = "/v1/cluster/fork"
	ForkInfoHeader = "X-Deskfarm-Fork-Template"
)

// NodeRoom is the room a live node of the cluster has for a fork into a
// pool, as this agent's cache shows it.
type NodeRoom struct {
	Node string
	URL  string // the node agent's --advertise base URL
	Room int
}

// ForkRooms lists the other live nodes with room for a fork into
// poolName, most room first: each node's maxPerNode less its desktops of
// the pool that are booting, leased or resetting (a free desktop is room,
// as a fork counts it: it makes new VMs and destroys free ones for them).
// It reads only the cache; the nodes' own admission has the last word.
func (a *Agent) ForkRooms(poolName string) ([]NodeRoom, error) {
	if !a.synced() {
		return nil, fmt.Errorf("fork rooms: caches not synced: %w", ErrUnavailable)
	}
	o, ok, _ := a.poolInf.GetIndexer().GetByKey(a.opts.Namespace + "/" + poolName)
	if !ok {
		return nil, fmt.Errorf("fork rooms: pool %q: %w", poolName, pool.ErrUnknownPool)
	}
	dp, err := DesktopPoolFrom(o.(*unstructured.Unstructured))
	if err != nil {
		return nil, err
	}
	maxPerNode := poolConfig([]*DesktopPool{dp}).Pools[0].Max
	busy, urls := map[string]int{}, map[string]string{}
	now := time.Now()
	for _, o := range a.desktopInf.GetStore().List() {
		d, err := DesktopFrom(o.(*unstructured.Unstructured))
		if err != nil || d.Spec.Pool != poolName || d.Spec.Node == a.opts.Node || d.Spec.URL == "" {
			continue
		}
		if !a.alive(d.Spec.Node, now) {
			continue
		}
		urls[d.Spec.Node] = d.Spec.URL
		switch d.Status.State {
		case pool.DesktopBooting, pool.DesktopLeased, pool.DesktopResetting:
			busy[d.Spec.Node]++
		}
	}
	var out []NodeRoom
	for n, u := range urls {
		if r := maxPerNode - busy[n]; r > 0 {
			out = append(out, NodeRoom{Node: n, URL: u, Room: r})
		}
	}
	slices.SortFunc(out, func(x, y NodeRoom) int {
		if x.Room != y.Room {
			return y.Room - x.Room
		}
		return strings.Compare(x.Node, y.Node)
	})
	return out, nil
}
