package pool

import (
	"slices"
	"strings"
	"time"
)

// DesktopState is a pool VM's state as a cluster publishes it.
type DesktopState string

const (
	DesktopBooting   DesktopState = "booting"
	DesktopFree      DesktopState = "free" // warm, clean, leasable
	DesktopLeased    DesktopState = "leased"
	DesktopResetting DesktopState = "resetting"
	DesktopDead      DesktopState = "dead"
)

// Desktop is one pool VM as Manager.Desktops lists it.
type Desktop struct {
	VM        string
	Pool      string
	State     DesktopState
	Episode   string    // set while leased
	ExpiresAt time.Time // the episode's expiry, while leased
}

// Desktops lists the pools' VMs with their states, by VM id, as one
// consistent snapshot: what a cluster agent publishes (one object per VM).
// A VM is listed from the moment vmm defines it (booting) until it is gone;
// a boot whose VM vmm has not named yet is not. A VM of a pool SetPools
// removed, or of a shape its pool no longer has, is listed with the pool
// it was made for until it is destroyed (when unleased at once, when its
// episode ends otherwise).
func (m *Manager) Desktops() []Desktop {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Desktop, 0, len(m.members)+len(m.creating))
	for _, mb := range m.members {
		if mb.vm == "" {
			continue
		}
		d := Desktop{VM: mb.vm, Pool: mb.pool, State: m.desktopStateLocked(mb)}
		if d.State == DesktopLeased {
			if l := m.leases[mb.episode]; l != nil {
				d.Episode, d.ExpiresAt = l.ep.ID, l.ep.ExpiresAt
			}
		}
		out = append(out, d)
	}
	for vm, pool := range m.creating {
		if m.members[vm] == nil {
			out = append(out, Desktop{VM: vm, Pool: pool, State: DesktopBooting})
		}
	}
	slices.SortFunc(out, func(a, b Desktop) int { return strings.Compare(a.VM, b.VM) })
	return out
}

// desktopStateLocked is mb's state as Desktops lists it:
//   - a warm VM is free only when it is leasable (clean, to its pool's
//     shape, not booted for one start); a dirty one is resetting (the
//     refill cleans it next), one that no longer fits is dead (the
//     refill evicts it), one booted for a start is booting until leased;
//   - leased is leased; resetting is resetting (an episode's end, or a
//     clean); destroying is dead.
func (m *Manager) desktopStateLocked(mb *member) DesktopState {
	switch mb.state {
	case stWarm:
		switch {
		case m.leasableLocked(mb):
			return DesktopFree
		case !m.fitsLocked(mb):
			return DesktopDead
		case mb.dirty:
			return DesktopResetting
		default:
			return DesktopBooting
		}
	case stLeased:
		return DesktopLeased
	case stResetting:
		return DesktopResetting
	case stBooting:
		return DesktopBooting
	default:
		return DesktopDead
	}
}
