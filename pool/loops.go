package pool

import (
	"context"
	"errors"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// The Manager's three loops. Each owns one kind of background work and
// talks to the others only through the member state machine:
//   - eventLoop turns vmm's lifecycle events into died/destroyed inputs;
//   - refillLoop evicts, cleans and boots to keep each pool at min_warm;
//   - reapLoop ends leases past their TTL.

// eventLoop feeds vmm's lifecycle events to the members they concern: a
// warm VM that died leaves the pool at once (destroyed, then replaced by the
// refill), a leased one ends its episode (vm_died), and a VM destroyed
// behind the pool's back is dropped.
//
// Every ReconcileInterval it also compares the members with vmm's List.
// This is a safety net, not the mechanism: libvirt delivers lifecycle
// events over its connection, and a death while that connection is down
// (libvirtd restarting, vmm reconnecting) is not replayed as an event.
func (m *Manager) eventLoop(events <-chan vmm.Event) {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				// The farm closed its events; keep the safety reconcile.
				events = nil
				continue
			}
			m.handleEvent(ev)
		case <-t.C:
			m.reconcile()
		}
	}
}

// diedEarlyKept is how long a death that beat its VM's Create is kept: far
// longer than any boot.
const diedEarlyKept = 10 * time.Minute

func (m *Manager) handleEvent(ev vmm.Event) {
	var in input
	switch ev.Kind {
	case vmm.EventCreated:
		m.creatingEvent(ev.VM)
		return
	case vmm.EventDied:
		in = inDied
	case vmm.EventDestroyed:
		in = inDestroyed
	default:
		return
	}
	m.mu.Lock()
	if _, ok := m.creating[ev.VM.ID]; ok && in == inDestroyed {
		// A boot that failed after vmm defined its VM.
		delete(m.creating, ev.VM.ID)
		m.changedLocked()
	}
	mb := m.members[ev.VM.ID]
	if mb == nil {
		if in == inDied && m.pools[ev.VM.Labels[LabelPool]] != nil {
			// A boot of ours whose Create has not returned yet.
			now := m.opts.Now()
			for id, at := range m.diedEarly {
				if now.Sub(at) > diedEarlyKept {
					delete(m.diedEarly, id)
				}
			}
			m.diedEarly[ev.VM.ID] = now
		}
		m.mu.Unlock()
		return
	}
	m.observeLocked(mb, in, ev.Reason, "event")
	m.mu.Unlock()
}

// creatingEvent records a VM vmm defined for one of the pool's boots, until
// its Create returns (bootedLocked) or it is destroyed. Events come in
// order per VM, so one that comes after its Create returned finds the
// member and is ignored, and one of a VM destroyed since finds its
// destroyed event behind it.
func (m *Manager) creatingEvent(vm vmm.VM) {
	pool := vm.Labels[LabelPool]
	if pool == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.members[vm.ID] == nil && !m.closed {
		m.creating[vm.ID] = pool
		m.changedLocked()
	}
}

// observeLocked feeds a died or destroyed observation to mb and carries
// out its effects in the background (ending its episode when the table
// says so).
func (m *Manager) observeLocked(mb *member, in input, why, op string) {
	state := mb.state
	t := m.targetLocked(mb, op)
	t.reason = ReasonVMDied
	if in == inDestroyed {
		t.reason = ReasonVMGone
	}
	fx, err := m.stepLocked(mb, in)
	if err != nil {
		return
	}
	m.goCarry(mb, fx, t, carrying{})
	if state == stDestroying || fx == 0 {
		// Our own destroy finishing, or a death the reset in flight will
		// report (and count) itself.
		return
	}
	kind := "died"
	if in == inDestroyed {
		kind = "vanished"
	}
	m.met.failures.WithLabelValues(mb.pool, kind).Inc()
	m.log.Warn("pool vm "+kind, "op", op, "vm", mb.vm, "pool", mb.pool, "state", state, "reason", why)
}

// reconcile is the safety net behind the events: members whose VM is gone
// or broken are fed destroyed or died, and a member left destroying by a
// failed Destroy is destroyed again.
func (m *Manager) reconcile() {
	ctx, cancel := context.WithTimeout(m.ctx, m.opts.ListTimeout)
	vms, err := m.vms.List(ctx)
	cancel()
	if err != nil {
		m.log.Warn("reconcile pools: list vms", "op", "reconcile", "err", err)
		return
	}
	byID := make(map[string]vmm.VM, len(vms))
	for _, v := range vms {
		byID[v.ID] = v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mb := range m.members {
		if mb.vm == "" {
			continue
		}
		v, ok := byID[mb.vm]
		switch {
		case !ok:
			m.observeLocked(mb, inDestroyed, "not listed by vmm", "reconcile")
		case mb.state == stDestroying:
			// A destroy that failed: destroying's effect, again.
			m.goCarry(mb, fxDestroy, m.targetLocked(mb, "reconcile"), carrying{})
		case v.State == vmm.StateBroken:
			m.observeLocked(mb, inDied, "broken", "reconcile")
		}
	}
}

// refillLoop keeps each pool at min_warm: it evicts warm VMs that no longer
// fit, cleans dirty warm VMs, and boots one VM at a time for the first pool
// short of warm VMs (at most Config.MaxBoots across the farm, with Starts).
// It runs when poked (a member changed) and when a backoff ends.
func (m *Manager) refillLoop() {
	defer m.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		for m.ctx.Err() == nil && m.refillOnce() {
		}
		wait := time.Hour
		m.mu.Lock()
		now := m.opts.Now()
		for _, p := range m.pools {
			if d := p.retryAt.Sub(now); p.fails > 0 && d > 0 && d < wait {
				wait = d
			}
		}
		m.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-m.ctx.Done():
			return
		case <-m.kick:
		case <-timer.C:
		}
	}
}

// refillOnce does one piece of refill work and reports whether it did any.
func (m *Manager) refillOnce() bool {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return false
	}
	// Evict warm VMs that no longer fit (pool removed, spec changed, over max).
	for _, mb := range m.members {
		if mb.state == stWarm && !mb.reserved && m.overLocked(mb) {
			t := m.targetLocked(mb, "evict")
			fx, _ := m.stepLocked(mb, inEvict)
			m.mu.Unlock()
			m.log.Info("destroying warm vm that no longer fits its pool", "op", "refill", "vm", mb.vm, "pool", mb.pool)
			m.carry(mb, fx, t, carrying{})
			return true
		}
	}
	// Clean dirty warm VMs, so a start finds them leasable.
	for _, mb := range m.members {
		if mb.state == stWarm && mb.dirty && !mb.reserved {
			t := m.targetLocked(mb, "clean")
			fx, err := m.stepLocked(mb, inClean)
			m.mu.Unlock()
			if err == nil {
				m.log.Info("resetting a dirty warm vm", "op", "clean", "vm", mb.vm, "pool", mb.pool)
				m.carry(mb, fx, t, m.cleaning(mb))
			}
			return true
		}
	}
	now := m.opts.Now()
	var p *poolRT
	for _, name := range m.poolNames() {
		c, cand := m.countLocked(name), m.pools[name]
		if c.future < cand.cfg.MinWarm && c.total < cand.cfg.Max && !now.Before(cand.retryAt) {
			p = cand
			break
		}
	}
	if p == nil {
		m.mu.Unlock()
		return false
	}
	mb, cfg := m.addBootingLocked(p, false)
	m.mu.Unlock()

	var (
		vm  vmm.VM
		err error
	)
	select {
	case m.bootSem <- struct{}{}:
		vm, _, err = m.boot(m.ctx, cfg, "refill")
		<-m.bootSem
	case <-m.ctx.Done():
		err = m.ctx.Err()
	}
	m.mu.Lock()
	if err != nil {
		m.stepCarryLocked(mb, inBootFailed, "refill")
		if m.ctx.Err() == nil {
			p.fails++
			backoff := m.opts.BootRetry << min(p.fails-1, 10)
			p.lastErr, p.errAt, p.retryAt = err.Error(), m.opts.Now().UTC(), m.opts.Now().UTC().Add(backoff)
			m.log.Warn("pool boot refused; backing off", "op", "refill", "pool", p.cfg.Name, "retry_in", backoff,
				"host_full", errors.Is(err, vmm.ErrInsufficientResources), "err", err)
		}
		m.mu.Unlock()
		return false
	}
	p.fails, p.lastErr, p.retryAt = 0, "", time.Time{}
	fx := m.bootedLocked(p, mb, vm)
	t := m.targetLocked(mb, "refill")
	m.mu.Unlock()
	m.carry(mb, fx, t, carrying{})
	m.log.Info("warm vm ready", "op", "refill", "vm", vm.ID, "pool", cfg.Name)
	return true
}

// reapLoop ends leases past their TTL.
func (m *Manager) reapLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		now := m.opts.Now()
		var expired []string
		m.mu.Lock()
		for id, l := range m.leases {
			if l.ep.State == EpisodeActive && !now.Before(l.ep.ExpiresAt) {
				expired = append(expired, id)
			}
		}
		m.mu.Unlock()
		for _, id := range expired {
			m.log.Info("lease expired", "op", "reap", "episode", id)
			m.goEnd(id, ReasonExpired)
		}
	}
}
