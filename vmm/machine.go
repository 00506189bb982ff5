package vmm

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// machine is one VM's live record. Its fields follow two rules:
//
//   - spec is what the VM was made as. It is written only before the
//     machine is registered in Manager.vms (admit picks the host ports
//     then), so anyone who found the machine there reads it without a lock.
//   - st is everything that changes, under mu. mu is held only to read or
//     write st, never across a call to libvirt or the guest, and is taken
//     after Manager.mu when both are held.
//
// op is not a data lock: it orders lifecycle changes (create, reset,
// destroy, a death), which hold it exclusively, against calls into the
// guest, which share it. A reader of st never waits for op, so describing a
// VM never waits on a reset or a create in progress.
type machine struct {
	spec machineSpec

	op sync.RWMutex

	mu sync.Mutex
	st machineState

	// stopWatch ends the QEMU process watch and a reset's agent reopen;
	// closed once (stop) when the VM is gone or the Manager closes.
	stopWatch chan struct{}
	stopOnce  sync.Once

	// a11y admits one connection at a time to the accessibility port
	// (DialA11y); made on first use, under mu.
	a11y chan struct{}
}

// machineSpec is a VM as it was made: fixed for its life.
type machineSpec struct {
	ID        string `xml:"id"`
	Image     string `xml:"image"`
	ImageHash string `xml:"image-hash"`
	// ImageBuild is the image's BaseImage.Build ("" on VMs made before
	// builds were told apart).
	ImageBuild string    `xml:"image-build,omitempty"`
	Dir        string    `xml:"dir"`
	Accel      string    `xml:"accel"`
	Width      int       `xml:"width"`
	Height     int       `xml:"height"`
	MemoryMiB  int       `xml:"memory-mib"` // admission counts it until the VM is destroyed or dead
	VCPUs      int       `xml:"vcpus"`
	Created    time.Time `xml:"created"`
	Start      string    `xml:"start"` // StartBoot or StartSavedState
	Network    string    `xml:"network,omitempty"`
	Forwards   []Forward `xml:"forward,omitempty"` // host ports as admission picked them
}

// machineState is what changes in a VM's life (machine.mu).
type machineState struct {
	state       State
	bootSeconds float64
	labels      []label
	resets      int
	// took is how long each named snapshot's save took, for those this
	// process saved (SaveSnapshot).
	took map[string]time.Duration
	// gone is set once Destroy or a failed create removed the VM.
	gone bool
	// dead is set when libvirt (or the process watch) reported QEMU gone:
	// its memory is free again. deathReason says why.
	dead        bool
	deathReason string
	// procExited is set the moment the QEMU process watch sees it exit,
	// before libvirt says why (guestErr names such a VM dead at once).
	procExited bool
	// exitReason is why QEMU is about to exit, when libvirt said so ahead
	// of the exit (a guest shutdown); "" otherwise.
	exitReason string
	// The VM's handles, set by create's start step or by adoption.
	handles
}

// handles are what calls on a VM go through.
type handles struct {
	dom     libvirt.Domain
	agent   *agent
	mon     *monitor
	session *session // nil until connected; may be closed if QEMU died
}

// with runs f on the machine's state under mu; f must not block.
func (mc *machine) with(f func(st *machineState)) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	f(&mc.st)
}

// handles returns the VM's current handles.
func (mc *machine) handles() handles {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.st.handles
}

// state returns the VM's lifecycle state.
func (mc *machine) state() State {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.st.state
}

// exited says whether QEMU is known to be gone (the process watch saw it
// exit, or libvirt said so).
func (mc *machine) exited() bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.st.procExited || mc.st.dead
}

// alive says whether the VM's memory counts for admission.
func (mc *machine) alive() bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return !mc.st.dead
}

// consoleLog is the VM's serial console log.
func (mc *machine) consoleLog() string { return filepath.Join(mc.spec.Dir, "console.log") }

// stop ends mc's background watch.
func (mc *machine) stop() {
	mc.stopOnce.Do(func() {
		if mc.stopWatch != nil {
			close(mc.stopWatch)
		}
	})
}

// metadata is the record of mc kept on its domain.
func (mc *machine) metadata() metadata {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return metadata{machineSpec: mc.spec, State: mc.st.state, BootSeconds: mc.st.bootSeconds, Labels: slices.Clone(mc.st.labels)}
}

// describe returns the VM as the API shows it.
func (mc *machine) describe() VM {
	s := mc.spec
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return VM{ID: s.ID, Domain: DomainPrefix + s.ID, Image: s.Image, ImageHash: s.ImageHash, State: mc.st.state,
		MemoryMiB: s.MemoryMiB, VCPUs: s.VCPUs, Width: s.Width, Height: s.Height, Accel: s.Accel,
		CreatedAt: s.Created, BootSeconds: mc.st.bootSeconds, Start: s.Start, VNCSocket: filepath.Join(s.Dir, "vnc.sock"),
		Resets: mc.st.resets, Labels: labelMap(mc.st.labels), Network: s.Network, Forwards: slices.Clone(s.Forwards)}
}

// saveMeta writes mc's record to its domain metadata, where a restarted
// deskfarm finds it.
func (m *Manager) saveMeta(ctx context.Context, mc *machine, md metadata) error {
	s, err := md.marshal()
	if err != nil {
		return err
	}
	if err := m.hv.setDomainMetadata(ctx, mc.handles().dom, metadataKey, metadataNS, s); err != nil {
		return fmt.Errorf("save metadata of vm %s: %w", mc.spec.ID, err)
	}
	return nil
}

func (m *Manager) lookup(id string) (*machine, error) {
	m.mu.Lock()
	mc, ok := m.vms[id]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("vm %q: %w", id, ErrNotFound)
	}
	return mc, nil
}

// change returns the VM for a lifecycle change, holding its op lock
// exclusively, and its state as of then; ErrNotFound once it is gone.
// Callers must mc.op.Unlock.
func (m *Manager) change(id string) (*machine, machineState, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return nil, machineState{}, err
	}
	mc.op.Lock()
	mc.mu.Lock()
	st := mc.st
	st.labels = slices.Clone(st.labels)
	mc.mu.Unlock()
	if st.gone {
		mc.op.Unlock()
		return nil, machineState{}, fmt.Errorf("vm %q: %w", id, ErrNotFound)
	}
	return mc, st, nil
}

// ready returns mc and its handles if it can take guest calls, holding its
// op lock shared; callers must mc.op.RUnlock.
func (m *Manager) ready(id, op string) (*machine, handles, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return nil, handles{}, err
	}
	mc.op.RLock()
	mc.mu.Lock()
	gone, st, h := mc.st.gone, mc.st.state, mc.st.handles
	mc.mu.Unlock()
	if gone {
		mc.op.RUnlock()
		return nil, handles{}, fmt.Errorf("vm %q: %w", id, ErrNotFound)
	}
	if st != StateReady {
		err := m.notReadyErr(mc, op)
		mc.op.RUnlock()
		return nil, handles{}, err
	}
	return mc, h, nil
}

// notReadyErr says why mc cannot take op: ErrNotRunning, and ErrDead too
// when its QEMU is gone.
func (m *Manager) notReadyErr(mc *machine, op string) error {
	mc.mu.Lock()
	dead, reason, st := mc.st.dead, mc.st.deathReason, mc.st.state
	mc.mu.Unlock()
	if dead {
		return fmt.Errorf("%s on vm %s: %w: %w (%s)", op, mc.spec.ID, ErrNotRunning, ErrDead, reason)
	}
	return fmt.Errorf("%s on vm %s: %w (state %s)", op, mc.spec.ID, ErrNotRunning, st)
}
