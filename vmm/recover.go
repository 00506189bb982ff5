package vmm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// recover adopts the ready VMs a previous deskfarm left running, found by
// their domain metadata, and removes everything else of deskfarm's: domains
// caught mid-create or stopped, and VM directories with no domain.
func (m *Manager) recover(ctx context.Context) error {
	doms, err := m.hv.listDomains(ctx)
	if err != nil {
		return fmt.Errorf("recover: list domains: %w", err)
	}
	adopted := map[string]bool{}
	for _, d := range doms {
		if !strings.HasPrefix(d.Name, DomainPrefix) {
			continue
		}
		id := strings.TrimPrefix(d.Name, DomainPrefix)
		mc, why, ours := m.adopt(ctx, d)
		if !ours {
			// Another farm (say the test suite's) on the same libvirtd.
			m.log.Debug("ignoring domain of another state dir", "vm", id, "op", "recover", "reason", why)
			continue
		}
		if mc == nil {
			m.log.Warn("removing leftover domain", "vm", id, "op", "recover", "reason", why)
			if err := m.teardown(ctx, id, ""); err != nil {
				m.log.Error("remove leftover domain", "vm", id, "op", "recover", "err", err)
			}
			continue
		}
		m.vms[id] = mc
		m.watchProcess(mc)
		adopted[id] = true
		m.log.Info("adopted vm", "vm", id, "op", "recover", "image", mc.spec.Image)
	}
	if err := m.removeForkTemplates(); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(m.cfg.StateDir, "vms"))
	if err != nil {
		return fmt.Errorf("recover: read vm dirs: %w", err)
	}
	for _, e := range entries {
		if adopted[e.Name()] {
			continue
		}
		m.log.Warn("removing orphan vm directory", "vm", e.Name(), "op", "recover")
		if err := os.RemoveAll(filepath.Join(m.cfg.StateDir, "vms", e.Name())); err != nil {
			return fmt.Errorf("recover: remove orphan dir: %w", err)
		}
	}
	return nil
}

// adopt returns the live record of a domain, or nil and why it can't be
// used. ours is false for a domain whose directory lies in another state dir:
// that belongs to another deskfarm on the same libvirtd and is left alone.
func (m *Manager) adopt(ctx context.Context, d libvirt.Domain) (mc *machine, why string, ours bool) {
	raw, err := m.hv.domainMetadata(ctx, d, metadataNS)
	if err != nil {
		// Every deskfarm domain is defined with its metadata; without it we
		// cannot tell whose it is.
		return nil, "no deskfarm metadata: " + err.Error(), false
	}
	md, err := parseMetadata(raw)
	if err != nil {
		return nil, err.Error(), false
	}
	if filepath.Dir(md.Dir) != filepath.Join(m.cfg.StateDir, "vms") {
		return nil, "directory " + md.Dir + " is not under " + m.cfg.StateDir, false
	}
	st, err := m.hv.domainState(ctx, d)
	if err != nil {
		return nil, "state unknown: " + err.Error(), true
	}
	if st != libvirt.DomainRunning {
		return nil, fmt.Sprintf("not running (libvirt state %d)", st), true
	}
	if md.State != StateReady {
		return nil, "interrupted while " + string(md.State), true
	}
	if _, err := os.Stat(filepath.Join(md.Dir, "disk.qcow2")); err != nil {
		return nil, "overlay missing: " + err.Error(), true
	}
	// A directory made by an older deskfarm may be group-readable.
	_ = os.Chmod(md.Dir, vmDirMode)
	mc = &machine{spec: md.machineSpec, stopWatch: make(chan struct{}),
		st: machineState{state: md.State, bootSeconds: md.BootSeconds, labels: md.Labels,
			handles: handles{dom: d, agent: &agent{hv: m.hv, dom: d, vm: md.ID}, mon: &monitor{hv: m.hv, dom: d, vm: md.ID}}}}
	// The session channel is how resets set the clock; without it they fall
	// back to the slower guest agent, so a failure here is not fatal.
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if s, err := dialSession(sctx, md.ID, filepath.Join(md.Dir, "session.sock"), func() error { return nil }); err == nil {
		mc.st.session = s // not yet registered: no one else sees mc
	} else {
		m.log.Warn("session channel unavailable after restart", "vm", md.ID, "op", "recover", "err", err)
	}
	return mc, "", true
}
