package pool

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// SetPools makes cfg the pools, while the farm runs (a cluster agent's
// DesktopPools). cfg is checked as New's is: defaults filled, then
// Validate (ErrInvalidConfig, naming the pool and field), except that it
// may declare no pool at all (a cluster with no DesktopPool, or none left:
// every pool is removed). At once:
//   - a new pool is added, and the refill boots its warm VMs;
//   - a pool's min_warm and max, TTLs and screenshot size apply to what
//     comes next: starts, the refill, the eviction of VMs over max. A
//     running episode keeps its expiry;
//   - a pool whose shape changed (image, memory, vcpus, screen, network,
//     forwards) gets VMs of the new shape: its free VMs are destroyed and
//     replaced, its leased ones are destroyed when their episodes end;
//   - a removed pool takes no start (ErrUnknownPool) and no refill; its
//     free VMs are destroyed, its leased ones when their episodes end,
//     which work until then.
//
// MaxBoots stays New's (boots in flight hold its slots). Nothing is
// written: a VM keeps the pool label it was made with, and recovery takes
// every labelled VM in as a member of that pool, declared or not, so a
// restart with the new config destroys what it no longer wants instead of
// orphaning it. The change is announced on Changed.
func (m *Manager) SetPools(ctx context.Context, cfg Config) error {
	cfg.Pools = slices.Clone(cfg.Pools)
	for i := range cfg.Pools {
		cfg.Pools[i].Forwards = slices.Clone(cfg.Pools[i].Forwards)
	}
	cfg.SetDefaults()
	if err := cfg.validate(false); err != nil {
		return fmt.Errorf("set pools: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("set pools: %w", err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("set pools: %w", ErrClosed)
	}
	var added, removed, changed, reshaped []string
	next := make(map[string]*poolRT, len(cfg.Pools))
	for _, pc := range cfg.Pools {
		p := m.pools[pc.Name]
		switch {
		case p == nil:
			p = &poolRT{cfg: pc}
			added = append(added, pc.Name)
		case !samePool(p.cfg, pc):
			changed = append(changed, pc.Name)
			if p.cfg.shape() != pc.shape() {
				reshaped = append(reshaped, pc.Name)
			}
			// A boot refused under the old spec may pass under the new one.
			p.cfg, p.fails, p.retryAt = pc, 0, time.Time{}
		}
		next[pc.Name] = p
	}
	for _, name := range m.poolNames() {
		if next[name] == nil {
			removed = append(removed, name)
			// Their waiters look again, and find the pool gone.
			p := m.pools[name]
			for _, w := range p.waiters {
				w.ch <- grant{}
			}
			p.waiters = nil
		}
	}
	if cfg.MaxBoots != m.cfg.MaxBoots {
		m.log.Info("set pools: max_boots stays as the farm started", "op", "set_pools", "max_boots", m.cfg.MaxBoots, "asked", cfg.MaxBoots)
		cfg.MaxBoots = m.cfg.MaxBoots
	}
	m.pools, m.cfg = next, cfg
	for _, name := range changed {
		// More room (max), or VMs that no longer fit: the waiting starts
		// look again, and the refill evicts and boots.
		m.wakeLocked(name)
	}
	m.changedLocked()
	m.poke()
	m.mu.Unlock()
	m.log.Info("pools set", "op", "set_pools", "added", added, "removed", removed, "changed", changed, "reshaped", reshaped)
	return nil
}

// samePool says whether a and b declare the same pool, field by field
// (a field added to PoolConfig is compared without a change here).
func samePool(a, b PoolConfig) bool { return reflect.DeepEqual(a, b) }
