package vmm

// Admission: whether a new VM fits on this host. Options every host
// refuses are caught by CreateOptions.Normalize; here are the host's own
// limits (its CPUs, the guest memory all VMs together may have) and the
// host ports other VMs forward.

import (
	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// checkHost checks normalised options against this host's limits, before
// anything is made.
func (m *Manager) checkHost(opts CreateOptions) error {
	switch {
	case opts.MemoryMiB > m.memLimit:
		return fielderr.Newf("memory_mib", ErrInsufficientResources, "%d MiB is more than all VMs together may have (%d MiB of the host's %d)", opts.MemoryMiB, m.memLimit, m.hostMemMiB)
	case opts.VCPUs > m.hostCPUs:
		return fielderr.Newf("vcpus", ErrInvalid, "%d is outside 1..%d (the host's CPUs)", opts.VCPUs, m.hostCPUs)
	}
	return nil
}

// admit registers mc if its memory fits beside the VMs alive and its host
// ports are free of other VMs' forwards; checking and registering under one
// lock keeps concurrent creates from overcommitting. The host ports asked
// for as 0 are picked here, the last write to mc.spec: once registered, the
// spec is read without a lock.
func (m *Manager) admit(mc *machine) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.pickPortsLocked(mc.spec.Forwards); err != nil {
		return err
	}
	if err := m.forwardConflictLocked(mc.spec.Forwards); err != nil {
		return err
	}
	used := m.usedLocked()
	if used+mc.spec.MemoryMiB > m.memLimit {
		return fielderr.Newf("memory_mib", ErrInsufficientResources, "%d MiB requested but %d of the %d MiB for guests are taken by other VMs",
			mc.spec.MemoryMiB, used, m.memLimit)
	}
	m.vms[mc.spec.ID] = mc
	return nil
}

func (m *Manager) usedLocked() int {
	used := 0
	for _, o := range m.vms {
		if o.alive() {
			used += o.spec.MemoryMiB
		}
	}
	return used
}

// Capacity returns the guest memory (MiB) committed to VMs alive and the
// limit all VMs together may have (Config.MemoryLimitMiB); a create of n MiB
// succeeds only if used+n <= limit.
func (m *Manager) Capacity() (usedMiB, limitMiB int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usedLocked(), m.memLimit
}
