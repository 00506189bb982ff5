package vmm

import (
	"context"
	"path/filepath"
)

// Hooks for the external E2E tests, which cannot import vmm's internals
// (testenv imports vmm).

// MonitorForTest runs a raw HMP command on a VM and returns QEMU's output.
func MonitorForTest(ctx context.Context, m *Manager, id, cmd string) (string, error) {
	// Under the VM's op lock, after what a finished call left running
	// under it (a fork's transfer snapshot drops).
	mc, st, err := m.change(id)
	if err != nil {
		return "", err
	}
	defer mc.op.Unlock()
	return m.hv.monitorHMP(ctx, st.dom, cmd)
}

// QMPForTest runs a raw QMP command on a VM and returns QEMU's reply.
func QMPForTest(ctx context.Context, m *Manager, id, cmd string) (string, error) {
	mc, st, err := m.change(id)
	if err != nil {
		return "", err
	}
	defer mc.op.Unlock()
	return m.hv.monitorQMP(ctx, st.dom, cmd)
}

// ParseQMPReplyForTest is parseQMPReply.
var ParseQMPReplyForTest = parseQMPReply

// AgentForTest sends a raw guest agent command and returns its raw reply.
func AgentForTest(ctx context.Context, m *Manager, id, cmd string) (string, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return "", err
	}
	return m.hv.agentCommand(ctx, mc.handles().dom, cmd, false)
}

// TestdataDir is vmm's testdata directory.
var TestdataDir = filepath.Join("testdata")

// ParseHMPResultForTest is parseHMPResult.
var ParseHMPResultForTest = parseHMPResult

// SetSnapshotLimitsForTest sets Config.MaxSnapshots and MaxSnapshotBytes of
// a running Manager.
func SetSnapshotLimitsForTest(m *Manager, count int, bytes int64) {
	m.cfg.MaxSnapshots, m.cfg.MaxSnapshotBytes = count, bytes
}

// SetMemoryLimitForTest sets the admission limit of a running Manager.
func SetMemoryLimitForTest(m *Manager, mib int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memLimit = mib
}

// ForksDir is where a Manager keeps fork templates while a fork runs.
func ForksDir(m *Manager) string { return m.forksDir() }

// StandbyForTest returns the id of the standby made for VMs like opts and
// whether it is ready to be claimed ("" when there is none).
func StandbyForTest(m *Manager, opts CreateOptions) (id string, ready bool) {
	opts, err := opts.Normalize()
	if err != nil {
		return "", false
	}
	img, err := m.cfg.Images.Resolve(opts.Image)
	if err != nil {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.standbys[m.templatePath(img, opts)]
	if sb == nil {
		return "", false
	}
	return sb.mc.spec.ID, sb.ready
}

// AbandonForTest leaves m as a killed deskfarm would: its VMs and standbys
// running, its libvirt connection and state dir lock dropped, nothing
// removed.
func AbandonForTest(m *Manager) {
	m.closeOnce.Do(func() { // Close does nothing after this
		m.mu.Lock()
		m.standbyClosed = true
		m.vms, m.standbys = map[string]*machine{}, map[string]*standby{}
		m.mu.Unlock()
		m.spares.close()
		m.hv.close()
		<-m.watchDone
		m.events.Close()
		if m.lock != nil {
			m.lock.Close()
		}
	})
}
