package pool

import (
	"context"
	"fmt"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// Pool members: feeding inputs to the lease state machine (lease.go);
// effects.go carries out the effects outside the lock.

// member is one VM of a pool; its state moves only through step (lease.go).
type member struct {
	key   string // VM id; "boot-N" while booting
	vm    string // "" while booting
	pool  string
	state memberState
	dirty bool
	// episode is the episode that holds the VM (leased, or resetting at its end).
	episode string
	// reserved is set on a boot made for one Start: the VM is that start's,
	// not offered to others.
	reserved bool
	// shape is what the VM was made with (for a boot, what it is being
	// made with): it fits its pool while that is the pool's shape.
	shape shape
	// cleanedMS is the duration of the reset that cleaned it since its last lease.
	cleanedMS int64
}

// stepLocked feeds in to mb's state machine and returns the effects to
// carry out (carry, after unlocking). A refused input changes nothing.
func (m *Manager) stepLocked(mb *member, in input) (effects, error) {
	from := mb.state
	to, dirty, fx, err := step(mb.state, mb.dirty, in)
	if err != nil {
		m.log.Debug("pool member input refused", "op", in.String(), "vm", mb.vm, "pool", mb.pool, "state", from, "dirty", mb.dirty)
		return 0, err
	}
	if from != to || dirty != mb.dirty {
		m.changedLocked()
	}
	mb.state, mb.dirty = to, dirty
	if to != stLeased && to != stResetting {
		mb.episode = ""
	}
	if to == stGone {
		delete(m.members, mb.key)
	}
	if from != to {
		m.log.Debug("pool member", "op", in.String(), "vm", mb.vm, "pool", mb.pool, "from", from, "to", to, "dirty", dirty)
	}
	return fx, nil
}

// wakeLocked hands clean warm VMs of a pool to waiting starts, first come
// first served, tells the other waiters to look again, and wakes the refill.
func (m *Manager) wakeLocked(pool string) {
	m.poke()
	p := m.pools[pool]
	if p == nil {
		return
	}
	for len(p.waiters) > 0 {
		mb := m.cleanWarmLocked(p)
		if mb == nil {
			break
		}
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		w.ch <- m.leaseLocked(p, mb, newEpisodeID(), w.ttl, true, 0, "lease")
	}
	for _, w := range p.waiters {
		w.ch <- grant{}
	}
	p.waiters = nil
}

// cleanWarmLocked returns a leasable member of p, or nil.
func (m *Manager) cleanWarmLocked(p *poolRT) *member {
	var best *member
	for _, mb := range m.members {
		if mb.pool == p.cfg.Name && m.leasableLocked(mb) && (best == nil || mb.key < best.key) {
			best = mb
		}
	}
	return best
}

// counts are a pool's members by what they will be.
type counts struct {
	total   int // every member: what Max bounds
	warm    int // warm, clean or dirty
	coming  int // will turn leasable without a start's help: background boots, resets, dirty warm VMs
	future  int // warm now or soon: warm, background boots, resets (what min_warm counts)
	leased  int
	booting int
	ending  int // resetting or destroying
	dying   int // destroying
}

func (m *Manager) countLocked(pool string) counts {
	var c counts
	for _, mb := range m.members {
		if mb.pool != pool {
			continue
		}
		c.total++
		switch mb.state {
		case stBooting:
			c.booting++
			if !mb.reserved {
				c.coming++
				c.future++
			}
		case stWarm:
			c.warm++
			c.future++
			if mb.dirty {
				c.coming++
			}
		case stLeased:
			c.leased++
		case stResetting:
			c.ending++
			c.coming++
			c.future++
		case stDestroying:
			c.ending++
			c.dying++
		}
	}
	return c
}

// addBootingLocked adds a member for a boot about to start, and returns
// the config to boot it with: p's now, which a SetPools meanwhile does not
// change under the boot.
func (m *Manager) addBootingLocked(p *poolRT, reserved bool) (*member, PoolConfig) {
	m.bootN++
	mb := &member{key: fmt.Sprintf("boot-%d", m.bootN), pool: p.cfg.Name, state: stBooting, reserved: reserved, shape: p.cfg.shape()}
	m.members[mb.key] = mb
	m.changedLocked()
	return mb, p.cfg
}

// bootedLocked records a VM a boot made and returns the effects of its
// transitions; a VM that died before this (its event came first) is
// passed on to destroy.
func (m *Manager) bootedLocked(p *poolRT, mb *member, vm vmm.VM) effects {
	delete(m.members, mb.key)
	delete(m.creating, vm.ID)
	mb.key, mb.vm = vm.ID, vm.ID
	m.members[mb.key] = mb
	fx, _ := m.stepLocked(mb, inBooted)
	if _, died := m.diedEarly[vm.ID]; died {
		delete(m.diedEarly, vm.ID)
		died, _ := m.stepLocked(mb, inDied)
		fx |= died
	}
	return fx
}

// boot creates one VM to a pool's spec cfg (addBootingLocked's), labelled
// as that pool's. The caller holds a boot slot.
func (m *Manager) boot(ctx context.Context, cfg PoolConfig, op string) (vmm.VM, time.Duration, error) {
	start := time.Now()
	m.log.Debug("pool boot started", "op", op, "pool", cfg.Name, "image", cfg.Image)
	opts := cfg.createOptions()
	opts.Labels = map[string]string{LabelPool: cfg.Name}
	vm, err := m.vms.Create(ctx, opts)
	d := time.Since(start)
	if err != nil {
		if ctx.Err() == nil {
			m.met.failures.WithLabelValues(cfg.Name, "boot").Inc()
		}
		m.log.Warn("pool boot failed", "op", op, "pool", cfg.Name, "duration", d.Round(time.Millisecond), "err", err)
		return vm, d, fmt.Errorf("boot %s vm: %w", cfg.Image, err)
	}
	m.met.boot.WithLabelValues(cfg.Name).Observe(d.Seconds())
	m.log.Debug("pool boot finished", "op", op, "pool", cfg.Name, "vm", vm.ID, "duration", d.Round(time.Millisecond))
	return vm, d, nil
}

// overLocked says whether a warm member must leave its pool: the pool is
// gone from the config, the VM is not to its spec, or the pool holds more
// than its max.
func (m *Manager) overLocked(mb *member) bool {
	p := m.pools[mb.pool]
	if p == nil || !m.fitsLocked(mb) {
		return true
	}
	// VMs already on their way out do not count: a destroy that failed
	// (and is retried) must not make the pool evict another.
	c := m.countLocked(mb.pool)
	return c.total-c.dying > p.cfg.Max
}

// leasableLocked says whether mb may be leased now: warm, clean, not
// booted for one start, and to its pool's shape.
func (m *Manager) leasableLocked(mb *member) bool {
	return mb.state == stWarm && !mb.dirty && !mb.reserved && m.fitsLocked(mb)
}

// fitsLocked says whether mb was made to its pool's shape now; a member of
// a pool no longer declared fits nothing.
func (m *Manager) fitsLocked(mb *member) bool {
	p := m.pools[mb.pool]
	return p != nil && mb.shape == p.cfg.shape()
}
