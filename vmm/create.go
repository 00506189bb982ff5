package vmm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// Create makes a VM and returns once it is ready. The steps (see creation)
// are: overlay, define, start, then either restore (from a saved ready
// state) or wait-display and snapshot (a boot), wait-agent, and mark-ready.
// A failure undoes the finished steps in reverse, so nothing is left.
func (m *Manager) Create(ctx context.Context, opts CreateOptions) (VM, error) {
	opts, err := opts.Normalize()
	if err != nil {
		return VM{}, err
	}
	if err := m.checkHost(opts); err != nil {
		return VM{}, err
	}
	img, err := m.cfg.Images.Resolve(opts.Image)
	if err != nil {
		return VM{}, &fielderr.Error{Path: fielderr.Name("image"), Msg: err.Error(), Errs: []error{err}}
	}
	if vm, ok := m.createFromStandby(ctx, img, opts, m.templatePath(img, opts)); ok {
		return vm, nil
	}
	mc, tmpl := m.newMachine(img, opts)
	// Locked before it is visible: a Destroy of the new id must wait for
	// the create to finish or unwind.
	mc.op.Lock()
	defer mc.op.Unlock()
	if err := m.admit(mc); err != nil {
		return VM{}, err
	}
	c := m.newCreation(mc, img, opts, tmpl)
	c.log.Info("creating vm", "op", "create", "image", img.Name, "memory_mib", opts.MemoryMiB, "vcpus", opts.VCPUs,
		"accel", m.accel, "start", mc.spec.Start)
	if err := runSteps(ctx, c.log, c.steps()); err != nil {
		m.unmake(mc, c, "create failed")
		return VM{}, fmt.Errorf("create vm %s (image %s): %w", mc.spec.ID, img.Name, err)
	}
	c.log.Info("vm ready", "op", "create", "duration", time.Since(c.start).Round(time.Millisecond))
	m.publish(EventReady, mc, "")
	if c.spare {
		m.refillSpare(c.tmpl)
	}
	m.refillStandby(img, opts, m.templatePath(img, opts))
	return mc.describe(), nil
}

// unmake forgets a new VM (a create's or a fork's) whose steps failed
// (they undid themselves); reason goes with EventDestroyed.
func (m *Manager) unmake(mc *machine, c *creation, reason string) {
	m.mu.Lock()
	delete(m.vms, mc.spec.ID)
	m.mu.Unlock()
	mc.with(func(st *machineState) { st.gone = true })
	mc.stop()
	if c.defined {
		m.publish(EventDestroyed, mc, reason)
	}
}

// creation is one Create in progress: what it makes and the lifecycle steps
// that make it, each a method with its undo. The steps run under mc.op,
// which Create holds exclusively; h are the handles they make, published to
// mc's state as each is made.
type creation struct {
	m    *Manager
	mc   *machine
	h    handles
	img  BaseImage
	opts CreateOptions
	spec domainSpec
	log  *slog.Logger
	// tmpl is the saved ready state of VMs like this one; fromSaved says
	// the VM starts from it rather than booting.
	tmpl      string
	fromSaved bool
	// spare: tmpl is the saved ready state of VMs like this one, whose
	// spare copy (spare.go) the overlay may take.
	spare bool
	// standby: this makes a standby (standby.go), nobody's VM until
	// claimed: define publishes no event and start watches no process.
	standby bool
	start   time.Time
	defined bool // the domain exists (EventCreated was published)
}

// newMachine returns the record of a new VM made with opts (normalised) and
// the saved ready state of VMs like it.
func (m *Manager) newMachine(img BaseImage, opts CreateOptions) (*machine, string) {
	id := newID()
	spec := machineSpec{ID: id, Image: img.Name, ImageHash: img.Hash, ImageBuild: img.Build, Dir: m.vmDir(id),
		Accel: m.accel, Width: opts.Width, Height: opts.Height, MemoryMiB: opts.MemoryMiB, VCPUs: opts.VCPUs,
		Created: time.Now().UTC().Truncate(time.Second), Network: opts.Network, Forwards: slices.Clone(opts.Forwards),
		Start: StartBoot}
	// A VM of the same image and size made before left its ready state (RAM,
	// devices and disk, as an internal snapshot in a copy of its overlay):
	// start from a copy of that instead of booting.
	tmpl := m.templatePath(img, opts)
	if !opts.Boot && fileExists(tmpl) {
		spec.Start = StartSavedState
	}
	return &machine{spec: spec, stopWatch: make(chan struct{}), st: machineState{state: StateCreating, labels: labelList(opts.Labels)}}, tmpl
}

// newCreation plans the making of mc, once admitted (its spec is final).
func (m *Manager) newCreation(mc *machine, img BaseImage, opts CreateOptions, tmpl string) *creation {
	id, dir := mc.spec.ID, mc.spec.Dir
	c := &creation{m: m, mc: mc, img: img, opts: opts, log: m.log.With("vm", id), start: time.Now(),
		tmpl: tmpl, fromSaved: mc.spec.Start == StartSavedState}
	c.spare = c.fromSaved && tmpl == m.templatePath(img, opts)
	c.spec = domainSpec{Name: DomainPrefix + id, Meta: mc.metadata(), Accel: m.accel, MemoryMiB: opts.MemoryMiB, VCPUs: opts.VCPUs,
		Kernel: img.Kernel, Initrd: img.Initrd,
		// init_on_free zeroes freed guest pages, which QEMU's savevm stores
		// as one flag each: the ready snapshot shrinks (desktop: 244 to
		// 167 MiB measured) and resets load less.
		Cmdline: fmt.Sprintf("%s video=%dx%d deskfarm.screen=%dx%d init_on_free=1",
			img.Cmdline, opts.Width, opts.Height, opts.Width, opts.Height),
		Overlay:     filepath.Join(dir, "disk.qcow2"),
		VNCSocket:   filepath.Join(dir, "vnc.sock"),
		SessionSock: filepath.Join(dir, "session.sock"),
		A11ySock:    filepath.Join(dir, a11ySockName),
		ConsoleLog:  mc.consoleLog(),
		Emulator:    m.cfg.Emulator,
		Security:    m.security,
		Network:     mc.spec.Network,
		Forwards:    mc.spec.Forwards, // with the host ports admit picked
		Balloon:     !m.cfg.NoBalloon,
	}
	return c
}

// setHandles publishes the handles made so far to mc's state.
func (c *creation) setHandles() { c.mc.with(func(st *machineState) { st.handles = c.h }) }

// steps lists the lifecycle steps in order.
func (c *creation) steps() []step {
	steps := []step{
		{name: "overlay", do: c.overlay, undo: c.undoOverlay},
		{name: "define", do: c.define, undo: c.undoDefine},
		{name: "start", do: c.startDomain, undo: c.undoStart},
	}
	if c.fromSaved {
		// No wait-agent step: as after a reset, the VM is ready once its
		// RAM is loaded and its clock set (screenshots and input work),
		// and guest agent calls wait at the agent's gate until libvirt's
		// connection to the restored agent is open (see restore).
		steps = append(steps,
			step{name: "restore", do: c.restore},
			step{name: "clock", do: c.clock},
		)
	} else {
		steps = append(steps,
			step{name: "wait-display", do: c.waitDisplay},
			step{name: "wait-agent", do: c.waitAgent},
		)
		if hasNIC(c.opts.Network, c.opts.Forwards) {
			// Before the snapshot: resets and VMs from this saved state
			// come back with the NIC configured.
			steps = append(steps, step{name: "guest-network", do: c.guestNetwork})
		}
		steps = append(steps, step{name: "snapshot", do: c.snapshot})
	}
	return append(steps, step{name: "mark-ready", do: c.markReady})
}

// alive fails with ErrDead once the VM's QEMU is gone.
func (c *creation) alive(ctx context.Context) func() error {
	return func() error { return c.m.checkAlive(ctx, c.mc) }
}

// overlay makes the VM directory and its disk: a copy of the saved ready
// state, or a fresh qcow2 overlay on the base image.
func (c *creation) overlay(ctx context.Context) error {
	if !c.fromSaved {
		return c.placeholder(ctx)
	}
	return c.partial(c.m.overlayFrom(c.mc.spec.Dir, c.tmpl, c.spec.Overlay, c.spare))
}

// placeholder makes the VM directory with an empty overlay on the base: a
// boot's disk, and a fork's until its copy is pivoted in.
func (c *creation) placeholder(context.Context) error {
	return c.partial(c.m.makeOverlay(c.mc.spec.Dir, c.img.Disk, c.spec.Overlay))
}

// partial removes what a failed overlay step left of the VM directory: a
// step cleans up its own partial work, and undo is only for steps that
// finished. A directory that was there already (ErrExist) is not this
// creation's.
func (c *creation) partial(err error) error {
	if err != nil && !errors.Is(err, fs.ErrExist) {
		os.RemoveAll(c.mc.spec.Dir)
	}
	return err
}

func (c *creation) undoOverlay(context.Context) error { return os.RemoveAll(c.mc.spec.Dir) }

// define defines the libvirt domain; from here on the VM is visible to
// libvirt and EventCreated is published.
func (c *creation) define(ctx context.Context) error {
	xml, err := domainXML(c.spec)
	if err != nil {
		return err
	}
	c.h.dom, err = c.m.hv.defineDomain(ctx, xml)
	if err != nil {
		return err
	}
	c.setHandles()
	if !c.standby {
		c.defined = true
		c.m.publish(EventCreated, c.mc, "")
	}
	return nil
}

func (c *creation) undoDefine(ctx context.Context) error { return c.m.hv.undefineDomain(ctx, c.h.dom) }

// startDomain starts QEMU and connects the session channel at once: QEMU
// drops what the guest writes to the session port while no one is connected
// on the host side.
func (c *creation) startDomain(ctx context.Context) error {
	// From saved state QEMU starts paused: no guest code runs before loadvm
	// replaces RAM.
	if err := c.m.hv.startDomain(ctx, c.h.dom, c.fromSaved); err != nil {
		return err
	}
	id := c.mc.spec.ID
	c.h.agent = &agent{hv: c.m.hv, dom: c.h.dom, vm: id}
	c.h.mon = &monitor{hv: c.m.hv, dom: c.h.dom, vm: id}
	c.setHandles()
	if !c.standby {
		c.m.watchProcess(c.mc)
	}
	sess, err := dialSession(ctx, id, c.spec.SessionSock, c.alive(ctx))
	c.h.session = sess
	c.setHandles()
	return err
}

func (c *creation) undoStart(ctx context.Context) error {
	if c.h.session != nil {
		c.h.session.close()
	}
	return ignoreNotRunning(c.m.hv.destroyDomain(ctx, c.h.dom))
}

// restore loads the saved ready state into the paused QEMU and runs it.
//
// The guest agent in the restored RAM is up, but libvirt opens its
// connection to it only once QEMU reports the agent's port open, which
// loadvm causes: as in Reset, the agent's gate is held from before loadvm
// and reopenAgent, in the background, opens it once libvirt's connection is
// there and a ping answers. Waiting for that here (the wait-agent step this
// replaced) cost a create from saved state 0.4-1 s that only agent calls
// need (docs/benchmarks.md, cold start). reopenAgent ends with the VM
// (mc.stopWatch), so a create that fails later leaves it nothing to wait on.
func (c *creation) restore(ctx context.Context) error {
	return c.restoreFrom(ctx, readySnapshot, "restore")
}

// restoreFrom loads snapshot name into the paused QEMU and runs it,
// holding guest agent calls until libvirt has reopened its agent
// connection (loadvm resets the agent's port), as Reset does: the VM is
// usable once loaded, agent calls wait at the gate (reopenAgent). Both a
// VM from saved state and a fork (its transfer snapshot) start so.
func (c *creation) restoreFrom(ctx context.Context, name, op string) error {
	t := time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), c.m.cfg.AgentTimeout)
	evs, err := c.m.hv.agentEvents(rctx, c.h.dom)
	if err != nil {
		c.log.Warn("no guest agent events; waiting on pings alone", "op", op, "err", err)
	}
	c.h.agent.hold()
	err = c.h.mon.loadVM(ctx, name)
	if err == nil {
		c.log.Debug("loadvm done", "op", op, "duration", time.Since(t).Round(time.Millisecond))
		err = c.h.mon.cont(ctx)
	}
	if err != nil {
		rcancel()
		c.h.agent.release()
		return err
	}
	go c.m.reopenAgent(rctx, rcancel, c.mc, c.h.agent, evs, t)
	return nil
}

// waitDisplay waits, within Config.BootTimeout, for the guest to say its
// desktop session is up.
func (c *creation) waitDisplay(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.m.cfg.BootTimeout)
	defer cancel()
	return c.withConsole(c.h.session.waitReady(ctx, c.alive(ctx)))
}

// withConsole adds the guest console's last lines to a boot wait that
// timed out: a guest that hangs in its boot says where only there (a
// tiny VM once sat 3 min before its display in a CI run, 2026-12-02, and
// nothing else told why).
func (c *creation) withConsole(err error) error {
	if !errors.Is(err, ErrTimeout) {
		return err
	}
	return fmt.Errorf("%w; console tail: %s", err, tail(c.mc.consoleLog(), 8))
}

// waitAgent waits, within Config.AgentTimeout, for the guest agent.
func (c *creation) waitAgent(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.m.cfg.AgentTimeout)
	defer cancel()
	return c.withConsole(c.h.agent.waitReady(ctx, c.alive(ctx)))
}

// guestNetworkScript gives the guest's NIC QEMU user-mode networking's
// fixed address (slirp: guest 10.0.2.15, host and gateway 10.0.2.2, DNS
// 10.0.2.3) through systemd-networkd, which deskfarm's images keep masked
// (a VM without network must not wait for it). Static, so no DHCP wait.
//
// dns is false on a restricted stack (NetworkNone with forwards), where
// slirp drops every packet the guest sends out, DNS queries too: the guest
// then gets no name server, so a lookup fails at once (glibc asks
// 127.0.0.1, which refuses) instead of waiting out its timeouts. OSWorld's
// task steps run apt and pip, which otherwise spent minutes on lookups
// (chrome/9656a811 ran past the runner's 120 s in "apt update").
func guestNetworkScript(dns bool) string {
	dnsLine, resolv := `DNS=10.0.2.3\n`, `[ -e /etc/resolv.conf ] || echo 'nameserver 10.0.2.3' >/etc/resolv.conf`
	if !dns {
		dnsLine, resolv = "", `echo '# deskfarm: no route out, no name server' >/etc/resolv.conf`
	}
	return `set -e
mkdir -p /run/systemd/network
printf '[Match]\nName=en* eth*\n\n[Network]\nAddress=10.0.2.15/24\nGateway=10.0.2.2\n` + dnsLine + `LinkLocalAddressing=no\nIPv6AcceptRA=no\n' >/run/systemd/network/10-deskfarm.network
` + resolv + `
systemctl unmask systemd-networkd.service systemd-networkd.socket >/dev/null 2>&1 || true
systemctl start systemd-networkd.service
i=0
until networkctl status 2>/dev/null | grep -q '10\.0\.2\.15'; do
	i=$((i+1)); [ $i -lt 100 ] || { echo 'no address after 20 s' >&2; exit 1; }
	sleep 0.2
done`
}

// guestNetwork configures the guest's NIC (see guestNetworkScript). An
// image without systemd-networkd keeps an unconfigured NIC: logged, not
// fatal, as the VM is otherwise usable.
func (c *creation) guestNetwork(ctx context.Context) error {
	script := guestNetworkScript(c.opts.Network == NetworkUser)
	res, err := c.h.agent.exec(ctx, ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Timeout: 60 * time.Second})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		c.log.Warn("guest network not configured: forwards will not reach the guest", "op", "create", "err", err)
	}
	return nil
}

// clock sets the guest clock, which stood still while the guest was paused
// or saved.
func (c *creation) clock(ctx context.Context) error { return c.m.setClock(ctx, c.mc, c.h) }

// snapshot takes the ready snapshot resets return to (and keeps the saved
// ready state for later VMs), then sets the clock.
func (c *creation) snapshot(ctx context.Context) error {
	c.m.shrinkRAM(ctx, c.mc, c.h.agent)
	if err := c.m.snapshotReady(ctx, c.mc, c.tmpl); err != nil {
		return err
	}
	return c.clock(ctx)
}

// markReady records the VM as ready in its domain metadata, where a
// restarted deskfarm finds it.
func (c *creation) markReady(ctx context.Context) error {
	md := c.mc.metadata()
	md.State, md.BootSeconds = StateReady, time.Since(c.start).Seconds()
	if err := c.m.saveMeta(ctx, c.mc, md); err != nil {
		return err
	}
	c.mc.with(func(st *machineState) { st.state, st.bootSeconds = md.State, md.BootSeconds })
	return nil
}
