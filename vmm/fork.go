package vmm

// Forks: new VMs that start from another VM's current RAM, devices and
// disk. The source is paused for a savevm of a transfer snapshot and a
// copy of its overlay (the fork template). Meanwhile each new VM's QEMU
// starts paused on a placeholder disk (or is the standby of VMs like the
// source, standby.go); once the template is there, the new VM's disk is
// pivoted onto a copy of it (pivot.go) and the transfer snapshot loaded.

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
	"golang.org/x/sys/unix"
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
	ok := false
	defer func() {
		if !ok {
			unlock()
		}
	}()
	if err := m.admitAll(mcs); err != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	// The new VMs' QEMUs start while the source's state is saved and
	// copied (makeForks).
	fs := newForkState()
	var vms []VM
	made := make(chan struct{})
	go func() {
		defer close(made)
		vms, err = m.makeForks(ctx, mcs, img, src.spec, fs, true, id)
	}()
	tmpl, snap, terr := m.forkTemplate(ctx, src)
	fs.resolve(tmpl, snap, terr)
	copied := time.Since(start)
	<-made
	if tmpl != "" {
		os.Remove(tmpl) // gone unless a fork failed before taking it
	}
	if terr != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, terr)
	}
	if err != nil {
		return nil, fmt.Errorf("fork vm %s: %w", id, err)
	}
	ok = true
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
	if img.Hash != spec.ImageHash || img.Build != spec.ImageBuild {
		// The copy's overlay backs onto the base image the source had; the
		// one built since is another disk, as is another node's build of
		// the same recipe.
		return BaseImage{}, fmt.Errorf("image %s is not the build the vm was made on (recipe %.12s build %q, here recipe %.12s build %q): %w",
			img.Name, spec.ImageHash, spec.ImageBuild, img.Hash, img.Build, ErrBrokenImage)
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

// forkState is a fork template on its way: resolved once the source's
// state is copied (or failed to be), while the new VMs' QEMUs start.
type forkState struct {
	done chan struct{}
	path string // the template (a qcow2 overlay)
	snap string // its transfer snapshot
	err  error
}

func newForkState() *forkState { return &forkState{done: make(chan struct{})} }

// readyForkState is a template already there (forkFrom's).
func readyForkState(path, snap string) *forkState {
	fs := newForkState()
	fs.resolve(path, snap, nil)
	return fs
}

func (fs *forkState) resolve(path, snap string, err error) {
	fs.path, fs.snap, fs.err = path, snap, err
	close(fs.done)
}

// errNoTemplate fails the forks whose source state could not be copied;
// the caller reports the copy's own error.
var errNoTemplate = errors.New("the source's state was not copied")

// wait waits for the template.
func (fs *forkState) wait(ctx context.Context) error {
	select {
	case <-fs.done:
		if fs.err != nil {
			return errNoTemplate
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// makeForks makes the admitted, op-locked mcs from the fork template fs
// will hold; once they are made it owns their op locks (each unlocked
// after its transfer snapshot's drop), and on error leaves them to the
// caller. Each new VM's QEMU starts paused on a placeholder disk before
// the template is there, and once it is, its disk is pivoted onto a copy
// of the template (pivot.go) and the transfer snapshot loaded: QEMU's
// start (0.5-0.7 s) is then off the fork's path. The first may instead
// take the standby of VMs like it (standby.go), whose QEMU has loaded
// the ready state already: its RAM is faulted in, and the transfer
// snapshot loads as fast as a reset's loadvm. With take, the last fork
// takes the template file itself once the others' copies are done (a
// fork of one copies nothing more); without it every fork copies and the
// template stays. On error none is left.
func (m *Manager) makeForks(ctx context.Context, mcs []*machine, img BaseImage, spec machineSpec, fs *forkState, take bool, source string) ([]VM, error) {
	copts := forkOptions(spec)
	sb, stmpl := m.forkStandby(mcs, img, copts)
	errs := make([]error, len(mcs))
	var wg sync.WaitGroup
	copies := &sync.WaitGroup{}
	copies.Add(len(mcs) - 1)
	for i, mc := range mcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *creation
			var first []step
			if i == 0 && sb != nil {
				c = sb.c
				c.start, c.opts, c.log = time.Now(), copts, m.log.With("vm", mc.spec.ID)
				first = []step{{name: "claim-standby", do: c.adopt, undo: c.undoClaim}}
			} else {
				c = m.newCreation(mc, img, copts, "")
				// QEMU starts paused, as from saved state.
				c.fromSaved = true
				first = c.placeholderSteps()
			}
			c.log.Info("creating vm", "op", "fork", "source", source, "image", img.Name, "standby", i == 0 && sb != nil)
			last := take && i == len(mcs)-1
			copied := func() {}
			if i != len(mcs)-1 {
				// Once, whether or not the copy ran: the last waits.
				copied = sync.OnceFunc(copies.Done)
				defer copied()
			}
			errs[i] = runSteps(ctx, c.log, append(first, c.forkSteps(fs, copies, last, copied)...))
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
			m.dropTransfer(bctx, mc, fs.snap)
		}()
	}
	if sb != nil {
		m.refillStandby(img, copts, stmpl)
	}
	return vms, nil
}

// forkOptions are the create options of a fork of a VM of spec. The
// forwards count only for what they say of the devices (a NIC): a standby
// is taken only for a source without one, whose transfer snapshot it can
// load. Each fork's own host ports are in its spec.
func forkOptions(spec machineSpec) CreateOptions {
	return CreateOptions{Image: spec.Image, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs,
		Width: spec.Width, Height: spec.Height, Network: spec.Network, Forwards: spec.Forwards}
}

// forkStandby claims the standby of VMs like copts for the first of mcs,
// if there is one: the standby's record takes mcs[0]'s place (its id, its
// labels, its admission) and mcs[0] is forgotten. It returns the standby
// and its saved state's path, or nil.
func (m *Manager) forkStandby(mcs []*machine, img BaseImage, copts CreateOptions) (*standby, string) {
	if !m.standbyEligible(copts) {
		return nil, ""
	}
	tmpl := m.templatePath(img, copts)
	sb := m.takeStandby(tmpl) // registered and op-locked
	if sb == nil {
		return nil, ""
	}
	old := mcs[0]
	var labels []label
	old.with(func(st *machineState) { labels = st.labels })
	m.mu.Lock()
	delete(m.vms, old.spec.ID)
	m.mu.Unlock()
	old.with(func(st *machineState) { st.gone = true })
	old.op.Unlock()
	sb.mc.spec.Start = StartFork
	sb.mc.with(func(st *machineState) { st.labels = labels })
	mcs[0] = sb.mc
	return sb, tmpl
}

// placeholderSteps start a fork's QEMU before its state exists: on an
// empty overlay of the base image, paused.
func (c *creation) placeholderSteps() []step {
	return []step{
		{name: "placeholder", do: c.placeholder, undo: c.undoOverlay},
		{name: "define", do: c.define, undo: c.undoDefine},
		{name: "start", do: c.startDomain, undo: c.undoStart},
	}
}

// adopt makes a standby this creation's VM: visible and watched, its
// guest still paused. A create's claim then continues it; a fork's loads
// the transfer snapshot first.
func (c *creation) adopt(context.Context) error {
	c.m.watchProcess(c.mc)
	c.defined = true
	c.m.publish(EventCreated, c.mc, "")
	return nil
}

// undoClaim removes a claimed standby's domain and directory.
func (c *creation) undoClaim(ctx context.Context) error {
	if c.h.session != nil {
		c.h.session.close()
	}
	return c.m.teardown(ctx, c.mc.spec.ID, c.mc.spec.Dir)
}

// forkSteps are a fork's steps once its QEMU is started: its disk from
// the template, the transfer snapshot loaded (then dropped after the ready
// event, by dropTransfer), the clock. As after a reset, the VM is ready
// once loaded and its clock set; guest agent calls wait for libvirt's
// reopen of the agent (reopenAgent) rather than the fork.
func (c *creation) forkSteps(fs *forkState, copies *sync.WaitGroup, last bool, copied func()) []step {
	return []step{
		{name: "wait-template", do: fs.wait},
		{name: "disk", do: func(ctx context.Context) error { return c.forkDisk(fs.path, copies, last, copied) }},
		{name: "pivot", do: c.pivot},
		{name: "restore", do: func(ctx context.Context) error { return c.restoreFrom(ctx, fs.snap, "fork") }},
		{name: "clock", do: c.clock},
		{name: "mark-ready", do: c.markReady},
	}
}

// forkDisk puts the fork's disk in its place: a copy of the template, or
// for the last fork the template itself once every copy is made. The
// placeholder QEMU has open moves aside (QEMU's descriptor follows it)
// until the pivot.
func (c *creation) forkDisk(tmpl string, copies *sync.WaitGroup, last bool, copied func()) error {
	next := c.spec.Overlay + ".fork"
	var err error
	if !last {
		err = copyFile(tmpl, next)
		copied()
	} else {
		copies.Wait()
		err = os.Rename(tmpl, next)
	}
	if err == nil {
		err = chownPrivate(next, c.m.uid, c.m.gid)
	}
	if err == nil {
		err = copySELinuxLabel(c.spec.Overlay, next)
	}
	if err == nil {
		err = os.Rename(c.spec.Overlay, c.spec.Overlay+".placeholder")
	}
	if err == nil {
		err = os.Rename(next, c.spec.Overlay)
	}
	if err != nil {
		return fmt.Errorf("overlay %s from fork template: %w", c.spec.Overlay, err)
	}
	return nil
}

// copySELinuxLabel gives dst the SELinux label of src, when src has one:
// under SELinux sVirt, libvirt labelled the placeholder with the VM's own
// category at start, and QEMU may open only files so labelled. (AppArmor's
// profiles name paths, and the new disk takes the placeholder's path.)
func copySELinuxLabel(src, dst string) error {
	const attr = "security.selinux"
	buf := make([]byte, 256)
	n, err := unix.Getxattr(src, attr, buf)
	if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("label of %s: %w", src, err)
	}
	if err := unix.Setxattr(dst, attr, buf[:n], 0); err != nil {
		return fmt.Errorf("label %s like %s: %w", dst, src, err)
	}
	return nil
}

// pivot moves the paused guest's disk onto the fork's overlay and removes
// the placeholder.
func (c *creation) pivot(ctx context.Context) error {
	if err := c.h.mon.pivotDisk(ctx, c.spec.Overlay, c.img.Disk); err != nil {
		return err
	}
	return os.Remove(c.spec.Overlay + ".placeholder")
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
