package vmm

// Standby VMs: a create from saved state done ahead of time, up to the
// point where the guest would run. After a VM is made from a saved ready
// state, the Manager (Config.Standby) makes one more like it in the
// background: overlay, domain, QEMU started paused, the saved state loaded,
// libvirt's guest agent connection open; and leaves it paused. The next
// create of that image and size claims it: it continues the guest, sets its
// clock and records it ready, and then makes the next standby.
//
// Why: a create from saved state spends 0.7 s letting libvirt start QEMU
// and 0.7-0.9 s in loadvm in the fresh QEMU (its guest RAM faulted in on
// the way), 1.66 s at the median and 3.0 s at p95 in all on this host
// (docs/benchmarks.md, cold start). Neither step gets faster on QEMU 7.2; it
// can only be done before the create is asked for. A standby costs one
// paused QEMU per image and size in use: no CPU, and about the memory of an
// idle VM from saved state (its pages are the saved state's, which KSM
// shares with the VMs made from it).
//
// A standby is nobody's VM: it is not listed, publishes no events and is
// not watched until claimed. Admission counts its memory, and a create that
// would not fit otherwise removes standbys first: a standby never refuses a
// VM. Its domain metadata says StateCreating, so a restarted deskfarm
// removes it as a half-made VM (recover); Close removes it, since no later
// Manager could hand it out.

import (
	"context"
	"time"
)

// standby is one VM made ahead for the saved ready state tmpl.
type standby struct {
	mc   *machine
	c    *creation // its creation, whose handles the claim uses; set when ready
	tmpl string
	// saved identifies the saved ready state file it was loaded from (its
	// spare path, which names the inode): a saved state made again since
	// holds another guest, and the standby is dropped, not claimed.
	saved  string
	ready  bool
	cancel context.CancelFunc // stops the making (eviction, Close)
}

// standbyEligible says whether VMs made with opts (normalised) get a
// standby: from saved state, with no NIC (forwards' host ports are picked
// per create and are in the domain).
func (m *Manager) standbyEligible(opts CreateOptions) bool {
	return m.cfg.Standby && !opts.Boot && !hasNIC(opts.Network, opts.Forwards)
}

// usedStandbyLocked is the guest memory standbys hold (made or being made).
func (m *Manager) usedStandbyLocked() int {
	used := 0
	for _, sb := range m.standbys {
		used += sb.mc.spec.MemoryMiB
	}
	return used
}

// takeStandby claims the ready standby of tmpl, registered as a VM under
// the same lock its memory was counted under, with its op lock held (as a
// new VM's is before it is visible). It returns nil when there is none.
func (m *Manager) takeStandby(tmpl string) *standby {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.standbys[tmpl]
	if sb == nil || !sb.ready {
		return nil
	}
	delete(m.standbys, tmpl)
	if p, err := sparePath(tmpl); err != nil || p != sb.saved {
		m.log.Info("dropping a standby of a saved ready state made again", "vm", sb.mc.spec.ID, "op", "standby")
		m.dropStandbyAsync(sb)
		return nil
	}
	sb.mc.op.Lock() // no one else can hold it: the standby was not visible
	sb.mc.spec.Created = time.Now().UTC().Truncate(time.Second)
	m.vms[sb.mc.spec.ID] = sb.mc
	return sb
}

// createFromStandby makes a VM like opts out of the ready standby of tmpl:
// continue, clock, mark-ready. ok is false when there was none or the
// claim failed (the standby is removed then, and the caller creates as
// usual).
func (m *Manager) createFromStandby(ctx context.Context, img BaseImage, opts CreateOptions, tmpl string) (vm VM, ok bool) {
	if !m.standbyEligible(opts) {
		return VM{}, false
	}
	sb := m.takeStandby(tmpl)
	if sb == nil {
		return VM{}, false
	}
	mc, c := sb.mc, sb.c
	defer mc.op.Unlock()
	mc.with(func(st *machineState) { st.labels = labelList(opts.Labels) })
	c.start, c.opts = time.Now(), opts
	c.log.Info("creating vm from a standby", "op", "create", "image", img.Name, "memory_mib", opts.MemoryMiB, "vcpus", opts.VCPUs,
		"accel", m.accel, "start", mc.spec.Start)
	err := runSteps(ctx, c.log, []step{
		{name: "claim", do: c.claim},
		{name: "clock", do: c.clock},
		{name: "mark-ready", do: c.markReady},
	})
	if err != nil {
		m.unmake(mc, c, "create from standby failed")
		m.dropStandby(sb)
		c.log.Warn("standby not used: creating as usual", "op", "create", "err", err)
		return VM{}, false
	}
	c.log.Info("vm ready", "op", "create", "duration", time.Since(c.start).Round(time.Millisecond), "standby", true)
	m.publish(EventReady, mc, "")
	m.refillStandby(img, opts, tmpl)
	return mc.describe(), true
}

// claim makes the standby a VM: watched, announced, running. Guest agent
// calls wait at the agent's gate (held since preload) until libvirt has
// opened its agent connection and a ping answers, as after a reset: QEMU
// reports the agent's port open only once the loaded guest runs (no
// "connected" event came in 10 s while a standby sat paused after loadvm).
func (c *creation) claim(ctx context.Context) error {
	_ = c.adopt(ctx)
	t := time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), c.m.cfg.AgentTimeout)
	evs, err := c.m.hv.agentEvents(rctx, c.h.dom)
	if err != nil {
		c.log.Warn("no guest agent events; waiting on pings alone", "op", "create", "err", err)
	}
	if err := c.h.mon.cont(ctx); err != nil {
		rcancel()
		c.h.agent.release()
		return err
	}
	go c.m.reopenAgent(rctx, rcancel, c.mc, c.h.agent, evs, t)
	return nil
}

// standbySteps make a standby: a create from saved state that stops before
// the guest runs. Named apart from a create's steps: they are not part of
// the create that claims the standby.
func (c *creation) standbySteps() []step {
	return []step{
		{name: "standby-overlay", do: c.overlay, undo: c.undoOverlay},
		{name: "standby-define", do: c.define, undo: c.undoDefine},
		{name: "standby-start", do: c.startDomain, undo: c.undoStart},
		{name: "standby-load", do: c.preload},
	}
}

// preload loads the saved ready state into the paused QEMU, which stays
// paused until the claim. Agent calls are held from here until the
// claim's reopenAgent releases them.
func (c *creation) preload(ctx context.Context) error {
	c.h.agent.hold()
	return c.h.mon.loadVM(ctx, readySnapshot)
}

// refillStandby starts making the standby of tmpl for VMs like opts, unless
// standbys are off for them, one is there or being made, or it would not
// fit beside the VMs alive (admission's own checks: a standby never takes
// the room a create would get).
func (m *Manager) refillStandby(img BaseImage, opts CreateOptions, tmpl string) {
	if !m.standbyEligible(opts) {
		return
	}
	opts.Labels = nil
	mc, t := m.newMachine(img, opts)
	if t != tmpl || mc.spec.Start != StartSavedState {
		return
	}
	saved, err := sparePath(tmpl)
	if err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	sb := &standby{mc: mc, tmpl: tmpl, saved: saved, cancel: cancel}
	m.mu.Lock()
	if m.standbyClosed || m.standbys[tmpl] != nil ||
		m.usedLocked()+m.usedStandbyLocked()+mc.spec.MemoryMiB > m.memLimit ||
		m.checkAvailableLocked(mc.spec.MemoryMiB, 0) != nil {
		m.mu.Unlock()
		cancel()
		return
	}
	m.standbys[tmpl] = sb
	m.standbyWG.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.standbyWG.Done()
		defer cancel()
		c := m.newCreation(mc, img, opts, tmpl)
		c.standby = true
		c.log.Debug("making a standby", "op", "standby", "image", img.Name)
		err := runSteps(ctx, c.log, c.standbySteps())
		// Read before it is published: a claim takes c over at once.
		took, spare, log := time.Since(c.start).Round(time.Millisecond), c.spare, c.log
		m.mu.Lock()
		current := m.standbys[tmpl] == sb
		if err == nil && current {
			sb.c, sb.ready = c, true
		} else if current {
			delete(m.standbys, tmpl)
		}
		m.mu.Unlock()
		switch {
		case err != nil:
			// Undone by runSteps. The next create from this saved state
			// tries again; there is no retry loop on a host that fails.
			if ctx.Err() == nil {
				log.Warn("could not make a standby: creates from this saved state start QEMU themselves", "op", "standby", "err", err)
			}
		case !current:
			m.dropStandby(sb) // evicted or closed while being made
		default:
			log.Info("standby ready", "op", "standby", "duration", took)
			if spare {
				m.refillSpare(tmpl)
			}
		}
	}()
}

// evictStandbysLocked removes every standby, so that a create gets their
// memory; those being made stop, those made are torn down in the
// background. It reports whether there were any.
func (m *Manager) evictStandbysLocked(why string) bool {
	if len(m.standbys) == 0 {
		return false
	}
	for tmpl, sb := range m.standbys {
		delete(m.standbys, tmpl)
		sb.cancel()
		if sb.ready {
			m.log.Info("removing a standby", "vm", sb.mc.spec.ID, "op", "standby", "why", why)
			m.dropStandbyAsync(sb)
		}
	}
	return true
}

// dropStandbyAsync tears sb down in the background (Close waits for it).
func (m *Manager) dropStandbyAsync(sb *standby) {
	m.standbyWG.Add(1)
	go func() {
		defer m.standbyWG.Done()
		m.dropStandby(sb)
	}()
}

// dropStandby removes a made standby: its session, domain and directory.
func (m *Manager) dropStandby(sb *standby) {
	sb.mc.stop()
	if s := sb.mc.handles().session; s != nil {
		s.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), undoTimeout)
	defer cancel()
	if err := m.teardown(ctx, sb.mc.spec.ID, sb.mc.spec.Dir); err != nil {
		m.log.Error("remove standby", "vm", sb.mc.spec.ID, "op", "standby", "err", err)
	}
}

// closeStandbys removes every standby and waits until they are gone; no
// new one is made after it.
func (m *Manager) closeStandbys() {
	m.mu.Lock()
	m.standbyClosed = true
	m.evictStandbysLocked("the farm closes")
	m.mu.Unlock()
	m.standbyWG.Wait()
}
