package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// Carrying out the effects the lease table (lease.go) names. A transition
// happens under the Manager's lock (stepLocked); its effects are carried
// out after unlocking, by runEffects alone, in effectOrder, and the
// outcome of the last one (a label refused, a reset, a destroy) is fed
// back as the member's next input, whose effects are carried out the same
// way (Manager.carry). Nothing else does an effect's work.

// effectOrder is the order in which a transition's effects are carried
// out, whichever of them it names:
//   - label before persist: the VM's label is the lease's ownership, the
//     state file's record only its details;
//   - end_episode before persist, so that the file records the end;
//   - persist before cancel_calls, unlabel and reset: an end is recorded
//     before it begins, so that a restart mid-end finishes it;
//   - wake before destroy, which may take a while: the refill and the
//     waiting starts need not wait for libvirt;
//   - cancel_calls before unlabel and reset: no call of the episode runs
//     on the VM once it is being returned.
var effectOrder = [...]effects{fxLabel, fxEndEpisode, fxPersist, fxWake, fxCancelCalls, fxUnlabel, fxReset, fxDestroy}

// target is what a transition's effects act on, read under the lock when
// the transition happened (a member's episode is cleared as it leaves a
// lease).
type target struct {
	vm, pool string
	episode  string // the episode the member held, "" for none
	lease    *lease // its lease, nil for none: still there once ended
	reason   string // end_episode: why the episode ended
	op       string // for logs: lease, end, event, refill, ...
}

// effector carries out one effect each. The Manager's (managerFx) talks
// to vmm, the state file and its own records; a test records the calls.
type effector interface {
	label(t target) error                    // fxLabel: set the episode label
	endEpisode(t target)                     // fxEndEpisode: record the episode ended
	persist(t target)                        // fxPersist: write the state file
	wake(t target)                           // fxWake: hand warm VMs to waiting starts, poke the refill
	cancelCalls(t target, wait bool)         // fxCancelCalls: cancel the episode's calls; wait for them before a reset
	unlabel(t target)                        // fxUnlabel: remove the episode label
	reset(t target) (vmm.ResetResult, error) // fxReset: back to the ready snapshot
	destroy(t target) error                  // fxDestroy: destroy the VM
}

// outcome is what the effects of one transition came to.
type outcome struct {
	labelErr   error
	reset      vmm.ResetResult
	resetErr   error
	destroyErr error
}

// runEffects carries out fx on t through e, in effectOrder, and returns
// the input its outcome feeds back to the member, if any: abort when the
// label could not be set (nothing after it is carried out), reset_ok or
// reset_failed after a reset, destroyed after a destroy that succeeded (a
// failed one leaves the member destroying, for the reconcile to retry).
func runEffects(e effector, fx effects, t target) (next input, o outcome, feed bool) {
	for _, f := range effectOrder {
		if !fx.has(f) {
			continue
		}
		switch f {
		case fxLabel:
			if o.labelErr = e.label(t); o.labelErr != nil {
				return inAbort, o, true
			}
		case fxEndEpisode:
			e.endEpisode(t)
		case fxPersist:
			e.persist(t)
		case fxWake:
			e.wake(t)
		case fxCancelCalls:
			e.cancelCalls(t, fx.has(fxReset))
		case fxUnlabel:
			e.unlabel(t)
		case fxReset:
			o.reset, o.resetErr = e.reset(t)
			next, feed = inResetOK, true
			if o.resetErr != nil {
				next = inResetFailed
			}
		case fxDestroy:
			if o.destroyErr = e.destroy(t); o.destroyErr == nil {
				next, feed = inDestroyed, true
			}
		}
	}
	return next, o, feed
}

// carrying says how Manager.carry treats the outcomes of a member's
// effects.
type carrying struct {
	// before, when set, is called under the lock with each outcome just
	// before it is fed to the member: the caller's bookkeeping that must
	// be atomic with it (an end's record before its VM is warm again).
	before func(in input, o outcome)
	// detach carries out what follows the first outcome in the
	// background: the caller answers without waiting for it.
	detach bool
}

// carry carries out fx, the effects of a transition of mb (nil: effects
// on no member, e.g. writing an episode's end), on t, then feeds their
// outcome to mb and carries out the effects that names, until a
// transition names none or refuses. It is called without the lock and
// returns the first outcome.
func (m *Manager) carry(mb *member, fx effects, t target, c carrying) outcome {
	first, done := outcome{}, false
	for fx != 0 {
		in, o, feed := runEffects(managerFx{m}, fx, t)
		if !done {
			first, done = o, true
		}
		if !feed || mb == nil {
			break
		}
		m.mu.Lock()
		if c.before != nil {
			c.before(in, o)
		}
		t = m.targetLocked(mb, t.op)
		fx = m.feedLocked(mb, in, o)
		m.mu.Unlock()
		if c.detach && fx != 0 {
			m.goCarry(mb, fx, t, carrying{before: c.before})
			break
		}
	}
	return first
}

// goCarry is carry in the background (from the event loop, which must not
// wait for libvirt, and for follow-ups nobody waits for).
func (m *Manager) goCarry(mb *member, fx effects, t target, c carrying) {
	if fx == 0 {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.carry(mb, fx, t, c)
	}()
}

// stepCarryLocked feeds in to mb and carries out its effects in the
// background, for inputs whose effects nobody waits for.
func (m *Manager) stepCarryLocked(mb *member, in input, op string) {
	t := m.targetLocked(mb, op)
	if fx, err := m.stepLocked(mb, in); err == nil {
		m.goCarry(mb, fx, t, carrying{})
	}
}

// cleaning is how a reset that cleans a VM for the next lease is carried:
// its duration is recorded for that lease (ResetBeforeLeaseMS) before
// reset_ok, which may hand the VM to a waiting start.
func (m *Manager) cleaning(mb *member) carrying {
	start := time.Now()
	return carrying{before: func(in input, o outcome) {
		if in == inResetOK {
			mb.cleanedMS = max(time.Since(start).Milliseconds(), o.reset.Duration.Milliseconds(), 1)
		}
	}}
}

// targetLocked is what mb's effects act on now.
func (m *Manager) targetLocked(mb *member, op string) target {
	t := target{vm: mb.vm, pool: mb.pool, episode: mb.episode, op: op}
	if t.episode != "" {
		t.lease = m.leases[t.episode]
	}
	return t
}

// feedLocked feeds an effect's outcome to mb and returns the effects that
// follow: a failed reset is counted (the member is destroyed), and a VM
// warm again that no longer fits its pool is evicted.
func (m *Manager) feedLocked(mb *member, in input, o outcome) effects {
	episode := mb.episode
	fx, err := m.stepLocked(mb, in)
	if err != nil {
		// Moved on meanwhile (a destroyed event beat our own destroy).
		return 0
	}
	switch in {
	case inResetFailed:
		kind := "reset"
		if errors.Is(o.resetErr, vmm.ErrDead) || errors.Is(o.resetErr, vmm.ErrNotRunning) {
			kind = "died"
		}
		m.met.failures.WithLabelValues(mb.pool, kind).Inc()
		m.log.Warn("reset pool vm failed; destroying it", "vm", mb.vm, "pool", mb.pool, "episode", episode, "err", o.resetErr)
	case inResetOK:
		if m.overLocked(mb) {
			evict, _ := m.stepLocked(mb, inEvict)
			fx |= evict
		}
	}
	return fx
}

// managerFx is the Manager's effector.
type managerFx struct{ m *Manager }

func (f managerFx) label(t target) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.m.opts.LabelTimeout)
	defer cancel()
	return f.m.vms.SetLabel(ctx, t.vm, LabelEpisode, t.episode)
}

func (f managerFx) endEpisode(t target) {
	m := f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	// Active, or ending with a VM that is no longer the pool's.
	if l := t.lease; l != nil && m.leases[l.ep.ID] == l {
		l.ep.VMReplaced = true
		ep := m.endLocked(l, t.reason)
		m.log.Info("episode ended", "op", t.op, "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "reason", t.reason)
	}
}

func (f managerFx) persist(t target) {
	f.m.mu.Lock()
	snap := f.m.snapshotLocked()
	f.m.mu.Unlock()
	if err := f.m.state.write(snap); err != nil {
		// The in-memory state stays authoritative for this process and
		// the next write catches up.
		f.m.log.Error("save pool state", "op", t.op, "err", err)
	}
}

func (f managerFx) wake(t target) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	f.m.wakeLocked(t.pool)
}

func (f managerFx) cancelCalls(t target, wait bool) {
	m, l := f.m, t.lease
	if l == nil {
		return
	}
	l.cancel()
	if !wait {
		return
	}
	select {
	case <-l.drained:
	case <-time.After(m.opts.DrainTimeout):
		m.log.Warn("calls on the episode still running after cancel; going on", "op", t.op, "episode", t.episode, "vm", t.vm,
			"waited", m.opts.DrainTimeout)
	}
}

// unlabel leaves a label it cannot remove: a stale label is harmless,
// since recovery finds no live episode for it and treats the VM as dirty.
func (f managerFx) unlabel(t target) {
	ctx, cancel := context.WithTimeout(context.Background(), f.m.opts.LabelTimeout)
	defer cancel()
	if err := f.m.vms.SetLabel(ctx, t.vm, LabelEpisode, ""); err != nil && !errors.Is(err, vmm.ErrNotFound) {
		f.m.log.Warn("remove episode label", "op", t.op, "vm", t.vm, "err", err)
	}
}

// reset runs on its own context, not a caller's: a client hanging up must
// not leave the VM half reset. It drops the VM's named snapshots first, so
// that no episode finds (or reverts to) another's: a VM that may still
// hold one fails its reset and is destroyed.
func (f managerFx) reset(t target) (vmm.ResetResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), f.m.opts.ResetTimeout)
	defer cancel()
	if err := f.m.vms.DropSnapshots(ctx, t.vm); err != nil {
		return vmm.ResetResult{}, fmt.Errorf("drop the named snapshots of vm %s: %w", t.vm, err)
	}
	return f.m.vms.Reset(ctx, t.vm)
}

func (f managerFx) destroy(t target) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.m.opts.DestroyTimeout)
	defer cancel()
	err := f.m.vms.Destroy(ctx, t.vm)
	if err != nil && !errors.Is(err, vmm.ErrNotFound) {
		// The member stays destroying; the safety reconcile tries again.
		f.m.log.Error("destroy pool vm", "op", t.op, "vm", t.vm, "pool", t.pool, "err", err)
		return err
	}
	f.m.log.Info("pool vm destroyed", "op", t.op, "vm", t.vm, "pool", t.pool)
	return nil
}
