package pool

import (
	"context"
	"fmt"

	"github.com/deskfarm/deskfarm/vmm"
)

// recover rebuilds the pools from what outlives a deskfarm process:
//   - the VMs vmm lists (it adopts running domains) and their labels: a VM
//     labelled pool=P is P's; one also labelled episode=E is leased to E
//     when the state file has E's record for that VM;
//   - the state file: the episodes' records (ttl, start, expiry).
//
// A warm VM is recovered dirty, since what happened to it while no pool
// was watching is unknown; the refill resets it before it is leased. An
// episode label with no record (deskfarm died between labelling and
// recording the lease, before Start answered) is treated the same way. A
// record whose VM no longer carries its label ends as vm_gone. Episodes
// that were ending are returned, to be ended again once the loops run.
func (m *Manager) recover(ctx context.Context) (toFinish []Episode, err error) {
	st, err := m.state.load()
	if err != nil {
		return nil, err
	}
	vms, err := m.vms.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("recover pools: list vms: %w", err)
	}
	if st.Version == 1 {
		m.migrateV1(ctx, st, vms)
	}
	records := map[string]Episode{}
	for _, ep := range st.Episodes {
		records[ep.ID] = ep
	}
	m.mu.Lock()
	for _, v := range vms {
		pool := v.Labels[LabelPool]
		if pool == "" || v.State == vmm.StateCreating {
			// Not a pool VM, or a create that died with its deskfarm
			// (vmm removes those).
			continue
		}
		// Its shape is what it was made with: a VM of a pool that is no
		// longer declared, or of another spec, is a member until it is
		// destroyed (at once when unleased, when its episode ends when
		// leased), so nothing is orphaned.
		mb := &member{key: v.ID, vm: v.ID, pool: pool, state: stWarm, dirty: true, shape: shapeOf(v)}
		m.members[v.ID] = mb
		if epID := v.Labels[LabelEpisode]; epID != "" {
			if ep, ok := records[epID]; ok && ep.VM == v.ID && v.State == vmm.StateReady {
				delete(records, epID)
				mb.state, mb.episode = stLeased, epID
				l := m.newLease(ep)
				m.leases[ep.ID] = l
				if ep.State == EpisodeEnding {
					// Died mid-end: end it again once running.
					l.ep.State, l.ep.EndReason = EpisodeActive, ""
					if ep.EndReason == "" {
						ep.EndReason = ReasonDeleted
					}
					toFinish = append(toFinish, ep)
				}
				m.log.Info("lease recovered", "op", "recover", "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "expires_at", ep.ExpiresAt)
				continue
			}
			m.log.Warn("vm labelled with an episode that has no live record; resetting it before any lease", "op", "recover", "vm", v.ID, "episode", epID)
		}
		if v.State == vmm.StateBroken {
			m.stepCarryLocked(mb, inDied, "recover")
			continue
		}
		m.log.Info("pool vm recovered", "op", "recover", "vm", v.ID, "pool", pool)
	}
	m.ended = st.Ended
	for _, ep := range st.Episodes {
		if _, lost := records[ep.ID]; !lost {
			continue
		}
		m.log.Warn("episode's vm gone across restart; ending it", "op", "recover", "episode", ep.ID, "vm", ep.VM)
		l := m.newLease(ep)
		l.ep.VMReplaced = true
		m.endLocked(l, ReasonVMGone)
	}
	snap := m.snapshotLocked()
	m.mu.Unlock()
	if err := m.state.write(snap); err != nil {
		return nil, err
	}
	return toFinish, nil
}

// migrateV1 labels the VMs a version 1 state file recorded (membership and
// leases were in the file then), so that recovery reads them like any other.
func (m *Manager) migrateV1(ctx context.Context, st persisted, vms []vmm.VM) {
	set := func(v *vmm.VM, key, value string) {
		if v.Labels[key] == value {
			return
		}
		if err := m.vms.SetLabel(ctx, v.ID, key, value); err != nil {
			m.log.Error("migrate pool state: label vm", "op", "recover", "vm", v.ID, "label", key, "err", err)
			return
		}
		if v.Labels == nil {
			v.Labels = map[string]string{}
		}
		v.Labels[key] = value
	}
	for i := range vms {
		v := &vms[i]
		if pm, ok := st.Members[v.ID]; ok {
			set(v, LabelPool, pm.Pool)
		}
		for _, ep := range st.Episodes {
			if ep.VM == v.ID {
				set(v, LabelEpisode, ep.ID)
			}
		}
	}
	m.log.Info("migrated pool state file from version 1 (membership now in vm labels)", "op", "recover")
}
