package vmm

// Whether a VM's QEMU still runs, asked when a call on it failed, so that a
// dead QEMU is named as such (ErrDead) rather than as the call's error.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// checkAlive returns ErrDead (with the console's last lines) if QEMU is gone.
func (m *Manager) checkAlive(ctx context.Context, mc *machine) error {
	st, err := m.hv.domainState(ctx, mc.handles().dom)
	if err != nil {
		return fmt.Errorf("domain state of vm %s: %w", mc.spec.ID, err)
	}
	if st == libvirt.DomainRunning || st == libvirt.DomainPaused {
		return nil
	}
	return fmt.Errorf("vm %s: %w (libvirt state %d); console tail: %s", mc.spec.ID, ErrDead, st, tail(mc.consoleLog(), 5))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no console log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// guestErr classifies a failed guest call: a dead QEMU is named as such.
func (m *Manager) guestErr(ctx context.Context, mc *machine, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	if aerr := m.checkAlive(ctx, mc); aerr != nil {
		return errors.Join(err, aerr)
	}
	// A QEMU killed mid-call breaks the agent's socket before libvirt
	// notices the exit, so the domain still reads as running: give the
	// process watch a moment to see the exit (it does within milliseconds)
	// and name the VM dead rather than blaming the agent.
	if errors.Is(err, ErrAgent) {
		t := time.NewTimer(deathSettle)
		defer t.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !mc.exited() {
			select {
			case <-ctx.Done():
				return err
			case <-t.C:
				return err
			case <-tick.C:
			}
		}
		return errors.Join(err, fmt.Errorf("vm %s: %w: qemu exited during the call; console tail: %s",
			mc.spec.ID, ErrDead, tail(mc.consoleLog(), 5)))
	}
	return err
}

// deathSettle bounds how long a failed agent call waits to learn whether
// QEMU died under it (guestErr).
const deathSettle = 500 * time.Millisecond
