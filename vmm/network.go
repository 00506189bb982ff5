package vmm

// The guest's network: the modes a VM may have, its loopback port forwards,
// and the host ports they take.

import (
	"fmt"
	"net"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// Network modes (CreateOptions.Network).
const (
	NetworkNone = "none"
	NetworkUser = "user"
)

// Forward forwards a host TCP port, bound to 127.0.0.1 only, to a guest
// TCP port (QEMU user-mode networking's hostfwd).
type Forward struct {
	GuestPort int `xml:"guest-port,attr"`
	HostPort  int `xml:"host-port,attr"`
}

// MaxForwards bounds CreateOptions.Forwards.
const MaxForwards = 8

// checkNetwork checks the network mode and the forwards.
func checkNetwork(network string, forwards []Forward) error {
	switch network {
	case NetworkNone, NetworkUser:
		// Forwards under NetworkNone: a NIC whose user-mode stack is
		// restricted (restrict=on), so the forwards reach in and the guest
		// reaches nothing out (domainSpec.netdevArg).
	default:
		return fielderr.Newf("network", ErrInvalid, "%q: want %q (default) or %q", network, NetworkNone, NetworkUser)
	}
	if len(forwards) > MaxForwards {
		return fielderr.Newf("forwards", ErrInvalid, "%d forwards; at most %d", len(forwards), MaxForwards)
	}
	seen := map[int]bool{}
	for i, f := range forwards {
		field := fmt.Sprintf("forwards[%d]", i)
		if f.GuestPort < 1 || f.GuestPort > 65535 {
			return fielderr.Newf(field+".guest_port", ErrInvalid, "%d is outside 1..65535", f.GuestPort)
		}
		// Ports below 1024 would need deskfarm's privileges to stay bound by
		// QEMU. 0 asks vmm for a free one (pickPorts).
		if f.HostPort == 0 {
			continue
		}
		if f.HostPort < 1024 || f.HostPort > 65535 {
			return fielderr.Newf(field+".host_port", ErrInvalid, "%d is outside 1024..65535", f.HostPort)
		}
		if seen[f.HostPort] {
			return fielderr.Newf(field+".host_port", ErrInvalid, "%d is forwarded twice", f.HostPort)
		}
		seen[f.HostPort] = true
	}
	return nil
}

// hasNIC says whether a VM gets a NIC: with user networking, or with
// forwards (restricted user networking under NetworkNone).
func hasNIC(network string, forwards []Forward) bool {
	return network == NetworkUser || len(forwards) > 0
}

// pickPortsLocked gives each forward with host port 0 a free loopback port
// that no other VM forwards. The kernel picks it (listen on port 0), and it
// is free until QEMU binds it: a race with other host programs only, which
// QEMU's start then reports.
// Callers hold Manager.mu; forwards is changed in place.
func (m *Manager) pickPortsLocked(forwards []Forward) error {
	taken := map[int]bool{}
	for _, o := range m.vms {
		for _, of := range o.spec.Forwards {
			taken[of.HostPort] = true
		}
	}
	for _, f := range forwards {
		taken[f.HostPort] = true
	}
	for i := range forwards {
		if forwards[i].HostPort != 0 {
			continue
		}
		for try := 0; ; try++ {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("pick a host port for forwards[%d]: %w", i, err)
			}
			port := ln.Addr().(*net.TCPAddr).Port
			ln.Close()
			if !taken[port] && port >= 1024 {
				taken[port] = true
				forwards[i].HostPort = port
				break
			}
			if try > 100 {
				return fmt.Errorf("pick a host port for forwards[%d]: no free port", i)
			}
		}
	}
	return nil
}

// forwardConflictLocked returns an error naming the first of forwards whose
// host port another live VM forwards. Callers hold Manager.mu.
func (m *Manager) forwardConflictLocked(forwards []Forward) error {
	for i, f := range forwards {
		for _, o := range m.vms {
			if !o.alive() {
				continue
			}
			for _, of := range o.spec.Forwards {
				if of.HostPort == f.HostPort {
					return fielderr.Newf(fmt.Sprintf("forwards[%d].host_port", i), ErrInvalid, "host port %d is forwarded to vm %s", f.HostPort, o.spec.ID)
				}
			}
		}
	}
	return nil
}
