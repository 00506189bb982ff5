package vmm

// Admission: whether a new VM fits on this host. Options every host
// refuses are caught by CreateOptions.Normalize; here are the host's own
// limits (its CPUs, the guest memory all VMs together may have) and the
// host ports other VMs forward.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

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
	if err := m.fitsLocked(mc.spec.MemoryMiB, 0); err != nil {
		// Standbys (standby.go) hold memory only until a create needs it.
		freed := m.usedStandbyLocked()
		if !m.evictStandbysLocked("a create needs its memory") {
			return err
		}
		if err := m.fitsLocked(mc.spec.MemoryMiB, freed); err != nil {
			return err
		}
	}
	m.vms[mc.spec.ID] = mc
	return nil
}

// fitsLocked checks that newMiB more guest memory fits beside the VMs and
// standbys alive; creditMiB is memory standbys being removed still hold,
// counted as available to the MemAvailable floor.
func (m *Manager) fitsLocked(newMiB, creditMiB int) error {
	used := m.usedLocked() + m.usedStandbyLocked()
	if used+newMiB > m.memLimit {
		return fielderr.Newf("memory_mib", ErrInsufficientResources, "%d MiB requested but %d of the %d MiB for guests are taken by other VMs",
			newMiB, used, m.memLimit)
	}
	return m.checkAvailableLocked(newMiB, creditMiB)
}

// checkAvailableLocked is admission's floor when guest memory is
// overcommitted (Config.MemoryOvercommit): the host's MemAvailable must
// hold the reserve plus the share of the new VM and of the VMs still being
// made (whose QEMUs have not taken their memory yet).
func (m *Manager) checkAvailableLocked(newMiB, creditMiB int) error {
	ratio := m.cfg.MemoryOvercommit
	if ratio <= 1 {
		return nil
	}
	avail, err := m.memAvailable()
	if err != nil {
		return fmt.Errorf("admission: %w", err)
	}
	avail += creditMiB
	pending := newMiB
	for _, o := range m.vms {
		if o.state() == StateCreating {
			pending += o.spec.MemoryMiB
		}
	}
	if need := m.cfg.MemoryReserveMiB + int(float64(pending)/ratio); avail < need {
		return fielderr.Newf("memory_mib", ErrInsufficientResources, "the host has %d MiB available, short of the %d MiB kept for it plus %d MiB for new VMs (guest memory over %g overcommitted)",
			avail, m.cfg.MemoryReserveMiB, need-m.cfg.MemoryReserveMiB, ratio)
	}
	return nil
}

// hostMemAvailable reads MemAvailable from /proc/meminfo, in MiB.
func hostMemAvailable() (int, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseMemAvailable(b)
}

// parseMemAvailable finds "MemAvailable:   23539000 kB" in meminfo.
func parseMemAvailable(meminfo []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 3 && string(f[0]) == "MemAvailable:" && string(f[2]) == "kB" {
			kib, err := strconv.Atoi(string(f[1]))
			if err != nil {
				return 0, fmt.Errorf("meminfo MemAvailable %q: %w", f[1], err)
			}
			return kib / 1024, nil
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
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
