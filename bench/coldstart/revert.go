package main

import (
	"context"
	"fmt"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/deskfarm/deskfarm/vmm"
)

// revert measures, on one VM, where a reset's time goes: Reset as deskfarm
// does it (loadvm, then the clock; the loadvm part from its log record),
// the first guest exec answered after it, and raw HMP loadvm (through
// libvirt, as Reset sends it) with nothing, 16 MiB or 256 MiB of guest RAM
// dirtied since the snapshot: whether loadvm's cost follows what changed.
func revert(ctx context.Context, m *vmm.Manager, steps *stepLog, opts vmm.CreateOptions, n int, label string, add func(string, time.Duration)) error {
	vm, err := m.Create(ctx, opts)
	if err != nil {
		return err
	}
	defer m.Destroy(ctx, vm.ID)
	exec := func(sh string) error {
		_, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"sh", "-c", sh}})
		return err
	}
	dirty := func(mib int) string {
		return fmt.Sprintf("dd if=/dev/urandom of=/dev/shm/dirty bs=1M count=%d 2>/dev/null", mib)
	}
	for i := 0; i < n; i++ {
		if err := exec(dirty(16)); err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := m.Reset(ctx, vm.ID); err != nil {
			return err
		}
		if err := exec("true"); err != nil {
			return fmt.Errorf("first exec after reset %d: %w", i, err)
		}
		add("revert: Reset, then the first guest exec answered", time.Since(t0))
		for op, d := range steps.take(vm.ID) {
			switch op {
			case "reset":
				add("revert: Reset (loadvm + clock)", d)
			case "reset loadvm":
				add("revert: Reset's loadvm", d)
			}
		}
	}

	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(vmm.DefaultLibvirtSocket)))
	if err := l.Connect(); err != nil {
		return err
	}
	defer l.Disconnect()
	dom, err := l.DomainLookupByName(vm.Domain)
	if err != nil {
		return err
	}
	loadvm := func() (time.Duration, error) {
		t0 := time.Now()
		out, err := l.QEMUDomainMonitorCommand(dom, "loadvm deskfarm-ready", 1)
		if err == nil && out != "" {
			err = fmt.Errorf("loadvm: %s", out)
		}
		return time.Since(t0), err
	}
	for _, mib := range []int{0, 16, 256} {
		for i := 0; i < n; i++ {
			// Each round starts from a Reset: the agent is reopened and the
			// clock right, so the dirtying exec runs.
			if _, err := m.Reset(ctx, vm.ID); err != nil {
				return err
			}
			if mib > 0 {
				if err := exec(dirty(mib)); err != nil {
					return err
				}
			}
			d, err := loadvm()
			if err != nil {
				return err
			}
			add(fmt.Sprintf("revert: raw HMP loadvm, %d MiB dirtied since", mib), d)
		}
	}
	_, err = m.Reset(ctx, vm.ID)
	steps.take(vm.ID)
	return err
}
