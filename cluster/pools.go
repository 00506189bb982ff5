package cluster

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// poolStatusEvery coalesces this node's DesktopPool status writes: counts
// change on every claim, and the status is a view, not a protocol.
const poolStatusEvery = 2 * time.Second

// poolConfig translates the DesktopPools into the node's pool config, one
// pool per object (named after it), sorted by name. Zero fields are left
// for pool.Config.SetDefaults.
func poolConfig(pools []*DesktopPool) pool.Config {
	var c pool.Config
	for _, p := range pools {
		s := p.Spec
		c.Pools = append(c.Pools, pool.PoolConfig{
			Name: p.Name, Image: s.Image, MemoryMiB: s.MemoryMiB, VCPUs: s.VCPUs,
			Width: s.Width, Height: s.Height, MinWarm: s.WarmPerNode, Max: s.MaxPerNode,
			ScreenshotSize: s.ScreenshotSize, DefaultTTL: pool.Seconds(s.DefaultTTLSeconds),
			MaxTTL: pool.Seconds(s.MaxTTLSeconds), Network: s.Network, Forwards: slices.Clone(s.Forwards),
			Record: s.Record, RecordOptions: pool.RecordOptions{A11y: s.RecordOptions.A11y,
				KeepFiles: s.RecordOptions.KeepFiles, NoVideo: s.RecordOptions.NoVideo},
		})
	}
	slices.SortFunc(c.Pools, func(x, y pool.PoolConfig) int { return strings.Compare(x.Name, y.Name) })
	c.SetDefaults()
	return c
}

// nodeCounts counts this node's VMs per pool by state.
func nodeCounts(node string, ds []pool.Desktop) map[string]PoolNodeStatus {
	out := map[string]PoolNodeStatus{}
	for _, d := range ds {
		s := out[d.Pool]
		s.Node = node
		switch d.State {
		case pool.DesktopBooting:
			s.Booting++
		case pool.DesktopFree:
			s.Free++
		case pool.DesktopLeased:
			s.Leased++
		case pool.DesktopResetting:
			s.Resetting++
		case pool.DesktopDead:
			s.Dead++
		}
		out[d.Pool] = s
	}
	return out
}

// withNodeStatus is st with node's entry replaced by (or set to) n.
func withNodeStatus(st DesktopPoolStatus, n PoolNodeStatus) DesktopPoolStatus {
	out := DesktopPoolStatus{Nodes: slices.Clone(st.Nodes)}
	i := slices.IndexFunc(out.Nodes, func(e PoolNodeStatus) bool { return e.Node == n.Node })
	if i < 0 {
		out.Nodes = append(out.Nodes, n)
		slices.SortFunc(out.Nodes, func(x, y PoolNodeStatus) int { return strings.Compare(x.Node, y.Node) })
	} else {
		out.Nodes[i] = n
	}
	return out
}

// poolLoop applies the DesktopPools to the local pool when they change and
// keeps this node's entry of each one's status current.
func (a *Agent) poolLoop(ctx context.Context) {
	tick := time.NewTicker(poolStatusEvery)
	defer tick.Stop()
	var applied *pool.Config
	written := map[string]PoolNodeStatus{} // pool -> counts last written
	for {
		pools := a.cachedPools()
		cfg := poolConfig(pools)
		// An empty config is applied only to remove pools that were there:
		// a node that never saw a DesktopPool keeps what it has.
		if (applied == nil && len(cfg.Pools) > 0) || (applied != nil && !reflect.DeepEqual(*applied, cfg)) {
			if err := a.opts.Local.SetPools(ctx, cfg); err != nil {
				a.log.Warn("apply desktop pools failed", "op", "pools", "pools", len(cfg.Pools), "err", err)
			} else {
				a.log.Info("applied desktop pools", "op", "pools", "pools", len(cfg.Pools))
				c := cfg
				applied = &c
			}
		}
		counts := nodeCounts(a.opts.Node, a.opts.Local.Desktops())
		for _, p := range pools {
			n := counts[p.Name]
			n.Node = a.opts.Node
			if w, ok := written[p.Name]; ok && w == n {
				continue
			}
			if a.writePoolStatus(ctx, p, n) {
				written[p.Name] = n
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-a.poolKick:
		case <-tick.C:
		}
	}
}

func (a *Agent) writePoolStatus(ctx context.Context, p *DesktopPool, n PoolNodeStatus) bool {
	now := metav1.NewTime(time.Now())
	n.UpdatedAt = &now
	p.Status = withNodeStatus(p.Status, n)
	u, err := p.Unstructured()
	if err != nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	if _, err := a.pools.UpdateStatus(cctx, u, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			a.n.conflicts.Add(1) // another node's entry landed first: next tick
		} else {
			a.log.Debug("pool status write failed", "op", "pools", "pool", p.Name, "err", err)
		}
		return false
	}
	a.n.statusWrites.Add(1)
	return true
}

func (a *Agent) cachedPools() []*DesktopPool {
	var out []*DesktopPool
	for _, o := range a.poolInf.GetIndexer().List() {
		if p, err := DesktopPoolFrom(o.(*unstructured.Unstructured)); err == nil {
			out = append(out, p)
		}
	}
	return out
}
