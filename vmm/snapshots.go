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
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
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
	if e.Limit == "snapshot_bytes_per_vm" {
		return fmt.Sprintf("limit %s reached: %d bytes held and about %d more for a new one; at most %d", e.Limit, e.Have, e.Asked, e.Max)
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

// Snapshot name rules (CheckSnapshotName).
const (
	MaxSnapshotNameLen = 64
	// ReservedSnapshotPrefix starts the names deskfarm keeps for itself
	// (the ready snapshot, a fork's transfer snapshot).
	ReservedSnapshotPrefix = "deskfarm-"
)

// CheckSnapshotName checks a snapshot name as SaveSnapshot does: 1-64 of
// [A-Za-z0-9_.-], starting with a letter or digit, not reserved. The
// charset also keeps the name one word of an HMP command line.
func CheckSnapshotName(name string) error {
	if name == "" || len(name) > MaxSnapshotNameLen {
		return fielderr.Newf("name", ErrInvalid, "%q: want 1-%d characters", name, MaxSnapshotNameLen)
	}
	for i, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
			return fielderr.Newf("name", ErrInvalid, "%q: want A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit", name)
		}
	}
	if strings.HasPrefix(name, ReservedSnapshotPrefix) {
		return fielderr.Newf("name", ErrInvalid, "%q: names beginning %q are deskfarm's own", name, ReservedSnapshotPrefix)
	}
	return nil
}

// CheckSnapshotLimits says whether a VM holding the named snapshots held
// may save one more, under at most maxCount snapshots and maxBytes bytes of
// them. The size of a save is not known before it is made: estimate (the
// largest snapshot the VM has taken, its ready one included) stands for
// it, so a refusal comes before the bytes are written rather than after.
func CheckSnapshotLimits(held []Snapshot, estimate int64, maxCount int, maxBytes int64) error {
	if len(held) >= maxCount {
		return &LimitError{Limit: "snapshots_per_vm", Max: int64(maxCount), Have: int64(len(held)), Asked: 1, Err: ErrSnapshotLimit}
	}
	var have int64
	for _, s := range held {
		have += s.Bytes
	}
	if have+estimate > maxBytes {
		return &LimitError{Limit: "snapshot_bytes_per_vm", Max: maxBytes, Have: have, Asked: estimate, Err: ErrSnapshotLimit}
	}
	return nil
}

// SnapshotLimits returns the bounds of each VM's named snapshots
// (Config.MaxSnapshots, Config.MaxSnapshotBytes).
func (m *Manager) SnapshotLimits() (maxCount int, maxBytes int64) {
	return m.cfg.MaxSnapshots, m.cfg.MaxSnapshotBytes
}

// SaveSnapshot saves the VM's RAM, devices and disk as the named snapshot.
// The VM keeps running (it pauses for the save) and its VNC clients stay.
// A name is 1-64 of [a-zA-Z0-9_.-], starting with a letter or digit;
// names beginning "deskfarm-" are reserved (fielderr on "name").
func (m *Manager) SaveSnapshot(ctx context.Context, id, name string) (Snapshot, error) {
	if err := CheckSnapshotName(name); err != nil {
		return Snapshot{}, err
	}
	mc, st, err := m.change(id)
	if err != nil {
		return Snapshot{}, err
	}
	defer mc.op.Unlock()
	if st.state != StateReady {
		return Snapshot{}, m.notReadyErr(mc, "snapshot")
	}
	all, err := m.listSnapshots(ctx, mc, st.handles)
	if err != nil {
		return Snapshot{}, err
	}
	// savevm of a name taken replaces that snapshot without a word
	// (captures.json, savevm-existing-ok): refuse first.
	if _, ok := findSnapshot(all, name); ok {
		return Snapshot{}, fmt.Errorf("snapshot %q of vm %s: %w", name, id, ErrSnapshotExists)
	}
	var estimate int64
	for _, s := range all {
		estimate = max(estimate, s.Bytes)
	}
	if err := CheckSnapshotLimits(named(all), estimate, m.cfg.MaxSnapshots, m.cfg.MaxSnapshotBytes); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %q of vm %s: %w", name, id, err)
	}
	start := time.Now()
	// savevm stops the guest, saves and lets it run again; QEMU flushes the
	// disk first, so the disk state matches the RAM saved.
	if err := st.mon.saveVM(ctx, name); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot %q of vm %s: %w", name, id, m.guestErr(ctx, mc, err))
	}
	took := time.Since(start)
	mc.with(func(st *machineState) {
		if st.took == nil {
			st.took = map[string]time.Duration{}
		}
		st.took[name] = took
	})
	// The guest's clock stood still while it was paused.
	if err := m.setClock(ctx, mc, st.handles); err != nil {
		m.log.Warn("guest clock not set after snapshot", "vm", id, "op", "snapshot", "err", err)
	}
	all, err = m.listSnapshots(ctx, mc, st.handles)
	if err != nil {
		return Snapshot{}, err
	}
	snap, ok := findSnapshot(all, name)
	if !ok {
		return Snapshot{}, fmt.Errorf("snapshot %q of vm %s: saved but not listed by QEMU: %w", name, id, ErrSnapshotNotFound)
	}
	snap.Took = took
	m.log.Info("snapshot saved", "vm", id, "op", "snapshot", "snapshot", name, "duration", took.Round(time.Millisecond), "bytes", snap.Bytes)
	return snap, nil
}

// Snapshots lists the VM's named snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, id string) ([]Snapshot, error) {
	mc, h, err := m.ready(id, "list snapshots")
	if err != nil {
		return nil, err
	}
	defer mc.op.RUnlock()
	all, err := m.listSnapshots(ctx, mc, h)
	if err != nil {
		return nil, err
	}
	return named(all), nil
}

// RevertSnapshot returns the VM in place to the named snapshot, as Reset
// does to the ready one, and publishes EventReset (Reason "snapshot
// <name>"), so desks and viewers behave as on a reset.
func (m *Manager) RevertSnapshot(ctx context.Context, id, name string) (ResetResult, error) {
	// The ready snapshot's name is reserved: a revert to it is a Reset.
	if err := CheckSnapshotName(name); err != nil {
		return ResetResult{}, err
	}
	mc, st, err := m.change(id)
	if err != nil {
		return ResetResult{}, err
	}
	defer mc.op.Unlock()
	if st.state != StateReady {
		return ResetResult{}, m.notReadyErr(mc, "revert")
	}
	// A loadvm of a missing snapshot fails after QEMU has stopped the
	// guest, and loadInPlace marks a failed loadvm broken: look first.
	all, err := m.listSnapshots(ctx, mc, st.handles)
	if err != nil {
		return ResetResult{}, err
	}
	if _, ok := findSnapshot(all, name); !ok {
		return ResetResult{}, fmt.Errorf("snapshot %q of vm %s: %w", name, id, ErrSnapshotNotFound)
	}
	return m.loadInPlace(ctx, mc, st, name, "revert", "snapshot "+name)
}

// DeleteSnapshot removes the named snapshot.
func (m *Manager) DeleteSnapshot(ctx context.Context, id, name string) error {
	if err := CheckSnapshotName(name); err != nil {
		return err
	}
	mc, st, err := m.change(id)
	if err != nil {
		return err
	}
	defer mc.op.Unlock()
	if st.state != StateReady {
		return m.notReadyErr(mc, "delete snapshot")
	}
	all, err := m.listSnapshots(ctx, mc, st.handles)
	if err != nil {
		return err
	}
	// delvm of a missing name prints nothing (captures.json,
	// delvm-missing-ok): look first.
	if _, ok := findSnapshot(all, name); !ok {
		return fmt.Errorf("snapshot %q of vm %s: %w", name, id, ErrSnapshotNotFound)
	}
	return m.delSnapshots(ctx, mc, st.handles, name)
}

// DropSnapshots removes every named snapshot of the VM (the pool calls it
// when an episode ends); the ready snapshot stays. A fork's transfer
// snapshot that a crash left behind goes too.
func (m *Manager) DropSnapshots(ctx context.Context, id string) error {
	mc, st, err := m.change(id)
	if err != nil {
		return err
	}
	defer mc.op.Unlock()
	if st.state != StateReady {
		return m.notReadyErr(mc, "drop snapshots")
	}
	all, err := m.listSnapshots(ctx, mc, st.handles)
	if err != nil {
		return err
	}
	var names []string
	for _, s := range all {
		if s.Name != readySnapshot {
			names = append(names, s.Name)
		}
	}
	return m.delSnapshots(ctx, mc, st.handles, names...)
}

// delSnapshots deletes snapshots of mc (delvm), under mc.op.
func (m *Manager) delSnapshots(ctx context.Context, mc *machine, h handles, names ...string) error {
	for _, name := range names {
		if err := h.mon.delVM(ctx, name); err != nil {
			return fmt.Errorf("delete snapshot %q of vm %s: %w", name, mc.spec.ID, m.guestErr(ctx, mc, err))
		}
		mc.with(func(st *machineState) { delete(st.took, name) })
		m.log.Info("snapshot deleted", "vm", mc.spec.ID, "op", "snapshot", "snapshot", name)
	}
	return nil
}

// listSnapshots returns every internal snapshot of mc's disk, the ready one
// and any reserved ones included, with the save times this process took.
// They live in the overlay, so a restarted deskfarm lists them too.
func (m *Manager) listSnapshots(ctx context.Context, mc *machine, h handles) ([]Snapshot, error) {
	out, err := h.mon.output(ctx, "info snapshots")
	if err != nil {
		return nil, fmt.Errorf("list snapshots of vm %s: %w", mc.spec.ID, m.guestErr(ctx, mc, err))
	}
	all, err := parseSnapshots(out)
	if err != nil {
		return nil, fmt.Errorf("list snapshots of vm %s: %w", mc.spec.ID, err)
	}
	mc.with(func(st *machineState) {
		for i := range all {
			all[i].Took = st.took[all[i].Name]
		}
	})
	return all, nil
}

// named drops deskfarm's own snapshots from all.
func named(all []Snapshot) []Snapshot {
	out := []Snapshot{}
	for _, s := range all {
		if !strings.HasPrefix(s.Name, ReservedSnapshotPrefix) {
			out = append(out, s)
		}
	}
	return out
}

func findSnapshot(all []Snapshot, name string) (Snapshot, bool) {
	for _, s := range all {
		if s.Name == name {
			return s, true
		}
	}
	return Snapshot{}, false
}

// ForkOptions says how to fork a VM.
type ForkOptions struct {
	// Count is how many new VMs, 1..MaxFork.
	Count int
	// Labels are set on every new VM (the pool's LabelPool).
	Labels map[string]string
	// Template, when set, is the state the new VMs start from instead of
	// the VM Fork names (which is then ignored): one ExportFork made here
	// or ImportFork received from another node. Every fork copies it; it
	// stays for its owner to Remove.
	Template *ForkTemplate
}

// MaxFork bounds ForkOptions.Count.
const MaxFork = 32

// CheckFork says whether count new VMs of memMiB each fit beside usedMiB
// under limitMiB (0: no limit), as a fork's admission does: all or none.
func CheckFork(count, memMiB, usedMiB, limitMiB int) error {
	if limitMiB <= 0 || usedMiB+count*memMiB <= limitMiB {
		return nil
	}
	fits := max(0, (limitMiB-usedMiB)/memMiB)
	return &LimitError{Limit: "memory", Max: int64(limitMiB), Have: int64(usedMiB), Asked: int64(count), Fits: fits, Err: ErrInsufficientResources}
}

// ForkForwards are a fork's forwards: the source's guest ports, each on a
// host port picked anew (the source keeps its own).
func ForkForwards(src []Forward) []Forward {
	var out []Forward
	for _, f := range src {
		out = append(out, Forward{GuestPort: f.GuestPort})
	}
	return out
}
