package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
// in flight). It is handed a leased VM, or nothing (look again).
type waiter struct {
	ttl time.Duration
	ch  chan handoff // 1-buffered; written once
}

type handoff struct {
	mb *member
	ep Episode
}

func newEpisodeID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ep-" + hex.EncodeToString(b)
}

func (m *Manager) newLease(ep Episode) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	return &lease{ep: ep, ctx: ctx, cancel: cancel, drained: make(chan struct{}), done: make(chan struct{})}
}

// leaseLocked gives the clean warm member mb to a new episode. The caller
// then labels the VM and persists (finishLease).
func (m *Manager) leaseLocked(p *poolRT, mb *member, ttl time.Duration, warm bool, boot time.Duration) Episode {
	if _, err := m.stepLocked(mb, inLease); err != nil {
		panic("pool: leaseLocked on a member that cannot be leased: " + err.Error()) // callers pick clean warm members
	}
	now := m.opts.Now().UTC()
	ep := Episode{ID: newEpisodeID(), VM: mb.vm, Pool: p.cfg.Name, State: EpisodeActive, Warm: warm,
		CreatedAt: now, ExpiresAt: now.Add(ttl), TTLSeconds: ttl.Seconds(), ScreenshotSize: p.cfg.ScreenshotSize,
		CleanStart: true, ResetBeforeLeaseMS: mb.cleanedMS}
	if !warm {
		ep.BootSeconds = boot.Seconds()
	}
	mb.episode, mb.reserved, mb.cleanedMS = ep.ID, false, 0
	m.leases[ep.ID] = m.newLease(ep)
	return ep
}

// finishLease records a lease made under the lock: the episode label on the
// VM (its ownership), then the episode in the state file, and only then
// answers. If the label cannot be set, the lease is undone.
func (m *Manager) finishLease(mb *member, ep Episode) (Episode, error) {
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := m.vms.SetLabel(lctx, ep.VM, LabelEpisode, ep.ID)
	cancel()
	m.mu.Lock()
	if err != nil {
		l := m.leases[ep.ID]
		delete(m.leases, ep.ID)
		if l != nil {
			l.cancel()
			close(l.done)
		}
		fx, serr := m.stepLocked(mb, inAbort)
		m.mu.Unlock()
		if serr == nil {
			m.goReset(mb, fx, "abort")
		}
		return Episode{}, fmt.Errorf("lease vm %s: label it: %w", ep.VM, err)
	}
	if l := m.leases[ep.ID]; l == nil || l.ep.State != EpisodeActive {
		// The VM died while it was being labelled; the event loop ended
		// the episode before anyone saw it.
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("lease vm %s: %w before the lease was handed out", ep.VM, vmm.ErrDead)
	}
	snap := m.snapshotLocked()
	m.mu.Unlock()
	m.persist(snap, "lease")
	m.met.started.WithLabelValues(ep.Pool, strconv.FormatBool(ep.Warm)).Inc()
	m.log.Info("episode started", "op", "lease", "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "warm", ep.Warm,
		"ttl", time.Duration(ep.TTLSeconds*float64(time.Second)), "reset_before_lease_ms", ep.ResetBeforeLeaseMS)
	return ep, nil
}

// Start leases a VM of the named pool for ttl (0: the pool's default). A
// clean warm VM is leased at once; with none, a start waits for one that a
// boot or reset in flight will bring, or boots one for itself when the
// pool has room (Warm false, BootSeconds set). A full pool is ErrPoolFull;
// a boot vmm refuses for lack of host memory is ErrHostFull.
func (m *Manager) Start(ctx context.Context, poolName string, ttl time.Duration) (Episode, error) {
	m.mu.Lock()
	p, ok := m.pools[poolName]
	if !ok {
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %q: %w", poolName, ErrUnknownPool)
	}
	if ttl == 0 {
		ttl = p.cfg.DefaultTTL.Duration()
	}
	if ttl < 0 || ttl > p.cfg.MaxTTL.Duration() {
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: field ttl_s: %w: %g s is outside (0, %g]", poolName, vmm.ErrInvalid, ttl.Seconds(), float64(p.cfg.MaxTTL))
	}
	for {
		if m.closed {
			m.mu.Unlock()
			return Episode{}, ErrClosed
		}
		if mb := m.cleanWarmLocked(p); mb != nil {
			ep := m.leaseLocked(p, mb, ttl, true, 0)
			m.mu.Unlock()
			m.poke() // refill to min_warm
			return m.finishLease(mb, ep)
		}
		c := m.countLocked(poolName)
		if c.total < p.cfg.Max {
			break // boot one for this start
		}
		if c.coming <= len(p.waiters) {
			m.met.refused.WithLabelValues(poolName, "pool_full").Inc()
			m.mu.Unlock()
			return Episode{}, fmt.Errorf("start episode: pool %s: %w: %d of %d VMs leased, booting or being reset", poolName, ErrPoolFull, c.total, p.cfg.Max)
		}
		// The pool is full, but a VM no other start waits for will turn
		// warm: wait for it rather than refuse.
		w := &waiter{ttl: ttl, ch: make(chan handoff, 1)}
		p.waiters = append(p.waiters, w)
		m.mu.Unlock()
		select {
		case h := <-w.ch:
			if h.mb != nil {
				return m.finishLease(h.mb, h.ep)
			}
			m.mu.Lock()
			continue
		case <-ctx.Done():
		}
		m.mu.Lock()
		p.waiters = slices.DeleteFunc(p.waiters, func(x *waiter) bool { return x == w })
		select {
		case h := <-w.ch:
			if h.mb != nil {
				m.abortLocked(h.mb, h.ep.ID)
			}
		default:
		}
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: wait for a warm vm: %w", poolName, ctx.Err())
	}
	mb := m.addBootingLocked(p, true)
	m.mu.Unlock()

	// Wait for a boot slot; a VM may turn warm meanwhile.
	select {
	case m.bootSem <- struct{}{}:
	case <-ctx.Done():
		m.mu.Lock()
		m.stepLocked(mb, inBootFailed) //nolint:errcheck // booting takes boot_failed
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: wait to boot: %w", poolName, ctx.Err())
	}
	m.mu.Lock()
	if w := m.cleanWarmLocked(p); w != nil {
		m.stepLocked(mb, inBootFailed) //nolint:errcheck // booting takes boot_failed
		ep := m.leaseLocked(p, w, ttl, true, 0)
		m.mu.Unlock()
		<-m.bootSem
		return m.finishLease(w, ep)
	}
	m.mu.Unlock()
	vm, dur, err := m.boot(ctx, p, "lease")
	<-m.bootSem
	m.mu.Lock()
	if err != nil {
		m.stepLocked(mb, inBootFailed) //nolint:errcheck // booting takes boot_failed
		m.mu.Unlock()
		if errors.Is(err, vmm.ErrInsufficientResources) {
			m.met.refused.WithLabelValues(poolName, "host_full").Inc()
			return Episode{}, fmt.Errorf("start episode in pool %s: %w: %w", poolName, ErrHostFull, err)
		}
		return Episode{}, fmt.Errorf("start episode in pool %s: %w", poolName, err)
	}
	fx := m.bootedLocked(p, mb, vm)
	if mb.state != stWarm || mb.dirty {
		// It died (or was touched) before it could be leased: the pool
		// destroys (or cleans) it like any other.
		mb.reserved = false
		m.mu.Unlock()
		m.doDestroy(mb, fx, "lease")
		return Episode{}, fmt.Errorf("start episode in pool %s: vm %s: %w before it was leased", poolName, vm.ID, vmm.ErrDead)
	}
	ep := m.leaseLocked(p, mb, ttl, false, dur)
	m.mu.Unlock()
	return m.finishLease(mb, ep)
}

// abortLocked undoes a lease that was never handed out.
func (m *Manager) abortLocked(mb *member, id string) {
	if l := m.leases[id]; l != nil {
		delete(m.leases, id)
		l.cancel()
		close(l.done)
	}
	if fx, err := m.stepLocked(mb, inAbort); err == nil {
		m.goReset(mb, fx, "abort")
	}
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
	m.mu.Lock()
	l := m.leases[id]
	if l == nil {
		err := m.goneLocked(id)
		m.mu.Unlock()
		return Episode{}, err
	}
	if l.ep.State != EpisodeActive {
		m.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return Episode{}, fmt.Errorf("end episode %s: %w", id, ctx.Err())
		}
		return m.Get(id)
	}
	mb := m.members[l.ep.VM]
	var fx effects
	if mb != nil && mb.episode == id {
		var err error
		if fx, err = m.stepLocked(mb, inEnd); err != nil {
			mb = nil
		}
	} else {
		mb = nil
	}
	l.ep.State, l.ep.EndReason = EpisodeEnding, reason
	l.cancel()
	l.drainLocked()
	snap := m.snapshotLocked()
	m.mu.Unlock()
	m.persist(snap, "end")

	log := m.log.With("episode", id, "vm", l.ep.VM, "pool", l.ep.Pool)
	select {
	case <-l.drained:
	case <-time.After(30 * time.Second):
		log.Warn("calls on the episode still running 30 s after cancel; resetting anyway", "op", "end")
	}
	var (
		res      vmm.ResetResult
		resetErr = fmt.Errorf("vm %s: %w", l.ep.VM, vmm.ErrNotFound)
	)
	if mb != nil {
		res, resetErr = m.unlabelAndReset(mb, fx, "end")
	}
	m.mu.Lock()
	var after effects
	if mb != nil {
		after = m.resetDoneLocked(mb, resetErr)
	}
	switch {
	case resetErr == nil:
		m.met.reset.WithLabelValues(l.ep.Pool).Observe(res.Duration.Seconds())
		l.ep.ResetSeconds = res.Duration.Seconds()
	case errors.Is(resetErr, vmm.ErrNotFound):
		reason = ReasonVMGone
		l.ep.VMReplaced = true
	default:
		if errors.Is(resetErr, vmm.ErrDead) || errors.Is(resetErr, vmm.ErrNotRunning) {
			reason = ReasonVMDied
		}
		l.ep.VMReplaced = true
		log.Warn("reset at episode end failed; destroying the vm", "op", "end", "err", resetErr)
	}
	ep := m.endLocked(l, reason)
	snap = m.snapshotLocked()
	m.mu.Unlock()
	m.persist(snap, "end")
	log.Info("episode ended", "op", "end", "reason", reason, "reset_ms", res.Duration.Milliseconds(), "vm_replaced", ep.VMReplaced)
	m.doDestroy(mb, after, "end")
	return ep, nil
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
