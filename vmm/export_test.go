package vmm

import (
	"context"
	"path/filepath"
)

// Hooks for the external E2E tests, which cannot import vmm's internals
// (testenv imports vmm).

// MonitorForTest runs a raw HMP command on a VM and returns QEMU's output.
func MonitorForTest(ctx context.Context, m *Manager, id, cmd string) (string, error) {
	mc, err := m.lookup(id)
	if err != nil {
		return "", err
	}
	return m.hv.monitorHMP(ctx, mc.handles().dom, cmd)
}

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
