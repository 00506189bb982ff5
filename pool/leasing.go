package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
)

// Episodes: starting one (a lease of a clean warm VM, or one booted for
// it), pinning its VM for a call, and ending it.

// lease is a live episode's runtime record.
type lease struct {
	ep       Episode
	ctx      context.Context // canceled when the episode ends: in-flight calls stop
	cancel   context.CancelFunc
	inflight int
	drained  chan struct{} // closed once the episode is no longer active and inflight is 0
	closed   bool          // drained is closed
	done     chan struct{} // closed once ended
}

func (l *lease) drainLocked() {
	if l.inflight == 0 && !l.closed && l.ep.State != EpisodeActive {
		l.closed = true
		close(l.drained)
	}
}

// waiter is a Start waiting for a VM that will turn warm (a boot or a reset
// in flight). It is handed a lease, or nothing (look again).
type waiter struct {
	ttl time.Duration
	ch  chan grant // 1-buffered; written once; a grant with no member: look again
}

// grant is a lease made under the lock whose effects (label, persist) are
// still to be carried out (finishLease).
type grant struct {
	mb *member
	ep Episode
	fx effects
	t  target
}

func newEpisodeID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ep-" + hex.EncodeToString(b)
}

// episodeID is the form of an episode id: what newEpisodeID makes, and
// what StartOn accepts from a caller that chose the id itself.
var episodeID = regexp.MustCompile(`^ep-[0-9a-f]{12}$`)

func (m *Manager) newLease(ep Episode) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	return &lease{ep: ep, ctx: ctx, cancel: cancel, drained: make(chan struct{}), done: make(chan struct{})}
}

// leaseLocked gives the clean warm member mb to a new episode id; the
// caller carries out the lease's effects (finishLease). op names the lease
// in the logs: lease (Start) or start_on.
func (m *Manager) leaseLocked(p *poolRT, mb *member, id string, ttl time.Duration, warm bool, boot time.Duration, op string) grant {
	fx, err := m.stepLocked(mb, inLease)
	if err != nil {
		panic("pool: leaseLocked on a member that cannot be leased: " + err.Error()) // callers pick clean warm members
	}
	now := m.opts.Now().UTC()
	ep := Episode{ID: id, VM: mb.vm, Pool: p.cfg.Name, State: EpisodeActive, Warm: warm,
		CreatedAt: now, ExpiresAt: now.Add(ttl), TTLSeconds: ttl.Seconds(), ScreenshotSize: p.cfg.ScreenshotSize,
		CleanStart: true, ResetBeforeLeaseMS: mb.cleanedMS}
	if !warm {
		ep.BootSeconds = boot.Seconds()
	}
	mb.episode, mb.reserved, mb.cleanedMS = ep.ID, false, 0
	m.leases[ep.ID] = m.newLease(ep)
	return grant{mb: mb, ep: ep, fx: fx, t: m.targetLocked(mb, op)}
}

// finishLease carries out a lease made under the lock: the episode label
// on the VM (its ownership), then the episode in the state file, and only
// then answers. A label that cannot be set undoes the lease (abort) and
// the VM is reset in the background.
func (m *Manager) finishLease(g grant) (Episode, error) {
	var clean carrying
	o := m.carry(g.mb, g.fx, g.t, carrying{detach: true, before: func(in input, o outcome) {
		if in == inAbort {
			m.dropLeaseLocked(g.ep.ID)
			clean = m.cleaning(g.mb) // its reset cleans the VM for the next lease
		} else if clean.before != nil {
			clean.before(in, o)
		}
	}})
	if o.labelErr != nil {
		return Episode{}, fmt.Errorf("lease vm %s: label it: %w", g.ep.VM, o.labelErr)
	}
	if now, _ := m.Get(g.ep.ID); now.EndReason == ReasonVMDied || now.EndReason == ReasonVMGone {
		// The VM died while it was being labelled; the event loop ended
		// the episode before anyone saw it.
		return Episode{}, fmt.Errorf("lease vm %s: %w before the lease was handed out", g.ep.VM, vmm.ErrDead)
	}
	ep := g.ep
	m.met.started.WithLabelValues(ep.Pool, strconv.FormatBool(ep.Warm)).Inc()
	m.log.Info("episode started", "op", g.t.op, "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "warm", ep.Warm,
		"ttl", time.Duration(ep.TTLSeconds*float64(time.Second)), "reset_before_lease_ms", ep.ResetBeforeLeaseMS)
	return ep, nil
}

// dropLeaseLocked forgets a lease that was never handed out.
func (m *Manager) dropLeaseLocked(id string) {
	if l := m.leases[id]; l != nil {
		delete(m.leases, id)
		l.cancel()
		close(l.done)
	}
}

// abortLocked undoes a lease that was never handed out; its VM is reset in
// the background.
func (m *Manager) abortLocked(g grant) {
	m.dropLeaseLocked(g.ep.ID)
	t := m.targetLocked(g.mb, "abort")
	if fx, err := m.stepLocked(g.mb, inAbort); err == nil {
		m.goCarry(g.mb, fx, t, m.cleaning(g.mb))
	}
}

// Start leases a VM of the named pool for ttl (0: the pool's default). A
// clean warm VM is leased at once; with none, a start waits for one that a
// boot or reset in flight will bring, or boots one for itself when the
// pool has room (Warm false, BootSeconds set). A full pool is ErrPoolFull;
// a boot vmm refuses for lack of host memory is ErrHostFull.
func (m *Manager) Start(ctx context.Context, poolName string, ttl time.Duration) (Episode, error) {
	p, ttl, err := m.startPool(poolName, ttl)
	if err != nil {
		return Episode{}, err
	}
	g, boot, err := m.take(ctx, p, ttl)
	if err == nil && boot {
		g, err = m.bootFor(ctx, p, ttl)
	}
	if err != nil {
		return Episode{}, fmt.Errorf("start episode in pool %s: %w", poolName, err)
	}
	return m.finishLease(g)
}

// StartOn leases the VM vm of the named pool to a new episode with the id
// the caller chose (a cluster's claim names the desktop and the episode
// before its owner hears of them). The VM must be warm, clean and unleased
// now: anything else is a *NotWarmError (ErrNotWarm) with its state, and
// nothing waits or boots. The id is "ep-" and 12 lower-case hex digits,
// and no live or recently ended episode has it; ttl is as Start's. The
// lease is Start's: label, state file, metrics and log.
func (m *Manager) StartOn(ctx context.Context, poolName, vm, episode string, ttl time.Duration) (Episode, error) {
	if !episodeID.MatchString(episode) {
		return Episode{}, fmt.Errorf("start episode on vm %s of pool %s: %w", vm, poolName,
			fielderr.Newf("episode", vmm.ErrInvalid, "%q: want ep- and 12 lower-case hex digits, e.g. ep-0123456789ab", episode))
	}
	if err := ctx.Err(); err != nil {
		return Episode{}, fmt.Errorf("start episode %s on vm %s: %w", episode, vm, err)
	}
	p, ttl, err := m.startPool(poolName, ttl)
	if err != nil {
		return Episode{}, err
	}
	g, err := m.takeVMLocked(p, vm, episode, ttl)
	if err != nil {
		return Episode{}, fmt.Errorf("start episode %s on vm %s of pool %s: %w", episode, vm, poolName, err)
	}
	return m.finishLease(g)
}

// takeVMLocked leases vm of p to episode id when it is leasable now. It
// takes the lock.
func (m *Manager) takeVMLocked(p *poolRT, vm, id string, ttl time.Duration) (grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return grant{}, ErrClosed
	}
	if err := m.removedLocked(p); err != nil {
		return grant{}, err
	}
	if m.leases[id] != nil || slices.ContainsFunc(m.ended, func(e Episode) bool { return e.ID == id }) {
		return grant{}, fielderr.Newf("episode", vmm.ErrInvalid, "%s is taken: an episode of this farm has that id", id)
	}
	mb := m.members[vm]
	if mb == nil || mb.pool != p.cfg.Name || mb.vm == "" {
		m.met.refused.WithLabelValues(p.cfg.Name, "not_warm").Inc()
		return grant{}, &NotWarmError{VM: vm, Pool: p.cfg.Name}
	}
	if st := m.desktopStateLocked(mb); st != DesktopFree {
		m.met.refused.WithLabelValues(p.cfg.Name, "not_warm").Inc()
		return grant{}, &NotWarmError{VM: vm, Pool: p.cfg.Name, State: st}
	}
	m.poke() // refill to min_warm
	return m.leaseLocked(p, mb, id, ttl, true, 0, "start_on"), nil
}

// removedLocked is ErrUnknownPool once SetPools removed p (a start that
// resolved it before then), else nil.
func (m *Manager) removedLocked(p *poolRT) error {
	if m.pools[p.cfg.Name] != p {
		return fmt.Errorf("pool %q: %w (removed)", p.cfg.Name, ErrUnknownPool)
	}
	return nil
}

// startPool resolves a Start's pool and ttl.
func (m *Manager) startPool(name string, ttl time.Duration) (*poolRT, time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pools[name]
	if !ok {
		return nil, 0, fmt.Errorf("start episode in pool %q: %w", name, ErrUnknownPool)
	}
	if ttl == 0 {
		ttl = p.cfg.DefaultTTL.Duration()
	}
	if ttl < 0 || ttl > p.cfg.MaxTTL.Duration() {
		return nil, 0, fmt.Errorf("start episode in pool %s: field ttl_s: %w: %g s is outside (0, %g]", name, vmm.ErrInvalid, ttl.Seconds(), float64(p.cfg.MaxTTL))
	}
	return p, ttl, nil
}

// take leases a clean warm VM of p, waiting while the pool is full for one
// that a boot or reset in flight will bring. It returns boot true, and no
// lease, when the pool has room for a VM booted for this start.
func (m *Manager) take(ctx context.Context, p *poolRT, ttl time.Duration) (g grant, boot bool, err error) {
	for {
		g, w, boot, err := m.takeLocked(p, ttl)
		if err != nil || w == nil {
			return g, boot, err
		}
		select {
		case g := <-w.ch:
			if g.mb != nil {
				return g, false, nil
			}
			// Look again.
		case <-ctx.Done():
			m.stopWaiting(p, w)
			return grant{}, false, fmt.Errorf("wait for a warm vm: %w", ctx.Err())
		}
	}
}

// takeLocked takes one look at p for a start: a lease of a clean warm VM;
// else boot, when p has room; else a waiter, when a VM no other start
// waits for will turn warm; else ErrPoolFull. It takes the lock.
func (m *Manager) takeLocked(p *poolRT, ttl time.Duration) (g grant, w *waiter, boot bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return grant{}, nil, false, ErrClosed
	}
	if err := m.removedLocked(p); err != nil {
		return grant{}, nil, false, err
	}
	if mb := m.cleanWarmLocked(p); mb != nil {
		m.poke() // refill to min_warm
		return m.leaseLocked(p, mb, newEpisodeID(), ttl, true, 0, "lease"), nil, false, nil
	}
	c := m.countLocked(p.cfg.Name)
	if c.total < p.cfg.Max {
		return grant{}, nil, true, nil
	}
	if c.coming <= len(p.waiters) {
		m.met.refused.WithLabelValues(p.cfg.Name, "pool_full").Inc()
		return grant{}, nil, false, fmt.Errorf("%w: %d of %d VMs leased, booting or being reset", ErrPoolFull, c.total, p.cfg.Max)
	}
	w = &waiter{ttl: ttl, ch: make(chan grant, 1)}
	p.waiters = append(p.waiters, w)
	return grant{}, w, false, nil
}

// stopWaiting removes w from p's waiters; a lease handed to it meanwhile
// is undone.
func (m *Manager) stopWaiting(p *poolRT, w *waiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p.waiters = slices.DeleteFunc(p.waiters, func(x *waiter) bool { return x == w })
	select {
	case g := <-w.ch:
		if g.mb != nil {
			m.abortLocked(g)
		}
	default:
	}
}

// bootFor boots a VM of p reserved for one start and leases it to that
// start, or leases a VM that turned warm while the start waited for a boot
// slot.
func (m *Manager) bootFor(ctx context.Context, p *poolRT, ttl time.Duration) (grant, error) {
	m.mu.Lock()
	mb, cfg := m.addBootingLocked(p, true)
	m.mu.Unlock()
	select {
	case m.bootSem <- struct{}{}:
	case <-ctx.Done():
		m.bootFailed(mb, "lease")
		return grant{}, fmt.Errorf("wait to boot: %w", ctx.Err())
	}
	if g, ok := m.leaseWarmInstead(p, mb, ttl); ok {
		<-m.bootSem
		return g, nil
	}
	vm, dur, err := m.boot(ctx, cfg, "lease")
	<-m.bootSem
	if err != nil {
		m.bootFailed(mb, "lease")
		if errors.Is(err, vmm.ErrInsufficientResources) {
			m.met.refused.WithLabelValues(cfg.Name, "host_full").Inc()
			return grant{}, fmt.Errorf("%w: %w", ErrHostFull, err)
		}
		return grant{}, err
	}
	return m.leaseBooted(p, mb, vm, dur, ttl)
}

// bootFailed feeds boot_failed to a booting member.
func (m *Manager) bootFailed(mb *member, op string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stepCarryLocked(mb, inBootFailed, op)
}

// leaseWarmInstead leases a clean warm VM of p, if one turned warm, in
// place of the boot mb was added for.
func (m *Manager) leaseWarmInstead(p *poolRT, mb *member, ttl time.Duration) (grant, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.cleanWarmLocked(p)
	if w == nil {
		return grant{}, false
	}
	m.stepCarryLocked(mb, inBootFailed, "lease")
	return m.leaseLocked(p, w, newEpisodeID(), ttl, true, 0, "lease"), true
}

// leaseBooted records the VM booted for a start and leases it, unless it
// died or was touched first: the pool then destroys (or cleans) it like
// any other.
func (m *Manager) leaseBooted(p *poolRT, mb *member, vm vmm.VM, boot, ttl time.Duration) (grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fx := m.bootedLocked(p, mb, vm)
	gone := m.removedLocked(p)
	if mb.state != stWarm || mb.dirty || gone != nil {
		// The refill evicts it when its pool was removed meanwhile.
		mb.reserved = false
		m.goCarry(mb, fx, m.targetLocked(mb, "lease"), carrying{})
		if gone != nil {
			return grant{}, gone
		}
		return grant{}, fmt.Errorf("vm %s: %w before it was leased", vm.ID, vmm.ErrDead)
	}
	g := m.leaseLocked(p, mb, newEpisodeID(), ttl, false, boot, "lease")
	g.fx |= fx // booted's
	return g, nil
}

// Acquire pins an active episode's VM for one call: the episode cannot end
// (its VM cannot be reset and leased again) until release is called. The
// returned context is canceled when the episode ends, so End never waits
// long. Errors: ErrEpisodeNotFound, ErrEpisodeEnded.
func (m *Manager) Acquire(ctx context.Context, id string) (vm string, callCtx context.Context, release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return "", nil, nil, m.goneLocked(id)
	}
	if l.ep.State != EpisodeActive {
		return "", nil, nil, fmt.Errorf("episode %s: %w (ending)", id, ErrEpisodeEnded)
	}
	if !m.opts.Now().Before(l.ep.ExpiresAt) {
		return "", nil, nil, fmt.Errorf("episode %s: %w (expired at %s)", id, ErrEpisodeEnded, l.ep.ExpiresAt.Format(time.RFC3339))
	}
	l.inflight++
	callCtx, cancel := context.WithCancel(ctx)
	stopAfter := context.AfterFunc(l.ctx, cancel)
	var once sync.Once
	release = func() {
		once.Do(func() {
			stopAfter()
			cancel()
			m.mu.Lock()
			l.inflight--
			l.drainLocked()
			m.mu.Unlock()
		})
	}
	return l.ep.VM, callCtx, release, nil
}

// goneLocked is the error for an episode id with no live lease.
func (m *Manager) goneLocked(id string) error {
	for i := len(m.ended) - 1; i >= 0; i-- {
		if e := m.ended[i]; e.ID == id {
			return fmt.Errorf("episode %s: %w (%s at %s)", id, ErrEpisodeEnded, e.EndReason, e.EndedAt.Format(time.RFC3339))
		}
	}
	return fmt.Errorf("episode %q: %w", id, ErrEpisodeNotFound)
}

// Get returns an episode, live or recently ended.
func (m *Manager) Get(id string) (Episode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[id]; l != nil {
		return l.ep, nil
	}
	for i := len(m.ended) - 1; i >= 0; i-- {
		if m.ended[i].ID == id {
			return m.ended[i], nil
		}
	}
	return Episode{}, fmt.Errorf("episode %q: %w", id, ErrEpisodeNotFound)
}

// List returns the live episodes, oldest first.
func (m *Manager) List() []Episode {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Episode, 0, len(m.leases))
	for _, l := range m.leases {
		out = append(out, l.ep)
	}
	slices.SortFunc(out, func(a, b Episode) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// End ends an episode: calls in flight on it are canceled and waited for,
// its VM is reset to the ready snapshot and goes back to the pool, or is
// destroyed (and replaced) when the reset fails or the pool has no room.
// Ending an episode being ended waits for that and returns its result.
func (m *Manager) End(ctx context.Context, id, reason string) (Episode, error) {
	mb, fx, t, l, ending, err := m.beginEnd(id, reason)
	if err != nil {
		return Episode{}, err
	}
	if ending {
		select {
		case <-l.done:
		case <-ctx.Done():
			return Episode{}, fmt.Errorf("end episode %s: %w", id, ctx.Err())
		}
		return m.Get(id)
	}
	if mb == nil {
		// Its VM is no longer a member of the pool: nothing to reset.
		m.carry(nil, fxEndEpisode|fxPersist, t, carrying{})
	} else {
		m.carry(mb, fx, t, carrying{before: func(in input, o outcome) {
			if in == inResetOK || in == inResetFailed {
				m.resetEndedLocked(l, reason, o)
			}
		}})
		m.carry(nil, fxPersist, t, carrying{})
	}
	ep, err := m.Get(id)
	m.log.Info("episode ended", "op", "end", "episode", id, "vm", ep.VM, "pool", ep.Pool, "reason", ep.EndReason,
		"reset_ms", int64(ep.ResetSeconds*1000), "vm_replaced", ep.VMReplaced)
	return ep, err
}

// beginEnd marks an active episode ending and feeds end to its VM's
// member, returning the effects to carry out; a nil member means the VM is
// no longer the pool's (t.reason then says why). ending reports an episode
// being ended already.
func (m *Manager) beginEnd(id, reason string) (mb *member, fx effects, t target, l *lease, ending bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l = m.leases[id]; l == nil {
		return nil, 0, target{}, nil, false, m.goneLocked(id)
	}
	if l.ep.State != EpisodeActive {
		return nil, 0, target{}, l, true, nil
	}
	t = target{vm: l.ep.VM, pool: l.ep.Pool, episode: id, lease: l, reason: reason, op: "end"}
	mb = m.members[l.ep.VM]
	switch {
	case mb != nil && mb.episode == id:
		if fx, err = m.stepLocked(mb, inEnd); err != nil {
			mb, err, t.reason = nil, nil, ReasonVMGone
		}
	case mb != nil && mb.state == stDestroying:
		// It died; the end_episode of its death is still on its way.
		mb, t.reason = nil, ReasonVMDied
	default:
		mb, t.reason = nil, ReasonVMGone
	}
	l.ep.State, l.ep.EndReason = EpisodeEnding, reason
	l.drainLocked()
	return mb, fx, t, l, false, nil
}

// resetEndedLocked records an episode ended by the outcome of the reset
// of its VM, just before that outcome is fed to the member: a VM warm
// again is never leased to another episode while this one is not ended.
func (m *Manager) resetEndedLocked(l *lease, reason string, o outcome) {
	switch err := o.resetErr; {
	case err == nil:
		m.met.reset.WithLabelValues(l.ep.Pool).Observe(o.reset.Duration.Seconds())
		l.ep.ResetSeconds = o.reset.Duration.Seconds()
	case errors.Is(err, vmm.ErrNotFound):
		reason = ReasonVMGone
		l.ep.VMReplaced = true
	default:
		if errors.Is(err, vmm.ErrDead) || errors.Is(err, vmm.ErrNotRunning) {
			reason = ReasonVMDied
		}
		l.ep.VMReplaced = true // feedLocked logs the failure
	}
	m.endLocked(l, reason)
}

// endLocked records a live episode as ended and drops its lease.
func (m *Manager) endLocked(l *lease, reason string) Episode {
	delete(m.leases, l.ep.ID)
	l.cancel()
	now := m.opts.Now().UTC()
	ep := l.ep
	ep.State, ep.EndedAt, ep.EndReason = EpisodeEnded, &now, reason
	l.ep = ep
	l.drainLocked()
	close(l.done)
	m.ended = append(m.ended, ep)
	if len(m.ended) > maxEnded {
		m.ended = slices.Clone(m.ended[len(m.ended)-maxEnded:])
	}
	m.met.ended.WithLabelValues(ep.Pool, reason).Inc()
	return ep
}
