package vmm

// Teardown: Destroy, and removing whatever exists of a VM (also for a
// failed create's leftovers and recovery).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// Destroy removes the VM's domain, overlay (and with it the ready snapshot)
// and sockets. If ctx ends or libvirt fails first, the VM stays listed
// (StateBroken) and Destroy can be called again.
func (m *Manager) Destroy(ctx context.Context, id string) error {
	mc, st, err := m.change(id)
	if err != nil {
		return err
	}
	defer mc.op.Unlock()
	start := time.Now()
	if st.session != nil {
		st.session.close()
	}
	if err := m.teardown(ctx, mc.spec.ID, mc.spec.Dir); err != nil {
		m.markBroken(mc, "destroy failed")
		return fmt.Errorf("destroy vm %s: %w", id, err)
	}
	mc.with(func(st *machineState) { st.gone = true })
	mc.stop()
	m.mu.Lock()
	delete(m.vms, id)
	m.mu.Unlock()
	m.publish(EventDestroyed, mc, "destroyed")
	m.log.Info("vm destroyed", "vm", id, "op", "destroy", "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// teardown removes whatever exists of a VM: domain (running or not), its
// definition and its directory. Missing parts are not errors.
func (m *Manager) teardown(ctx context.Context, id, dir string) error {
	var errs []error
	dom, err := m.hv.lookupDomain(ctx, DomainPrefix+id)
	switch {
	case libvirt.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("look up domain: %w", err)
	default:
		if err := ignoreNotRunning(m.hv.destroyDomain(ctx, dom)); err != nil && !libvirt.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("destroy domain: %w", err))
		}
		if err := m.hv.undefineDomain(ctx, dom); err != nil && !libvirt.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("undefine domain: %w", err))
		}
	}
	if len(errs) > 0 {
		// Keep the directory while the domain may still use it.
		return errors.Join(errs...)
	}
	if dir == "" {
		dir = m.vmDir(id)
	}
	return os.RemoveAll(dir)
}

func ignoreNotRunning(err error) error {
	if libvirtCode(err) == libvirt.ErrOperationInvalid {
		return nil
	}
	return err
}
