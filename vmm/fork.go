package vmm

// Forks: new VMs that start from another VM's current RAM, devices and
// disk. The source is paused for a savevm of a transfer snapshot and a
// copy of its overlay (the fork template); then each new VM is made as a
// VM from saved state is (create.go's steps), loading the transfer
// snapshot instead of the ready one.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// forkSnapshotPrefix names a fork's transfer snapshot (reserved: no
// SaveSnapshot can take it).
const forkSnapshotPrefix = ReservedSnapshotPrefix + "fork-"

// forksDir holds fork templates while their fork runs; a starting Manager
// empties it (no fork outlives its process).
func (m *Manager) forksDir() string { return filepath.Join(m.cfg.StateDir, "forks") }

// Fork starts opts.Count new VMs from the VM's current RAM, devices and
// disk; the source keeps running (it pauses for the save and the copy).
// Each new VM has the source's image and size, resets to the ready
// snapshot like any VM, and holds none of the source's named snapshots.
// All are admitted before any is made: a fork that does not fit is refused
// with a *LimitError (Limit "memory", Fits). On error none is left.
func (m *Manager) Fork(ctx context.Context, id string, opts ForkOptions) ([]VM, error) {
	if opts.Count < 1 || opts.Count > MaxFork {
		return nil, fielderr.Newf("count", ErrInvalid, "%d is outside 1..%d", opts.Count, MaxFork)
	}
	if err := ValidateLabels(opts.Labels); err != nil {
		return nil, err
	}
	if opts.Template != nil {
		return m.forkFrom(ctx, opts.Template, opts)
	}
	start := time.Now()
	src, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	img, err := m.forkImage(src.spec)
	if err != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	mcs, unlock := m.forkMachines(src.spec, opts)
	made := false
	defer func() {
		if !made {
			unlock()
		}
	}()
	if err := m.admitAll(mcs); err != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	tmpl, snap, err := m.forkTemplate(ctx, src)
	if err != nil {
		m.unadmit(mcs)
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	defer os.Remove(tmpl)
	copied := time.Since(start)
	vms, err := m.makeForks(ctx, mcs, img, src.spec, tmpl, snap, true, id)
	if err != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	made = true
	m.log.Info("vm forked", "vm", id, "op", "fork", "count", len(mcs), "duration", time.Since(start).Round(time.Millisecond),
		"source_paused_and_copied", copied.Round(time.Millisecond))
	return vms, nil
}

// forkImage is the base image a fork of a VM of spec backs onto: the one
// the VM was made from, refused if it was rebuilt since.
func (m *Manager) forkImage(spec machineSpec) (BaseImage, error) {
	img, err := m.cfg.Images.Resolve(spec.Image)
	if err != nil {
		return BaseImage{}, err
	}
	if img.Hash != spec.ImageHash {
		// The copy's overlay backs onto the base image the source had; the
		// one built since is another disk.
		return BaseImage{}, fmt.Errorf("image %s was rebuilt since the vm was made (%s, now %s): %w",
			img.Name, spec.ImageHash, img.Hash, ErrBrokenImage)
	}
	return img, nil
}

// forkMachines are the records of opts.Count new VMs like spec, op-locked
// before they are visible (as Create does) until unlock. Once makeForks
// has made them, their locks are its (see there): the caller unlocks only
// when it failed.
func (m *Manager) forkMachines(spec machineSpec, opts ForkOptions) ([]*machine, func()) {
	mcs := make([]*machine, opts.Count)
	for i := range mcs {
		mcs[i] = m.forkMachine(spec, opts.Labels)
		mcs[i].op.Lock()
	}
	return mcs, func() {
		for _, mc := range mcs {
			mc.op.Unlock()
		}
	}
}

// makeForks makes the admitted, op-locked mcs from the fork template tmpl
// holding the transfer snapshot snap; once they are made it owns their op
// locks (each unlocked after its transfer snapshot's drop), and on error
// leaves them to the caller. With take, the last fork takes tmpl itself once
// the others' copies are done (a fork of one copies nothing more); without
// it every fork copies and tmpl stays. On error none is left.
func (m *Manager) makeForks(ctx context.Context, mcs []*machine, img BaseImage, spec machineSpec, tmpl, snap string, take bool, source string) ([]VM, error) {
	copts := CreateOptions{Image: spec.Image, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs,
		Width: spec.Width, Height: spec.Height, Network: spec.Network}
	errs := make([]error, len(mcs))
	var wg sync.WaitGroup
	copies := &sync.WaitGroup{}
	copies.Add(len(mcs) - 1)
	for i, mc := range mcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := m.newCreation(mc, img, copts, tmpl)
			// QEMU starts paused, as from saved state.
			c.fromSaved = true
			c.log.Info("creating vm", "op", "fork", "source", source, "image", img.Name)
			last := take && i == len(mcs)-1
			copied := func() {}
			if i != len(mcs)-1 {
				// Once, whether or not the copy ran: the last waits.
				copied = sync.OnceFunc(copies.Done)
				defer copied()
			}
			errs[i] = runSteps(ctx, c.log, c.forkSteps(snap, copies, last, copied))
			if errs[i] != nil {
				m.unmake(mc, c, "fork failed")
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// Nothing is left: the forks made are removed too.
		for i, mc := range mcs {
			if errs[i] == nil {
				m.removeFork(mc)
			}
		}
		return nil, err
	}
	vms := make([]VM, len(mcs))
	for i, mc := range mcs {
		m.publish(EventReady, mc, "")
		vms[i] = mc.describe()
		// The fork's op lock, held since forkMachines, passes to the
		// drop: the next operation on the fork finds it done.
		go func() {
			defer mc.op.Unlock()
			bctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
			defer cancel()
			m.dropTransfer(bctx, mc, snap)
		}()
	}
	return vms, nil
}

// removeForkTemplates removes what forks of an earlier process left.
func (m *Manager) removeForkTemplates() error {
	if err := os.RemoveAll(m.forksDir()); err != nil {
		return fmt.Errorf("remove fork templates: %w", err)
	}
	return nil
}

// forkMachine is the record of a new VM like one of spec src.
func (m *Manager) forkMachine(src machineSpec, labels map[string]string) *machine {
	id := newID()
	spec := src
	spec.ID, spec.Dir, spec.Created, spec.Start = id, m.vmDir(id), time.Now().UTC().Truncate(time.Second), StartFork
	spec.Forwards = ForkForwards(src.Forwards)
	return &machine{spec: spec, stopWatch: make(chan struct{}), st: machineState{state: StateCreating, labels: labelList(labels)}}
}

// admitAll admits every one of mcs or none: their memory together must fit
// (CheckFork says how many would), and each gets its host ports.
func (m *Manager) admitAll(mcs []*machine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	mem := mcs[0].spec.MemoryMiB
	// Standbys (standby.go) hold memory only until a create needs it.
	credit := 0
	if m.fitsLocked(len(mcs)*mem, 0) != nil {
		credit = m.usedStandbyLocked()
		m.evictStandbysLocked("a fork needs its memory")
	}
	if err := CheckFork(len(mcs), mem, m.usedLocked(), m.memLimit); err != nil {
		return err
	}
	// With guest memory overcommitted, the host's MemAvailable is a floor
	// too (checkAvailableLocked): fewer may fit than the limit allows.
	if err := m.checkAvailableLocked(len(mcs)*mem, credit); err != nil {
		fits := len(mcs) - 1
		for fits > 0 && m.checkAvailableLocked(fits*mem, credit) != nil {
			fits--
		}
		return &LimitError{Limit: "memory", Max: int64(m.memLimit), Have: int64(m.usedLocked()), Asked: int64(len(mcs)), Fits: fits, Err: err}
	}
	for i, mc := range mcs {
		if err := m.pickPortsLocked(mc.spec.Forwards); err != nil {
			for _, o := range mcs[:i] {
				delete(m.vms, o.spec.ID)
			}
			return err
		}
		m.vms[mc.spec.ID] = mc
	}
	return nil
}

// unadmit forgets mcs, none of which was made.
func (m *Manager) unadmit(mcs []*machine) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mc := range mcs {
		delete(m.vms, mc.spec.ID)
		mc.with(func(st *machineState) { st.gone = true })
	}
}

// forkTemplate copies src's current state into a fork template, under
// src's op lock: the guest stops, a transfer snapshot is saved, the
// overlay is copied while nothing writes it (stop flushes QEMU's block
// layer), and src runs on. The copy then loses src's named snapshots (and
// any transfer snapshot an earlier fork left), which no fork holds.
//
// Once src runs, the forks have what they need: the transfer snapshot's
// delvm on src (about 100 ms) and src's clock are done after this returns,
// beside the forks' making, still under src's op lock (so the next
// operation on src sees neither half done).
func (m *Manager) forkTemplate(ctx context.Context, src *machine) (tmpl, snap string, err error) {
	mc, st, err := m.change(src.spec.ID)
	if err != nil {
		return "", "", err
	}
	locked := true
	defer func() {
		if locked {
			mc.op.Unlock()
		}
	}()
	if st.state != StateReady {
		return "", "", m.notReadyErr(mc, "fork")
	}
	all, err := m.listSnapshots(ctx, mc, st.handles)
	if err != nil {
		return "", "", err
	}
	snap = forkSnapshotPrefix + newID()
	tmpl = filepath.Join(m.forksDir(), snap+".qcow2")
	mon := st.mon
	if err := mon.stop(ctx); err != nil {
		return "", "", m.guestErr(ctx, mc, err)
	}
	err = mon.saveVM(ctx, snap)
	if err == nil {
		err = copyFile(filepath.Join(mc.spec.Dir, "disk.qcow2"), tmpl)
	}
	if cerr := mon.cont(context.WithoutCancel(ctx)); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		// Whatever happened, src loses the transfer snapshot.
		m.dropSourceTransfer(context.WithoutCancel(ctx), mc, st.handles, snap, false)
		os.Remove(tmpl)
		return "", "", m.guestErr(ctx, mc, err)
	}
	locked = false
	go func() {
		defer mc.op.Unlock()
		bctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
		defer cancel()
		m.dropSourceTransfer(bctx, mc, st.handles, snap, true)
	}()
	var drop []string
	for _, s := range all {
		if !strings.HasPrefix(s.Name, ReservedSnapshotPrefix) || strings.HasPrefix(s.Name, forkSnapshotPrefix) {
			drop = append(drop, s.Name)
		}
	}
	if err := dropOffline(tmpl, drop); err != nil {
		os.Remove(tmpl)
		return "", "", err
	}
	return tmpl, snap, nil
}

// dropSourceTransfer deletes a fork's transfer snapshot from its source
// and, when the guest ran on, sets its clock (it was stopped for the save
// and the copy).
func (m *Manager) dropSourceTransfer(ctx context.Context, mc *machine, h handles, snap string, clock bool) {
	if clock {
		if err := m.setClock(ctx, mc, h); err != nil {
			m.log.Warn("guest clock not set after fork", "vm", mc.spec.ID, "op", "fork", "err", err)
		}
	}
	if err := h.mon.delVM(ctx, snap); err != nil {
		m.log.Warn("transfer snapshot left on the source", "vm", mc.spec.ID, "op", "fork", "snapshot", snap, "err", err)
	}
}

// dropTransfer deletes the transfer snapshot from a new fork once it is
// ready (its RAM would count in the fork's disk). The caller holds mc's op
// lock, taken before the fork was visible: after the fork's ready event
// rather than before, as the fork needs it no more once loaded.
func (m *Manager) dropTransfer(ctx context.Context, mc *machine, snap string) {
	if err := mc.handles().mon.delVM(ctx, snap); err != nil {
		m.log.Warn("transfer snapshot left on a fork", "vm", mc.spec.ID, "op", "fork", "snapshot", snap, "err", err)
	}
}

// dropOffline deletes snapshots from a qcow2 file no QEMU has open.
func dropOffline(path string, names []string) error {
	for _, n := range names {
		if out, err := exec.Command("qemu-img", "snapshot", "-d", n, path).CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img snapshot -d %s %s: %w: %s", n, path, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// forkSteps are a fork's lifecycle steps: a VM from saved state's, with
// the transfer snapshot loaded and then dropped. As after a reset, the VM
// is ready once loaded and its clock set; guest agent calls wait for
// libvirt's reopen of the agent (reopenAgent) rather than the fork.
func (c *creation) forkSteps(snap string, copies *sync.WaitGroup, last bool, copied func()) []step {
	return []step{
		{name: "overlay", do: func(ctx context.Context) error { return c.forkOverlay(copies, last, copied) }, undo: c.undoOverlay},
		{name: "define", do: c.define, undo: c.undoDefine},
		{name: "start", do: c.startDomain, undo: c.undoStart},
		{name: "restore", do: func(ctx context.Context) error { return c.restoreFrom(ctx, snap, "fork") }},
		// The transfer snapshot is dropped after the ready event
		// (dropTransfer); the ready snapshot stays: it resets there.
		{name: "clock", do: c.clock},
		{name: "mark-ready", do: c.markReady},
	}
}

// forkOverlay makes the fork's disk from the template: a copy, or for the
// last fork the template itself once every copy is made.
func (c *creation) forkOverlay(copies *sync.WaitGroup, last bool, copied func()) error {
	if !last {
		defer copied()
		return c.overlay(context.Background())
	}
	copies.Wait()
	dir := c.mc.spec.Dir
	if err := makeVMDir(dir, c.m.uid, c.m.gid); err != nil {
		return err
	}
	err := os.Rename(c.tmpl, c.spec.Overlay)
	if err == nil {
		err = chownPrivate(c.spec.Overlay, c.m.uid, c.m.gid)
	}
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("overlay %s from fork template: %w", c.spec.Overlay, err)
	}
	return nil
}

// removeFork removes a fork that was made while another of its fork failed.
func (m *Manager) removeFork(mc *machine) {
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	if sess := mc.handles().session; sess != nil {
		sess.close()
	}
	if err := m.teardown(ctx, mc.spec.ID, mc.spec.Dir); err != nil {
		m.log.Error("remove fork after a failed fork", "vm", mc.spec.ID, "op", "fork", "err", err)
		m.markBroken(mc, "fork failed; removal failed")
		return
	}
	mc.with(func(st *machineState) { st.gone = true })
	mc.stop()
	m.mu.Lock()
	delete(m.vms, mc.spec.ID)
	m.mu.Unlock()
	m.publish(EventDestroyed, mc, "fork failed")
}
