package vmm

import "time"

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
