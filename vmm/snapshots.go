package vmm

// Named snapshots of a running VM (issue 17): RAM, devices and disk saved
// in place as internal snapshots of the VM's overlay (QEMU's savevm),
// reverted in place (loadvm, as a reset), listed and deleted, bounded per
// VM (Config.Snapshot*). Forks (fork.go) start new VMs from a VM's current
// state. The ready snapshot (readySnapshot) is never named here.
//
// SKELETON (integrator): signatures are the contract; the helper that owns
// vmm replaces the bodies.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Snapshot is one named snapshot of a VM.
type Snapshot struct {
	Name string
	// Created is when it was taken (QEMU's date of the snapshot).
	Created time.Time
	// Bytes is the size of its saved RAM and device state (QEMU's "VM
	// SIZE"); the disk it shares with the overlay is not counted.
	Bytes int64
	// Took is how long the save took (zero for a snapshot found after a
	// restart, whose save this process did not time).
	Took time.Duration
}

// Snapshot sentinels; web maps each to an api code.
var (
	// ErrSnapshotNotFound: no snapshot of that name on the VM.
	ErrSnapshotNotFound = errors.New("snapshot not found")
	// ErrSnapshotExists: a snapshot of that name is already on the VM.
	ErrSnapshotExists = errors.New("snapshot exists")
	// ErrSnapshotLimit: the VM holds as many snapshots, or as many bytes
	// of them, as it may (a *LimitError says which).
	ErrSnapshotLimit = errors.New("snapshot limit reached")
)

// LimitError is a refusal by a limit; it wraps ErrSnapshotLimit (or, for a
// fork, ErrInsufficientResources) and names the limit.
type LimitError struct {
	// Limit names it: "snapshots_per_vm", "snapshot_bytes_per_vm",
	// "memory" (a fork that does not fit).
	Limit string
	// Max is the limit's value, Have what is used now, Asked what the
	// refused call needed (units: count, bytes or MiB, per Limit).
	Max, Have, Asked int64
	// Fits, for a fork, is how many new VMs would fit now.
	Fits int
	Err  error
}

func (e *LimitError) Error() string {
	if e.Limit == "memory" {
		return fmt.Sprintf("fork of %d does not fit: %d would (guest memory limit %d MiB, %d taken)", e.Asked, e.Fits, e.Max, e.Have)
	}
	return fmt.Sprintf("limit %s reached: %d of %d", e.Limit, e.Have, e.Max)
}

func (e *LimitError) Unwrap() error { return e.Err }

// Default limits of a VM's named snapshots (Config.MaxSnapshots,
// Config.MaxSnapshotBytes).
const (
	DefaultMaxSnapshots     = 16
	DefaultMaxSnapshotBytes = 8 << 30
)

// SaveSnapshot saves the VM's RAM, devices and disk as the named snapshot.
// The VM keeps running (it pauses for the save) and its VNC clients stay.
// A name is 1-64 of [a-zA-Z0-9_.-], starting with a letter or digit;
// names beginning "deskfarm-" are reserved (fielderr on "name").
func (m *Manager) SaveSnapshot(ctx context.Context, id, name string) (Snapshot, error) {
	return Snapshot{}, errors.New("SaveSnapshot: not implemented yet")
}

// Snapshots lists the VM's named snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, id string) ([]Snapshot, error) {
	return nil, errors.New("Snapshots: not implemented yet")
}

// RevertSnapshot returns the VM in place to the named snapshot, as Reset
// does to the ready one, and publishes EventReset (Reason "snapshot
// <name>"), so desks and viewers behave as on a reset.
func (m *Manager) RevertSnapshot(ctx context.Context, id, name string) (ResetResult, error) {
	return ResetResult{}, errors.New("RevertSnapshot: not implemented yet")
}

// DeleteSnapshot removes the named snapshot.
func (m *Manager) DeleteSnapshot(ctx context.Context, id, name string) error {
	return errors.New("DeleteSnapshot: not implemented yet")
}

// DropSnapshots removes every named snapshot of the VM (the pool calls it
// when an episode ends); the ready snapshot stays.
func (m *Manager) DropSnapshots(ctx context.Context, id string) error {
	return errors.New("DropSnapshots: not implemented yet")
}

// ForkOptions says how to fork a VM.
type ForkOptions struct {
	// Count is how many new VMs, 1..MaxFork.
	Count int
	// Labels are set on every new VM (the pool's LabelPool).
	Labels map[string]string
}

// MaxFork bounds ForkOptions.Count.
const MaxFork = 32

// Fork starts opts.Count new VMs from the VM's current RAM, devices and
// disk; the source keeps running (it pauses for the save and the copy).
// Each new VM has the source's image and size, resets to the ready
// snapshot like any VM, and holds none of the source's named snapshots.
// All are admitted before any is made: a fork that does not fit is refused
// with a *LimitError (Limit "memory", Fits). On error none is left.
func (m *Manager) Fork(ctx context.Context, id string, opts ForkOptions) ([]VM, error) {
	return nil, errors.New("Fork: not implemented yet")
}
