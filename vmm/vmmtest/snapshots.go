package vmmtest

// Named snapshots and forks of the in-memory farm: a snapshot keeps the
// VM's files (WriteFile) and a revert puts them back, so tests above vmm
// can tell a revert happened by what a VM holds; a fork's VMs start with
// the source's files.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
)

// DefaultSnapshotBytes is the size a fake snapshot reports when
// Farm.SnapshotBytes is 0.
const DefaultSnapshotBytes = 64 << 20

type snapshot struct {
	vmm.Snapshot
	files map[string][]byte // path → data
	modes map[string]uint32
}

// SnapshotLimits returns the bounds a save is checked against
// (MaxSnapshots, MaxSnapshotBytes, or vmm's defaults).
func (f *Farm) SnapshotLimits() (maxCount int, maxBytes int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.limitsLocked()
}

func (f *Farm) limitsLocked() (int, int64) {
	return cmp.Or(f.MaxSnapshots, vmm.DefaultMaxSnapshots), cmp.Or(f.MaxSnapshotBytes, vmm.DefaultMaxSnapshotBytes)
}

func (f *Farm) snapBytesLocked() int64 { return cmp.Or(f.SnapshotBytes, DefaultSnapshotBytes) }

// filesLocked copies the files of VM id.
func (f *Farm) filesLocked(id string) (map[string][]byte, map[string]uint32) {
	files, modes := map[string][]byte{}, map[string]uint32{}
	for k, b := range f.files {
		if path, ok := strings.CutPrefix(k, id+":"); ok {
			files[path] = slices.Clone(b)
			modes[path] = f.modes[k]
		}
	}
	return files, modes
}

// setFilesLocked replaces the files of VM id.
func (f *Farm) setFilesLocked(id string, files map[string][]byte, modes map[string]uint32) {
	for k := range f.files {
		if strings.HasPrefix(k, id+":") {
			delete(f.files, k)
			delete(f.modes, k)
		}
	}
	for path, b := range files {
		f.files[id+":"+path] = slices.Clone(b)
		f.modes[id+":"+path] = modes[path]
	}
}

func (f *Farm) findLocked(id, name string) (int, error) {
	i := slices.IndexFunc(f.snaps[id], func(s snapshot) bool { return s.Name == name })
	if i < 0 {
		return -1, fmt.Errorf("snapshot %q of vm %s: %w", name, id, vmm.ErrSnapshotNotFound)
	}
	return i, nil
}

// SaveSnapshot records the VM's files as the named snapshot, of
// SnapshotBytes, checked as vmm.Manager checks a save.
func (f *Farm) SaveSnapshot(_ context.Context, id, name string) (vmm.Snapshot, error) {
	if err := vmm.CheckSnapshotName(name); err != nil {
		return vmm.Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "snapshot"); err != nil {
		return vmm.Snapshot{}, err
	}
	if _, err := f.findLocked(id, name); err == nil {
		return vmm.Snapshot{}, fmt.Errorf("snapshot %q of vm %s: %w", name, id, vmm.ErrSnapshotExists)
	}
	held := f.listLocked(id)
	maxN, maxB := f.limitsLocked()
	if err := vmm.CheckSnapshotLimits(held, f.snapBytesLocked(), maxN, maxB); err != nil {
		return vmm.Snapshot{}, fmt.Errorf("snapshot %q of vm %s: %w", name, id, err)
	}
	files, modes := f.filesLocked(id)
	s := snapshot{Snapshot: vmm.Snapshot{Name: name, Created: time.Now().Round(time.Second), Bytes: f.snapBytesLocked(), Took: time.Millisecond},
		files: files, modes: modes}
	f.snaps[id] = append(f.snaps[id], s)
	return s.Snapshot, nil
}

func (f *Farm) listLocked(id string) []vmm.Snapshot {
	out := make([]vmm.Snapshot, 0, len(f.snaps[id]))
	for _, s := range f.snaps[id] {
		out = append(out, s.Snapshot)
	}
	return out
}

// Snapshots lists the VM's named snapshots, oldest first.
func (f *Farm) Snapshots(_ context.Context, id string) ([]vmm.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "list snapshots"); err != nil {
		return nil, err
	}
	return f.listLocked(id), nil
}

// RevertSnapshot puts the VM's files back as they were at the snapshot and
// publishes EventReset (Reason "snapshot <name>"); FailReset[id] fails it
// as it fails a reset.
func (f *Farm) RevertSnapshot(_ context.Context, id, name string) (vmm.ResetResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.ready(id, "revert")
	if err != nil {
		return vmm.ResetResult{}, err
	}
	i, err := f.findLocked(id, name)
	if err != nil {
		return vmm.ResetResult{}, err
	}
	if err := f.FailReset[id]; err != nil {
		delete(f.FailReset, id)
		v.State = vmm.StateBroken
		f.publish(vmm.EventDied, v, "loadvm failed")
		return vmm.ResetResult{}, fmt.Errorf("revert vm %s to snapshot %q: %w", id, name, err)
	}
	s := f.snaps[id][i]
	f.setFilesLocked(id, s.files, s.modes)
	v.Resets++
	f.Reverts++
	f.publish(vmm.EventReset, v, "snapshot "+name)
	return vmm.ResetResult{Duration: f.ResetTime}, nil
}

// DeleteSnapshot removes the named snapshot.
func (f *Farm) DeleteSnapshot(_ context.Context, id, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "delete snapshot"); err != nil {
		return err
	}
	i, err := f.findLocked(id, name)
	if err != nil {
		return err
	}
	f.snaps[id] = slices.Delete(f.snaps[id], i, i+1)
	return nil
}

// DropSnapshots removes every named snapshot of the VM.
func (f *Farm) DropSnapshots(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.vm(id); err != nil {
		return err
	}
	delete(f.snaps, id)
	return nil
}

// Fork makes opts.Count ready VMs like the source (image, size, network)
// holding its files and none of its snapshots, labelled opts.Labels,
// publishing Created and Ready for each. With MemoryLimitMiB set, a fork
// that does not fit is refused whole, as vmm.Manager refuses it.
func (f *Farm) Fork(_ context.Context, id string, opts vmm.ForkOptions) ([]vmm.VM, error) {
	if opts.Count < 1 || opts.Count > vmm.MaxFork {
		return nil, fielderr.Newf("count", vmm.ErrInvalid, "%d is outside 1..%d", opts.Count, vmm.MaxFork)
	}
	if err := vmm.ValidateLabels(opts.Labels); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	src, err := f.ready(id, "fork")
	if err != nil {
		return nil, err
	}
	if err := vmm.CheckFork(opts.Count, src.MemoryMiB, f.usedLocked(), f.MemoryLimitMiB); err != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	files, modes := f.filesLocked(id)
	out := make([]vmm.VM, 0, opts.Count)
	for range opts.Count {
		f.nextID++
		v := &vmm.VM{Network: src.Network, Forwards: vmm.ForkForwards(src.Forwards), ID: fmt.Sprintf(cmp.Or(f.IDFormat, "vm%d"), f.nextID),
			Image: src.Image, ImageHash: src.ImageHash, State: vmm.StateCreating, MemoryMiB: src.MemoryMiB, VCPUs: src.VCPUs,
			Width: src.Width, Height: src.Height, Accel: src.Accel,
			CreatedAt: time.Now().Add(time.Duration(f.nextID) * time.Microsecond), Start: vmm.StartFork, Labels: maps.Clone(opts.Labels)}
		v.Domain = vmm.DomainPrefix + v.ID
		f.vms[v.ID] = v
		f.setFilesLocked(v.ID, files, modes)
		f.publish(vmm.EventCreated, v, "")
		v.State = vmm.StateReady
		f.publish(vmm.EventReady, v, "")
		c := *v
		c.Labels = maps.Clone(v.Labels)
		out = append(out, c)
	}
	f.Forks++
	return out, nil
}
