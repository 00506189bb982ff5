package vmm

// Host-side facts a domain is made with: the MAC confinement libvirt
// offers (sVirt) and the guest's network interface with its loopback port
// forwards.

import (
	"encoding/xml"
	"fmt"
	"net"
)

// macModel returns the mandatory access control model libvirt offers for
// sVirt ("apparmor" or "selinux") from its capabilities XML, or "".
func macModel(capsXML string) string {
	var caps struct {
		Host struct {
			SecModels []struct {
				Model string `xml:"model"`
			} `xml:"secmodel"`
		} `xml:"host"`
	}
	if err := xml.Unmarshal([]byte(capsXML), &caps); err != nil {
		return ""
	}
	for _, s := range caps.Host.SecModels {
		if s.Model == "apparmor" || s.Model == "selinux" {
			return s.Model
		}
	}
	return ""
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
func (m *Manager) pickPortsLocked(mc *machine) error {
	taken := map[int]bool{}
	for _, o := range m.vms {
		for _, of := range o.meta.Forwards {
			taken[of.HostPort] = true
		}
	}
	for _, f := range mc.meta.Forwards {
		taken[f.HostPort] = true
	}
	for i := range mc.meta.Forwards {
		if mc.meta.Forwards[i].HostPort != 0 {
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
				mc.meta.Forwards[i].HostPort = port
				break
			}
			if try > 100 {
				return fmt.Errorf("pick a host port for forwards[%d]: no free port", i)
			}
		}
	}
	return nil
}
