package vmm

// Calls on a ready VM: reset to its ready snapshot, programs and files in
// the guest through the agent, resource counters and the screendump
// baseline. Lifecycle: create.go, teardown.go, recover.go.

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// Reset returns a ready VM to its ready snapshot: RAM, devices and disk via
// QEMU's loadvm, then the guest clock (restored to snapshot time) is set.
// It returns then, while libvirt is still reopening its guest agent
// connection (reopenAgent); guest agent calls wait for that, screenshots and
// input do not. A reset that fails, or that ctx cuts short while loadvm may
// be running, leaves the VM StateBroken (EventDied): its guest state is
// unknown.
func (m *Manager) Reset(ctx context.Context, id string) (ResetResult, error) {
	mc, st, err := m.change(id)
	if err != nil {
		return ResetResult{}, err
	}
	defer mc.op.Unlock()
	return m.loadInPlace(ctx, mc, st, readySnapshot, "reset", "")
}

// loadInPlace returns mc in place to snapshot (loadvm), as a reset does:
// agent calls held until libvirt reopens the agent, the clock set,
// EventReset published with reason. Reset and RevertSnapshot both come
// here; op names the call in errors and logs. The caller holds mc.op
// exclusively and st is mc's state as of taking it.
func (m *Manager) loadInPlace(ctx context.Context, mc *machine, st machineState, snapshot, op, reason string) (ResetResult, error) {
	id := mc.spec.ID
	h := st.handles
	if st.state != StateReady {
		return ResetResult{}, m.notReadyErr(mc, op)
	}
	if err := m.checkAlive(ctx, mc); err != nil {
		if ctx.Err() == nil {
			m.markBroken(mc, "dead at "+op)
			return ResetResult{}, fmt.Errorf("%s vm %s: %w: %w", op, id, ErrNotRunning, err)
		}
		return ResetResult{}, fmt.Errorf("%s vm %s: %w", op, id, err)
	}
	// The previous reset's reopen, if it is still going, ends first: one
	// reopen at a time per VM.
	if err := h.agent.awaitOpen(ctx); err != nil {
		return ResetResult{}, fmt.Errorf("%s vm %s: %w", op, id, err)
	}
	start := time.Now()
	// Subscribed before loadvm, so the events loadvm causes cannot be
	// missed; the subscription ends with the reopen, which outlives the
	// reset (bounded by AgentTimeout and by the VM's life).
	rctx, rcancel := context.WithTimeout(context.Background(), m.cfg.AgentTimeout)
	agentEvs, err := m.hv.agentEvents(rctx, h.dom)
	if err != nil {
		m.log.Warn("no guest agent events; waiting on pings alone", "vm", id, "op", op, "err", err)
	}
	h.agent.hold()
	if err := h.mon.loadVM(ctx, snapshot); err != nil {
		rcancel()
		h.agent.release()
		m.markBroken(mc, "loadvm failed: "+err.Error())
		return ResetResult{}, fmt.Errorf("%s vm %s: %w", op, id, m.guestErr(ctx, mc, err))
	}
	loaded := time.Since(start)
	go m.reopenAgent(rctx, rcancel, mc, h.agent, agentEvs, start)
	if err := m.setClock(ctx, mc, h); err != nil {
		m.markBroken(mc, "clock after "+op+" failed")
		return ResetResult{}, fmt.Errorf("%s vm %s: set guest clock: %w", op, id, m.guestErr(ctx, mc, err))
	}
	mc.with(func(st *machineState) { st.resets++ })
	m.publish(EventReset, mc, reason)
	d := time.Since(start)
	m.log.Info("vm reset", "vm", id, "op", op, "snapshot", snapshot, "duration", d.Round(time.Millisecond), "loadvm", loaded.Round(time.Millisecond))
	return ResetResult{Duration: d}, nil
}

// reopenAgent runs after a reset's loadvm, outside the reset: it waits for
// libvirt's new agent connection (awaitAgentReopen), then for the agent to
// answer a ping on it, and then lets guest agent calls through (the gate,
// agent.hold). Measured: libvirt's reopen takes 0.35 / 0.74 / 1.0 s (p10 /
// median / p90 over 535 resets in two 10-minute soaks); waiting for it
// inside Reset made a reset 1.1 s median instead of about 0.3 s, although
// only agent calls need it. An agent call made meanwhile waits (bounded by
// its ctx); screenshots and input, which go over VNC, do not.
//
// If the reopen fails (no answer within AgentTimeout), the gate opens anyway
// and calls meet the agent's own error. It ends early when the VM goes away
// or the Manager closes (mc.stopWatch).
func (m *Manager) reopenAgent(ctx context.Context, cancel context.CancelFunc, mc *machine, ag *agent, evs <-chan agentState, start time.Time) {
	defer cancel()
	defer ag.release()
	if mc.stopWatch != nil {
		stop := mc.stopWatch
		go func() {
			select {
			case <-stop:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if evs != nil {
		if err := m.awaitAgentReopen(ctx, mc, evs); err != nil {
			m.log.Warn("guest agent not reopened after reset", "vm", mc.spec.ID, "op", "reset", "err", err)
			return
		}
	}
	died := func() error { return m.checkAlive(ctx, mc) }
	if err := ag.waitReady(ctx, died); err != nil {
		m.log.Warn("guest agent did not answer after reset", "vm", mc.spec.ID, "op", "reset", "err", err)
		return
	}
	m.log.Debug("guest agent answers after reset", "vm", mc.spec.ID, "op", "reset",
		"after_loadvm", time.Since(start).Round(time.Millisecond))
}

// agentReopenWait bounds waiting for libvirt's "agent connected" event after
// loadvm. Every reset measured sent one (see awaitAgentReopen); should a
// libvirt not, the reset goes on after this, on pings alone, as before.
const agentReopenWait = 10 * time.Second

// awaitAgentReopen waits, after loadvm, until libvirt reports its guest agent
// connection open (agentConnected on evs, subscribed before loadvm).
//
// Why not just ping: loadvm resets the agent's virtio-serial port, and QEMU
// reports it closed, then (post_load) open again (VSERPORT_CHANGE). libvirt
// handles each report later, in a worker thread: on "closed" it closes its
// agent connection, failing any command in flight with "Guest agent
// disappeared while executing command", on "open" it opens a new one. A ping
// sent before libvirt handled "closed" is answered on the old connection, and
// the next exec then dies with it (docs/benchmarks.md, soak). Traced in a
// soak at load ~7: the reset's ping answered, the reset returned, libvirt's
// "disconnected" came 129 ms later and "connected" 570 ms later; the first
// exec of the next episode, sent in between, failed so.
//
// Measured on the tiny image (libvirt 9.0, QEMU 7.2, load 4): 6 resets by
// raw HMP loadvm, then a guest-ping every 15 ms, the events watched on a
// second libvirt connection (TestE2EResetAgentEvents logs the same events
// around Manager.Reset). Resets alternated between two forms: either
// "disconnected" within 3 ms of loadvm's return, pings answering "not
// connected" until "connected" 0.5-1.3 s after loadvm; or no "disconnected"
// at all, pings answered from 50 ms and a "connected" 100-430 ms after
// loadvm. Both end in "connected". libvirt queues each VSERPORT_CHANGE to its
// event worker (qemuProcessHandleSerialChanged) and sent the events in the
// port's order in every reset seen, so a "connected" comes after any close:
// from then on the connection is the one libvirt keeps.
func (m *Manager) awaitAgentReopen(ctx context.Context, mc *machine, evs <-chan agentState) error {
	start := time.Now()
	timer := time.NewTimer(agentReopenWait)
	defer timer.Stop()
	// A QEMU that dies meanwhile sends no agent event: the pings that follow
	// find it dead.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	sawClose := false
	for {
		select {
		case st, ok := <-evs:
			if !ok {
				if ctx.Err() != nil {
					return fmt.Errorf("wait for guest agent reconnect of vm %s: %w: %w", mc.spec.ID, ErrTimeout, ctx.Err())
				}
				// The libvirt connection dropped: no more events will come;
				// the pings decide.
				return nil
			}
			switch st {
			case agentDisconnected:
				sawClose = true
			case agentConnected:
				m.log.Debug("guest agent reconnected after loadvm", "vm", mc.spec.ID, "op", "reset",
					"after", time.Since(start).Round(time.Millisecond), "closed_first", sawClose)
				return nil
			}
		case <-tick.C:
			if mc.exited() {
				return nil
			}
		case <-timer.C:
			m.log.Warn("no guest agent event after loadvm; going on with pings", "vm", mc.spec.ID, "op", "reset",
				"waited", agentReopenWait, "closed", sawClose)
			return nil
		case <-ctx.Done():
			return fmt.Errorf("wait for guest agent reconnect of vm %s: %w: %w", mc.spec.ID, ErrTimeout, ctx.Err())
		}
	}
}

// setClock sets the guest clock, which a RAM restore puts back at snapshot
// time: through the session channel (milliseconds), else the guest agent
// (guest-set-time runs hwclock: 1-2 s).
func (m *Manager) setClock(ctx context.Context, mc *machine, h handles) error {
	if h.session != nil {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		err := h.session.setTime(sctx)
		cancel()
		if err == nil {
			return nil
		}
		m.log.Warn("clock through session channel failed; using the guest agent", "vm", mc.spec.ID, "op", "reset", "err", err)
	}
	return h.agent.setTime(ctx)
}

// shrinkRAM readies the guest's RAM for the ready snapshot, best effort (a
// guest without the knobs makes a bigger snapshot, or keeps its memory
// after resets):
//   - it drops the page cache: with init_on_free the freed pages are zero
//     and cost savevm nothing;
//   - it then has a process touch most of the free memory and exit
//     (dd's buffer), so that the free memory the snapshot holds was freed
//     moments before savevm and not yet reported to QEMU: the balloon's
//     free page reporting waits 2 s after pages are freed (Linux's
//     PAGE_REPORTING_DELAY), and the stop below comes sooner. After every
//     loadvm of the snapshot (a reset, a VM from saved state) the guest
//     then reports those blocks again and QEMU drops them from the host.
//     Reported before the snapshot instead, the guest would hold them as
//     reported forever, and loadvm's zeros would keep a used VM's pages
//     resident after its reset (docs/benchmarks.md, "Density": 1171 MiB
//     RSS for a desktop that ran a browser, 30 s after its reset). It
//     takes what the kernel counts available less 64 MiB, so nothing in
//     the guest is pushed out (what stays free stays reported: with 128
//     MiB left, a tiny VM kept 124 MiB of a used 384 after its reset).
func (m *Manager) shrinkRAM(ctx context.Context, mc *machine, ag *agent) {
	res, err := ag.exec(ctx, ExecRequest{Argv: []string{"sh", "-c", shrinkScript}, Timeout: 60 * time.Second})
	if err != nil || res.ExitCode != 0 {
		m.log.Warn("could not drop guest page cache before snapshot", "vm", mc.spec.ID, "op", "snapshot", "err", err, "stderr", string(res.Stderr))
	}
}

// shrinkScript is shrinkRAM's guest side.
const shrinkScript = `sync; echo 3 > /proc/sys/vm/drop_caches || exit 1
n=$(awk '/^MemAvailable:/ {print int($2 / 1024) - 64}' /proc/meminfo)
[ "${n:-0}" -gt 0 ] && dd if=/dev/zero of=/dev/null bs=${n}M count=1 2>/dev/null
exit 0`

// Exec runs a program in the guest.
func (m *Manager) Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return ExecResult{}, fielderr.Newf("argv", ErrInvalid, "needs at least the program name")
	}
	if req.Timeout < 0 {
		return ExecResult{}, fielderr.Newf("timeout_s", ErrInvalid, "must be positive")
	}
	if len(req.Stdin) > MaxExecStdin {
		return ExecResult{}, fielderr.Newf("stdin", ErrTooLarge, "%d bytes; at most %d", len(req.Stdin), MaxExecStdin)
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultExecTimeout
	}
	mc, h, err := m.ready(id, "exec")
	if err != nil {
		return ExecResult{}, err
	}
	defer mc.op.RUnlock()
	res, err := h.agent.exec(ctx, req)
	return res, m.guestErr(ctx, mc, err)
}

// ReadFile reads a guest file of at most MaxFileSize bytes.
func (m *Manager) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	if !filepath.IsAbs(path) {
		return nil, fielderr.Newf("path", ErrInvalid, "%q is not absolute", path)
	}
	mc, h, err := m.ready(id, "read file")
	if err != nil {
		return nil, err
	}
	defer mc.op.RUnlock()
	b, err := h.agent.readFile(ctx, path, MaxFileSize)
	if errors.Is(err, ErrTooLarge) {
		return nil, err
	}
	return b, m.guestErr(ctx, mc, err)
}

// WriteFile writes a guest file; mode 0 keeps the agent's default (0666 less umask).
func (m *Manager) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error {
	if !filepath.IsAbs(path) {
		return fielderr.Newf("path", ErrInvalid, "%q is not absolute", path)
	}
	if len(data) > MaxFileSize {
		return fmt.Errorf("write file %s: %w: %d bytes, limit %d", path, ErrTooLarge, len(data), MaxFileSize)
	}
	if mode > 0o7777 {
		return fielderr.Newf("mode", ErrInvalid, "%o is not a file mode", mode)
	}
	mc, h, err := m.ready(id, "write file")
	if err != nil {
		return err
	}
	defer mc.op.RUnlock()
	if err := h.agent.writeFile(ctx, path, data); err != nil {
		return m.guestErr(ctx, mc, err)
	}
	if mode != 0 {
		res, err := h.agent.exec(ctx, ExecRequest{Argv: []string{"chmod", fmt.Sprintf("%o", mode), path}, Timeout: 10 * time.Second})
		if err != nil {
			return m.guestErr(ctx, mc, err)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("chmod %o %s on vm %s: %w: %s", mode, path, id, ErrAgent, res.Stderr)
		}
	}
	return nil
}

// CPUTime is a VM's cumulative vCPU time, summed over its vCPUs, from
// libvirt (virDomainGetInfo). Sampled twice, it gives the guest's CPU
// utilisation: how busy it is regardless of what its screen shows (desk's
// settle uses it to wait for a launched program's start-up work).
func (m *Manager) CPUTime(ctx context.Context, id string) (time.Duration, error) {
	mc, h, err := m.ready(id, "cpu time")
	if err != nil {
		return 0, err
	}
	defer mc.op.RUnlock()
	t, err := m.hv.domainCPUTime(ctx, h.dom)
	if err != nil {
		return 0, fmt.Errorf("cpu time of vm %s: %w", id, m.guestErr(ctx, mc, err))
	}
	return t, nil
}

// DiskRequests is the number of read and write requests a VM's disk has
// served (libvirt's virDomainBlockStats). A guest that waits on its disk
// (a program loading from a cold page cache after a reset) has idle vCPUs
// but is not idle: desk's settle counts these beside CPUTime.
func (m *Manager) DiskRequests(ctx context.Context, id string) (int64, error) {
	mc, h, err := m.ready(id, "disk requests")
	if err != nil {
		return 0, err
	}
	defer mc.op.RUnlock()
	n, err := m.hv.domainDiskRequests(ctx, h.dom)
	if err != nil {
		return 0, fmt.Errorf("disk requests of vm %s: %w", id, m.guestErr(ctx, mc, err))
	}
	return n, nil
}

// Screenshot grabs the VM's display with QEMU's screendump (what libvirt's
// virDomainScreenshot does too; go-libvirt's stream for it fails to decode).
// It is the baseline the live VNC framebuffer is measured against.
func (m *Manager) Screenshot(ctx context.Context, id string) (*image.RGBA, error) {
	mc, h, err := m.ready(id, "screenshot")
	if err != nil {
		return nil, err
	}
	defer mc.op.RUnlock()
	f, err := os.CreateTemp(mc.spec.Dir, "screendump-*.ppm")
	if err != nil {
		return nil, fmt.Errorf("screenshot vm %s: %w", id, err)
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	// QEMU (running as the QEMU user) writes the file itself.
	if err := os.Chown(path, m.uid, m.gid); err != nil {
		return nil, fmt.Errorf("screenshot vm %s: %w", id, err)
	}
	if err := h.mon.run(ctx, "screendump "+path); err != nil {
		return nil, fmt.Errorf("screenshot vm %s: %w", id, m.guestErr(ctx, mc, err))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("screenshot vm %s: %w", id, err)
	}
	img, err := decodePPM(b)
	if err != nil {
		return nil, fmt.Errorf("screenshot vm %s: %w", id, err)
	}
	return img, nil
}
