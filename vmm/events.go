package vmm

import (
	"context"
	"time"
)

// EventKind names a change in a VM's life. vmm publishes one Event per
// change; consumers (pool, the per-VM desks, web's event feed) subscribe with
// Manager.Subscribe instead of being called back or polling.
type EventKind string

// Event kinds, in the order a VM's life can produce them. A VM publishes
// Created once, Ready once, Reset any number of times, Died at most once
// (then it is StateBroken) and Destroyed once, last.
const (
	// EventCreated: the domain is defined and its lifecycle steps have begun.
	EventCreated EventKind = "created"
	// EventReady: the VM is running at its ready snapshot and usable.
	EventReady EventKind = "ready"
	// EventReset: the VM was returned to its ready snapshot; input the guest
	// knew of (held keys, buttons) is gone.
	EventReset EventKind = "reset"
	// EventDied: QEMU exited, crashed or the guest powered off, as libvirt's
	// lifecycle events report; the VM is StateBroken and only Destroy helps.
	EventDied EventKind = "died"
	// EventDestroyed: the domain and its files are gone.
	EventDestroyed EventKind = "destroyed"
)

// Event is one change in a VM's life.
type Event struct {
	Kind EventKind
	// VM is the VM as it was right after the change.
	VM VM
	// At is when vmm saw the change.
	At time.Time
	// Reason says why, for EventDied ("crashed", "shutdown", "destroyed
	// behind deskfarm's back", ...) and EventDestroyed; empty otherwise.
	Reason string
}

// Subscribe returns every lifecycle event published after the call, in
// order per VM. The channel is closed when ctx ends or the Manager closes.
// Publishing never waits for a subscriber.
func (m *Manager) Subscribe(ctx context.Context) <-chan Event { return m.events.Subscribe(ctx) }

// publish sends an event about mc; callers hold mc.op exclusively, which
// keeps one VM's events in order.
func (m *Manager) publish(kind EventKind, mc *machine, reason string) {
	m.events.Publish(Event{Kind: kind, VM: mc.describe(), At: time.Now(), Reason: reason})
}

// markBroken marks mc unusable and, the first time, publishes EventDied.
// Callers hold mc.op exclusively.
func (m *Manager) markBroken(mc *machine, reason string) {
	first := false
	mc.with(func(st *machineState) {
		first = st.state != StateBroken
		st.state = StateBroken
	})
	if !first {
		return
	}
	m.log.Warn("vm broken", "vm", mc.spec.ID, "op", "died", "reason", reason)
	m.publish(EventDied, mc, reason)
}

// SetLabel sets a label of a VM, kept in its domain metadata so it
// survives a deskfarm restart; an empty value removes the label.
func (m *Manager) SetLabel(ctx context.Context, id, key, value string) error {
	if err := ValidateLabels(map[string]string{key: value}); err != nil {
		return err
	}
	mc, _, err := m.change(id)
	if err != nil {
		return err
	}
	defer mc.op.Unlock()
	md := mc.metadata()
	md.Labels = setLabel(md.Labels, key, value)
	if err := m.saveMeta(ctx, mc, md); err != nil {
		return err
	}
	mc.with(func(st *machineState) { st.labels = md.Labels })
	return nil
}
