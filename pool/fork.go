package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
)

// Forks (issue 17): new episodes of an episode's pool, each on a new VM
// that starts from the episode's VM as it is now (vmm's Fork).

// Fork starts n new episodes of the pool of the active episode episodeID,
// each leasing a VM that vmm forks from that episode's VM: the new desktops
// start from its current RAM and disk, and it keeps running. The new VMs
// are members of the pool like any other (LabelPool): they count against
// its max (a fork that does not fit is ErrPoolFull, naming the max and how
// many would fit; unleased warm VMs are destroyed to make room), and when
// their episodes end they are reset to the ready snapshot and stay warm. Each episode has its own lease of ttl (0: the
// pool's default). vmm admits all n before it makes any; its refusal (a
// *vmm.LimitError wrapping vmm.ErrInsufficientResources) says how many
// would fit. On error no new episode is left.
func (m *Manager) Fork(ctx context.Context, episodeID string, n int, ttl time.Duration) ([]Episode, error) {
	if n < 1 || n > vmm.MaxFork {
		return nil, fmt.Errorf("fork episode %s: %w", episodeID,
			fielderr.Newf("count", vmm.ErrInvalid, "must be in [1, %d], got %d", vmm.MaxFork, n))
	}
	vm, callCtx, release, err := m.Acquire(ctx, episodeID)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	defer release() // the source cannot end under its fork
	src, err := m.Get(episodeID)
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	return m.forkInto(callCtx, src.Pool, n, ttl, episodeID, vm, vmm.ForkOptions{Count: n})
}

// ForkFrom starts n new episodes of pool poolName, each leasing a VM that
// vmm makes from the fork template t (made here by vmm's ExportFork or
// received from another node by its ImportFork), as Fork does from an
// episode: the same room in the pool, admission, leases and undo. t
// stays for its owner to remove.
func (m *Manager) ForkFrom(ctx context.Context, poolName string, t *vmm.ForkTemplate, n int, ttl time.Duration) ([]Episode, error) {
	if n < 1 || n > vmm.MaxFork {
		return nil, fmt.Errorf("fork from a template: %w",
			fielderr.Newf("count", vmm.ErrInvalid, "must be in [1, %d], got %d", vmm.MaxFork, n))
	}
	return m.forkInto(ctx, poolName, n, ttl, "template of vm "+t.Info.Source, "", vmm.ForkOptions{Count: n, Template: t})
}

// ForkRoom is how many new VMs a fork into pool poolName could have now:
// its room under its max, counting its unleased warm VMs as room (as a
// fork counts them, reserveFork).
func (m *Manager) ForkRoom(poolName string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[poolName]
	if !ok {
		return 0, fmt.Errorf("pool %q: %w", poolName, ErrUnknownPool)
	}
	room, spares := m.forkRoomLocked(p)
	return max(room, 0) + len(spares), nil
}

// forkRoomLocked is p's room under its max and its unleased warm VMs.
func (m *Manager) forkRoomLocked(p *poolRT) (int, []*member) {
	c := m.countLocked(p.cfg.Name)
	room := p.cfg.Max - (c.total - c.dying)
	var spares []*member
	for _, mb := range m.members {
		if mb.pool == p.cfg.Name && mb.state == stWarm && !mb.reserved {
			spares = append(spares, mb)
		}
	}
	return room, spares
}

// forkInto is a fork of n new episodes of pool poolName from source (an
// episode, or a template), whose VM vm (or none) vmm forks with opts.
func (m *Manager) forkInto(ctx context.Context, poolName string, n int, ttl time.Duration, source, vm string, opts vmm.ForkOptions) ([]Episode, error) {
	episodeID := source
	p, ttl, err := m.startPool(poolName, ttl)
	if err != nil {
		return nil, fmt.Errorf("fork episode %s: %w", episodeID, err)
	}
	mbs, err := m.reserveFork(p, n)
	if err != nil {
		return nil, fmt.Errorf("fork episode %s of pool %s: %w", episodeID, p.cfg.Name, err)
	}
	start := time.Now()
	m.log.Debug("pool fork started", "op", "fork", "episode", episodeID, "vm", vm, "pool", p.cfg.Name, "count", n)
	opts.Labels = map[string]string{LabelPool: p.cfg.Name}
	vms, err := m.vms.Fork(ctx, vm, opts)
	took := time.Since(start)
	if err == nil && len(vms) != n {
		err = fmt.Errorf("vmm forked %d vms of %d asked", len(vms), n)
		m.goDestroyForked(vms, "fork")
	}
	if err != nil {
		for _, mb := range mbs {
			m.bootFailed(mb, "fork")
		}
		if ctx.Err() == nil {
			m.met.failures.WithLabelValues(p.cfg.Name, "fork").Inc()
		}
		if errors.Is(err, vmm.ErrInsufficientResources) {
			m.met.refused.WithLabelValues(p.cfg.Name, "host_full").Inc()
		}
		m.log.Warn("pool fork failed", "op", "fork", "episode", episodeID, "vm", vm, "pool", p.cfg.Name, "count", n,
			"duration", took.Round(time.Millisecond), "err", err)
		return nil, fmt.Errorf("fork episode %s (vm %s): %w", episodeID, vm, err)
	}
	grants, err := m.leaseForked(p, mbs, vms, episodeID, ttl, took)
	if err != nil {
		return nil, fmt.Errorf("fork episode %s (vm %s): %w", episodeID, vm, err)
	}
	var eps []Episode
	for i, g := range grants {
		ep, err := m.finishLease(g)
		if err != nil {
			// Undo the whole fork: the leases already handed out end
			// (their VMs go back to the pool), the rest were never out.
			for _, g := range grants[i+1:] {
				m.mu.Lock()
				m.abortLocked(g)
				m.mu.Unlock()
			}
			for _, e := range eps {
				m.goEnd(e.ID, ReasonDeleted)
			}
			return nil, fmt.Errorf("fork episode %s (vm %s): %w", episodeID, vm, err)
		}
		eps = append(eps, ep)
	}
	m.log.Info("episode forked", "op", "fork", "episode", episodeID, "vm", vm, "pool", p.cfg.Name, "count", n,
		"duration", took.Round(time.Millisecond))
	return eps, nil
}

// reserveFork adds n booting members to p for a fork, reserved for it, when
// p has room for them: under its max, counting the unleased warm VMs as
// room, since a fork makes new VMs and a warm VM is only a spare. The warm
// VMs whose room it takes are destroyed before it returns, so that vmm's
// admission counts their memory free.
func (m *Manager) reserveFork(p *poolRT, n int) ([]*member, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	if err := m.removedLocked(p); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	c := m.countLocked(p.cfg.Name)
	room, spares := m.forkRoomLocked(p)
	if fits := max(room, 0) + len(spares); n > fits {
		m.met.refused.WithLabelValues(p.cfg.Name, "pool_full").Inc()
		m.mu.Unlock()
		return nil, fielderr.Newf("count", ErrPoolFull, "a fork of %d does not fit under the pool's max of %d: %d would (%d VMs leased, booting or being reset)",
			n, p.cfg.Max, fits, c.total-c.dying-len(spares))
	}
	type evicted struct {
		mb *member
		fx effects
		t  target
	}
	var out []evicted
	for _, mb := range spares[:max(n-room, 0)] {
		t := m.targetLocked(mb, "fork")
		if fx, err := m.stepLocked(mb, inEvict); err == nil {
			out = append(out, evicted{mb, fx, t})
		}
	}
	mbs := make([]*member, n)
	for i := range mbs {
		mbs[i], _ = m.addBootingLocked(p, true)
	}
	m.mu.Unlock()
	for _, e := range out {
		m.carry(e.mb, e.fx, e.t, carrying{})
	}
	if len(out) > 0 {
		m.log.Info("warm vms destroyed for a fork", "op", "fork", "pool", p.cfg.Name, "count", len(out))
	}
	return mbs, nil
}

// leaseForked records the VMs a fork made as the members reserved for
// them and leases each to a new episode. A VM that died meanwhile (or a
// pool removed) undoes them all: the VMs not leased are the pool's to
// destroy or clean, like any other boot's.
func (m *Manager) leaseForked(p *poolRT, mbs []*member, vms []vmm.VM, source string, ttl, took time.Duration) ([]grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fxs := make([]effects, len(vms))
	ok := m.removedLocked(p) == nil
	for i, vm := range vms {
		mbs[i].shape = shapeOf(vm) // the source's, which fitted its pool when it was leased
		fxs[i] = m.bootedLocked(p, mbs[i], vm)
		ok = ok && mbs[i].state == stWarm && !mbs[i].dirty
	}
	if !ok {
		for i, mb := range mbs {
			mb.reserved = false
			m.goCarry(mb, fxs[i], m.targetLocked(mb, "fork"), carrying{})
		}
		if err := m.removedLocked(p); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("a forked vm: %w before it was leased", vmm.ErrDead)
	}
	grants := make([]grant, len(vms))
	for i, mb := range mbs {
		g := m.leaseLocked(p, mb, newEpisodeID(), ttl, false, took, "fork")
		// Not at the ready snapshot: at the source's state.
		l := m.leases[g.ep.ID]
		l.ep.CleanStart = false
		g.ep, g.fx = l.ep, g.fx|fxs[i]
		grants[i] = g
	}
	m.log.Debug("pool fork leased", "op", "fork", "episode", source, "pool", p.cfg.Name, "count", len(grants))
	return grants, nil
}

// goDestroyForked destroys VMs a fork made that the pool does not take.
func (m *Manager) goDestroyForked(vms []vmm.VM, op string) {
	for _, vm := range vms {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if err := (managerFx{m}).destroy(target{vm: vm.ID, op: op}); err != nil {
				m.log.Warn("destroy forked vm", "op", op, "vm", vm.ID, "err", err)
			}
		}()
	}
}
