// Package vmmtest owns deskfarm's one in-memory vmm.Farm, for unit tests of
// the layers above vmm (pool, desks, web, the CLI). It boots nothing: VMs
// are records that go through the same lifecycle events as real ones, and
// faults are injected by the test (Err, FailReset, Kill, CreateHook).
// End-to-end tests use a real vmm.Manager (internal/testenv) instead.
package vmmtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
)

// Farm is an in-memory vmm.Farm. Its exported fields are set by the test
// before use, or under Lock.
type Farm struct {
	mu     sync.Mutex
	vms    map[string]*vmm.VM
	files  map[string][]byte // "id:path"
	modes  map[string]uint32
	nextID int
	events vmm.Bus

	// Err, when set, is returned by every call.
	Err error
	// HealthErr is what Health answers (nil: the hypervisor is up).
	HealthErr error
	// BootTime is how long Create takes (it honours ctx meanwhile).
	BootTime time.Duration
	// BootSeconds is what VM.BootSeconds reports; default BootTime.
	BootSeconds float64
	// ResetTime is the Duration a reset reports.
	ResetTime time.Duration
	// CreateHook runs at the start of Create; an error fails the create.
	CreateHook func(ctx context.Context, opts vmm.CreateOptions) error
	// ExecFn answers Exec; nil echoes stdin as stdout.
	ExecFn func(vmm.ExecRequest) (vmm.ExecResult, error)
	// FailReset fails the next reset of a VM with the error, once.
	FailReset map[string]error
	// Images, when set, are the only image names Create accepts.
	Images []string
	// IDFormat formats the n-th VM's id; default "vm%d".
	IDFormat string
	// MemoryLimitMiB, when set, is the admission limit (vmm.Config's):
	// a create whose memory does not fit beside the VMs alive is refused
	// as vmm.Manager refuses it. 0 means no limit.
	MemoryLimitMiB int

	// MaxSnapshots and MaxSnapshotBytes bound each VM's snapshots as
	// vmm.Config's do; 0 means vmm's defaults. SnapshotBytes is the size
	// every snapshot reports; 0 means DefaultSnapshotBytes.
	MaxSnapshots     int
	MaxSnapshotBytes int64
	SnapshotBytes    int64

	// CPUTimeFn answers CPUTime; nil reports zero (an idle guest).
	CPUTimeFn func(id string) time.Duration

	// LastExec is the last request Exec received.
	LastExec vmm.ExecRequest
	// Resets counts successful resets.
	Resets int
	// Destroyed counts destroyed VMs.
	Destroyed int
	// Reverts counts successful snapshot reverts, Forks successful forks.
	Reverts, Forks int

	snaps map[string][]snapshot // by VM id, oldest first
}

var _ vmm.Farm = (*Farm)(nil)

// Health answers HealthErr.
func (f *Farm) Health() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.HealthErr
}

// New returns an empty farm.
func New() *Farm {
	return &Farm{vms: map[string]*vmm.VM{}, files: map[string][]byte{}, modes: map[string]uint32{},
		FailReset: map[string]error{}, ResetTime: time.Millisecond, snaps: map[string][]snapshot{}}
}

// Lock and Unlock guard the exported fields while the farm is in use.
func (f *Farm) Lock()   { f.mu.Lock() }
func (f *Farm) Unlock() { f.mu.Unlock() }

func (f *Farm) publish(kind vmm.EventKind, v *vmm.VM, reason string) {
	c := *v
	c.Labels = maps.Clone(v.Labels)
	f.events.Publish(vmm.Event{Kind: kind, VM: c, At: time.Now(), Reason: reason})
}

func (f *Farm) vm(id string) (*vmm.VM, error) {
	if f.Err != nil {
		return nil, f.Err
	}
	v, ok := f.vms[id]
	if !ok {
		return nil, fmt.Errorf("vm %q: %w", id, vmm.ErrNotFound)
	}
	return v, nil
}

func (f *Farm) ready(id, op string) (*vmm.VM, error) {
	v, err := f.vm(id)
	if err != nil {
		return nil, err
	}
	if v.State != vmm.StateReady {
		return nil, fmt.Errorf("%s on vm %s: %w (state %s)", op, id, vmm.ErrNotRunning, v.State)
	}
	return v, nil
}

// Create makes a ready VM after BootTime, publishing Created and Ready.
func (f *Farm) Create(ctx context.Context, o vmm.CreateOptions) (vmm.VM, error) {
	// What no host accepts is refused as vmm.Manager refuses it; the
	// defaults are vmm's.
	o, err := o.Normalize()
	if err != nil {
		return vmm.VM{}, err
	}
	if len(f.Images) > 0 && !slices.Contains(f.Images, o.Image) {
		return vmm.VM{}, &fielderr.Error{Path: fielderr.Name("image"), Msg: fmt.Sprintf("image %q is not one of %v", o.Image, f.Images),
			Errs: []error{vmm.ErrUnknownImage}}
	}
	if f.CreateHook != nil {
		if err := f.CreateHook(ctx, o); err != nil {
			return vmm.VM{}, err
		}
	}
	f.mu.Lock()
	if f.Err != nil {
		defer f.mu.Unlock()
		return vmm.VM{}, f.Err
	}
	if f.MemoryLimitMiB > 0 {
		if used := f.usedLocked(); used+o.MemoryMiB > f.MemoryLimitMiB {
			defer f.mu.Unlock()
			return vmm.VM{}, fielderr.Newf("memory_mib", vmm.ErrInsufficientResources, "%d MiB requested but %d of the %d MiB for guests are taken by other VMs",
				o.MemoryMiB, used, f.MemoryLimitMiB)
		}
	}
	f.nextID++
	idf := f.IDFormat
	if idf == "" {
		idf = "vm%d"
	}
	v := &vmm.VM{Network: o.Network, Forwards: o.Forwards, ID: fmt.Sprintf(idf, f.nextID), Image: o.Image, State: vmm.StateCreating,
		MemoryMiB: o.MemoryMiB, VCPUs: o.VCPUs, Width: o.Width, Height: o.Height, Accel: "tcg",
		CreatedAt: time.Now().Add(time.Duration(f.nextID) * time.Microsecond), Start: vmm.StartBoot, Labels: o.Labels}
	v.Domain = vmm.DomainPrefix + v.ID
	f.vms[v.ID] = v
	f.publish(vmm.EventCreated, v, "")
	boot := f.BootTime
	f.mu.Unlock()

	select {
	case <-time.After(boot):
	case <-ctx.Done():
		f.mu.Lock()
		delete(f.vms, v.ID)
		f.publish(vmm.EventDestroyed, v, "create failed")
		f.mu.Unlock()
		return vmm.VM{}, fmt.Errorf("create vm %s: %w", v.ID, ctx.Err())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.vms[v.ID]; !ok {
		return vmm.VM{}, fmt.Errorf("create vm %s: destroyed while booting: %w", v.ID, vmm.ErrNotFound)
	}
	v.State = vmm.StateReady
	v.BootSeconds = cmp.Or(f.BootSeconds, boot.Seconds())
	f.publish(vmm.EventReady, v, "")
	return *v, nil
}

// List returns every VM, oldest first.
func (f *Farm) List(context.Context) ([]vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Err != nil {
		return nil, f.Err
	}
	out := make([]vmm.VM, 0, len(f.vms))
	for _, v := range f.vms {
		c := *v
		c.Labels = maps.Clone(v.Labels)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) || out[i].ID < out[j].ID })
	return out, nil
}

// Get returns one VM.
func (f *Farm) Get(_ context.Context, id string) (vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.vm(id)
	if err != nil {
		return vmm.VM{}, err
	}
	c := *v
	c.Labels = maps.Clone(v.Labels)
	return c, nil
}

// Destroy removes a VM and publishes Destroyed.
func (f *Farm) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.vm(id)
	if err != nil {
		return err
	}
	delete(f.vms, id)
	delete(f.snaps, id)
	f.Destroyed++
	f.publish(vmm.EventDestroyed, v, "destroyed")
	return nil
}

// Reset publishes Reset, or fails once with FailReset[id] (the VM is then
// broken, as a real failed loadvm leaves it).
func (f *Farm) Reset(_ context.Context, id string) (vmm.ResetResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.ready(id, "reset")
	if err != nil {
		return vmm.ResetResult{}, err
	}
	if err := f.FailReset[id]; err != nil {
		delete(f.FailReset, id)
		v.State = vmm.StateBroken
		f.publish(vmm.EventDied, v, "loadvm failed")
		return vmm.ResetResult{}, fmt.Errorf("reset vm %s: %w", id, err)
	}
	v.Resets++
	f.Resets++
	f.publish(vmm.EventReset, v, "")
	return vmm.ResetResult{Duration: f.ResetTime}, nil
}

// Kill makes a VM die as a crashed QEMU would: it turns broken and
// EventDied is published with reason.
func (f *Farm) Kill(id, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.vms[id]; ok && v.State != vmm.StateBroken {
		v.State = vmm.StateBroken
		f.publish(vmm.EventDied, v, reason)
	}
}

// Exec records req and answers with ExecFn, or echoes stdin.
func (f *Farm) Exec(_ context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "exec"); err != nil {
		return vmm.ExecResult{}, err
	}
	if len(req.Argv) == 0 {
		return vmm.ExecResult{}, fielderr.Newf("argv", vmm.ErrInvalid, "needs at least the program name")
	}
	f.LastExec = req
	if f.ExecFn != nil {
		return f.ExecFn(req)
	}
	return vmm.ExecResult{Stdout: req.Stdin}, nil
}

// CPUTime answers as vmm.Manager.CPUTime does, from CPUTimeFn.
func (f *Farm) CPUTime(_ context.Context, id string) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "cpu time"); err != nil {
		return 0, err
	}
	if f.CPUTimeFn == nil {
		return 0, nil
	}
	return f.CPUTimeFn(id), nil
}

// DiskRequests answers as vmm.Manager.DiskRequests does: always 0 (an idle
// disk).
func (f *Farm) DiskRequests(_ context.Context, id string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "disk requests"); err != nil {
		return 0, err
	}
	return 0, nil
}

// ReadFile returns what WriteFile stored.
func (f *Farm) ReadFile(_ context.Context, id, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "read file"); err != nil {
		return nil, err
	}
	data, ok := f.files[id+":"+path]
	if !ok {
		return nil, fmt.Errorf("read %s on vm %s: no such file: %w", path, id, vmm.ErrAgent)
	}
	return data, nil
}

// WriteFile stores data.
func (f *Farm) WriteFile(_ context.Context, id, path string, data []byte, mode uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.ready(id, "write file"); err != nil {
		return err
	}
	f.files[id+":"+path] = data
	f.modes[id+":"+path] = mode
	return nil
}

// FileMode returns the mode a file was written with.
func (f *Farm) FileMode(id, path string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.modes[id+":"+path]
}

// Subscribe returns the farm's lifecycle events.
func (f *Farm) Subscribe(ctx context.Context, name string) <-chan vmm.Event {
	return f.events.Subscribe(ctx, name)
}

// EventQueues reports each subscriber's queue, as vmm.Manager's does.
func (f *Farm) EventQueues() []vmm.QueueStat { return f.events.Queues() }

// SetLabel sets or removes a label.
func (f *Farm) SetLabel(_ context.Context, id, key, value string) error {
	if err := vmm.ValidateLabels(map[string]string{key: value}); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := f.vm(id)
	if err != nil {
		return err
	}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	if value == "" {
		delete(v.Labels, key)
	} else {
		v.Labels[key] = value
	}
	return nil
}

// Count returns the number of VMs.
func (f *Farm) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.vms)
}

// Close ends every subscription.
func (f *Farm) Close() { f.events.Close() }

// File returns a file WriteFile stored, and whether there is one.
func (f *Farm) File(id, path string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[id+":"+path]
	return b, ok
}

// FileOrNil returns a file WriteFile stored, or nil.
func (f *Farm) FileOrNil(id, path string) []byte {
	b, _ := f.File(id, path)
	return b
}

func (f *Farm) usedLocked() int {
	used := 0
	for _, v := range f.vms {
		if v.State != vmm.StateBroken {
			used += v.MemoryMiB
		}
	}
	return used
}

// Capacity returns the guest memory of the VMs not broken and
// MemoryLimitMiB, as vmm.Manager.Capacity does.
func (f *Farm) Capacity() (usedMiB, limitMiB int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usedLocked(), f.MemoryLimitMiB
}

// DialA11y fails: an in-memory VM has no guest to walk. The walk itself
// is tested on a real bus (package atspi) and a real VM (E2E).
func (f *Farm) DialA11y(_ context.Context, id string) (net.Conn, error) {
	return nil, fmt.Errorf("vm %s of the in-memory farm has no accessibility port: %w", id, vmm.ErrInvalid)
}
