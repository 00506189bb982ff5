package vmm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// This file turns libvirt's lifecycle events into EventDied. libvirt
// reports a QEMU that exits for any reason (killed, crashed, the guest
// powered off, someone ran virsh destroy or undefine) on the event stream
// within milliseconds, so a dead VM is StateBroken and announced at once,
// not when someone next uses it. checkAlive stays for the synchronous paths
// (a failed guest call names a dead QEMU as such).
//
// A domain undefined behind deskfarm's back stays listed, StateBroken, until
// Destroy: consumers learn of it through EventDied like any other death, and
// Destroy (which tolerates missing parts) removes its directory and
// publishes EventDestroyed, so every VM's life ends the same way.

// watch reads the hypervisor's lifecycle events until it closes them.
func (m *Manager) watch() {
	defer close(m.watchDone)
	for ev := range m.hv.events() {
		if ev.Resync {
			go m.resync()
			continue
		}
		id, ok := strings.CutPrefix(ev.Name, DomainPrefix)
		if !ok {
			continue
		}
		m.mu.Lock()
		mc := m.vms[id]
		m.mu.Unlock()
		if mc == nil {
			continue // not ours, or already destroyed
		}
		if ev.Type == libvirt.DomainEventShutdown {
			// QEMU reported the shutdown and is about to exit
			// (on_poweroff=destroy); the process watch may see the exit
			// before libvirt's stop event and uses this reason then.
			reason := "guest powered off"
			if libvirt.DomainEventShutdownDetailType(ev.Detail) == libvirt.DomainEventShutdownHost {
				reason = "qemu shut down by a signal on the host"
			}
			mc.with(func(st *machineState) { st.exitReason = reason })
			continue
		}
		reason, died := deathReason(ev)
		if !died {
			continue
		}
		// Marking takes the VM's lock, which a reset or create in flight
		// holds until it notices the death itself: don't hold up the stream.
		go m.died(mc, reason)
	}
}

// deathReason says whether ev ends a domain's life, and why in words a user
// understands (virDomainEventType and its details, libvirt 9.0).
func deathReason(ev domainEvent) (string, bool) {
	switch ev.Type {
	case libvirt.DomainEventStopped:
		switch libvirt.DomainEventStoppedDetailType(ev.Detail) {
		case libvirt.DomainEventStoppedShutdown:
			return "guest powered off", true
		case libvirt.DomainEventStoppedDestroyed:
			return "destroyed outside deskfarm", true
		case libvirt.DomainEventStoppedCrashed:
			return "guest crashed", true
		case libvirt.DomainEventStoppedFailed:
			return "qemu crashed or was killed", true
		default:
			return fmt.Sprintf("qemu stopped (libvirt stop detail %d)", ev.Detail), true
		}
	case libvirt.DomainEventCrashed:
		return "guest kernel panicked", true
	case libvirt.DomainEventUndefined:
		return "undefined outside deskfarm", true
	}
	return "", false
}

// died marks mc broken because its domain stopped, unless deskfarm itself
// is destroying or unwinding it (then mc is gone by the time the lock is ours).
func (m *Manager) died(mc *machine, reason string) {
	mc.op.Lock()
	defer mc.op.Unlock()
	m.diedLocked(mc, reason)
}

// diedLocked is died for a caller holding mc.op exclusively.
func (m *Manager) diedLocked(mc *machine, reason string) {
	var gone bool
	var sess *session
	mc.with(func(st *machineState) {
		gone, sess = st.gone, st.session
		if !gone {
			st.dead, st.deathReason = true, reason
		}
	})
	if gone {
		return
	}
	if sess != nil {
		sess.close()
	}
	m.markBroken(mc, reason)
}

// resyncTimeout bounds the state check of one VM after a reconnect.
const resyncTimeout = 10 * time.Second

// resync reads every VM's domain state after libvirt reconnected: the events
// of the time it was down are lost.
func (m *Manager) resync() {
	m.mu.Lock()
	mcs := make([]*machine, 0, len(m.vms))
	for _, mc := range m.vms {
		mcs = append(mcs, mc)
	}
	m.mu.Unlock()
	for _, mc := range mcs {
		go func() {
			// Under the VM's op lock: a create or reset in flight finishes first.
			mc.op.Lock()
			defer mc.op.Unlock()
			var skip bool
			mc.with(func(st *machineState) { skip = st.gone || st.state == StateBroken })
			if skip {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), resyncTimeout)
			defer cancel()
			st, err := m.hv.domainState(ctx, mc.handles().dom)
			reason := ""
			switch {
			case libvirt.IsNotFound(err):
				reason = "undefined while libvirt was disconnected"
			case err != nil:
				m.log.Warn("state after libvirt reconnect unknown", "vm", mc.spec.ID, "op", "resync", "err", err)
			case st != libvirt.DomainRunning && st != libvirt.DomainPaused:
				reason = fmt.Sprintf("stopped while libvirt was disconnected (libvirt state %d)", st)
			}
			if reason != "" {
				m.diedLocked(mc, reason)
			}
		}()
	}
}
