package vmm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

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
func (m *monitor) delVM(ctx context.Context, name string) error  { return m.run(ctx, "delvm "+name) }

// output runs an HMP command that prints its answer (info ...) and
// returns it; a line QEMU starts with "Error:" is an error.
func (m *monitor) output(ctx context.Context, cmd string) (string, error) {
	out, err := m.hv.monitorHMP(ctx, m.dom, cmd)
	if err != nil {
		return "", fmt.Errorf("monitor %q on vm %s: %w", cmd, m.vm, err)
	}
	out = strings.ReplaceAll(out, "\r", "")
	if strings.HasPrefix(strings.TrimSpace(out), "Error:") {
		return "", fmt.Errorf("monitor %q on vm %s: qemu: %s", cmd, m.vm, strings.TrimSpace(out))
	}
	return out, nil
}

// parseSnapshots reads QEMU's "info snapshots" table (QEMU 7.2,
// bdrv_snapshot_dump; testdata/captures.json info-snapshots-*):
//
//	List of snapshots present on all disks:
//	ID        TAG               VM SIZE                DATE     VM CLOCK     ICOUNT
//	--        deskfarm-ready   79.6 MiB 2026-12-01 18:53:39 00:00:07.099
//
// A tag longer than its column pushes the rest right, so rows are split on
// blanks (deskfarm's names have none). VM SIZE is rounded to three
// digits. DATE is the QEMU process's local time, read here as this
// process's. With no snapshot QEMU prints "There is no snapshot
// available." Snapshots on only some disks (a "partial" list) are not
// loadable and not returned.
func parseSnapshots(out string) ([]Snapshot, error) {
	var snaps []Snapshot
	inAll := false
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "List of snapshots present on all disks"):
			inAll = true
			continue
		case strings.HasPrefix(line, "List of"), strings.HasPrefix(line, "There is no"):
			inAll = false
			continue
		case strings.HasPrefix(line, "Error:"):
			return nil, fmt.Errorf("qemu: %s", line)
		case !inAll, strings.HasPrefix(line, "ID "):
			continue
		}
		f := strings.Fields(line)
		if len(f) < 7 {
			return nil, fmt.Errorf("info snapshots: unreadable row %q", line)
		}
		size, err := parseHMPSize(f[2], f[3])
		if err != nil {
			return nil, fmt.Errorf("info snapshots: row %q: %w", line, err)
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05", f[4]+" "+f[5], time.Local)
		if err != nil {
			return nil, fmt.Errorf("info snapshots: row %q: %w", line, err)
		}
		snaps = append(snaps, Snapshot{Name: f[1], Bytes: size, Created: at})
	}
	return snaps, nil
}

// parseHMPSize reads QEMU's size_to_str ("79.6 MiB", "0 B").
func parseHMPSize(num, unit string) (int64, error) {
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, err
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	for i, u := range units {
		if u == unit {
			return int64(v * float64(int64(1)<<(10*i))), nil
		}
	}
	return 0, fmt.Errorf("unknown size unit %q", unit)
}

// stop pauses the guest; QEMU drains and flushes its block layer first, so
// the overlay file is consistent on disk (qcow2 metadata caches included).
func (m *monitor) stop(ctx context.Context) error { return m.run(ctx, "stop") }
func (m *monitor) cont(ctx context.Context) error { return m.run(ctx, "cont") }
