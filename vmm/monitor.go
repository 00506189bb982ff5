package vmm

import (
	"context"
	"fmt"
	"strings"

	"github.com/digitalocean/go-libvirt"
)

// monitor is the QEMU human monitor of one VM, through libvirt's
// qemu-monitor-command. deskfarm uses it for internal snapshots: libvirt
// 9.0's own snapshot revert kills and restarts QEMU (median 7.7 s here and
// it drops VNC clients), while loadvm restores RAM and disk in place.
type monitor struct {
	hv  hypervisor
	dom libvirt.Domain
	vm  string
}

func (m *monitor) run(ctx context.Context, cmd string) error {
	out, err := m.hv.monitorHMP(ctx, m.dom, cmd)
	if err != nil {
		return fmt.Errorf("monitor %q on vm %s: %w", cmd, m.vm, err)
	}
	if err := parseHMPResult(out); err != nil {
		return fmt.Errorf("monitor %q on vm %s: %w", cmd, m.vm, err)
	}
	return nil
}

// parseHMPResult turns the text an HMP command printed into an error. savevm,
// loadvm and delvm print nothing on success (QEMU 7.2 migration/savevm.c);
// anything else is QEMU's complaint, e.g. "Error: Snapshot 'x' does not exist".
func parseHMPResult(out string) error {
	out = strings.TrimSpace(strings.ReplaceAll(out, "\r", ""))
	if out == "" {
		return nil
	}
	return fmt.Errorf("qemu: %s", out)
}

// readySnapshot is the name of the internal snapshot resets return to.
const readySnapshot = "deskfarm-ready"

func (m *monitor) saveVM(ctx context.Context, name string) error { return m.run(ctx, "savevm "+name) }
func (m *monitor) loadVM(ctx context.Context, name string) error { return m.run(ctx, "loadvm "+name) }

// stop pauses the guest; QEMU drains and flushes its block layer first, so
// the overlay file is consistent on disk (qcow2 metadata caches included).
func (m *monitor) stop(ctx context.Context) error { return m.run(ctx, "stop") }
func (m *monitor) cont(ctx context.Context) error { return m.run(ctx, "cont") }
