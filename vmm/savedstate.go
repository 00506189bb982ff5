package vmm

// Saved ready states: the overlay of the first VM of an image and size,
// copied once it holds the ready snapshot, from which later VMs like it
// start instead of booting. The name of one says everything its content
// depends on (templatePath).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// snapshotReady takes the ready snapshot and, if this image and size has no
// saved ready state yet, keeps a copy of the overlay holding it for later
// VMs to start from. The guest is paused meanwhile so the copy is
// consistent; a failed copy costs later VMs a boot, not this one its create.
func (m *Manager) snapshotReady(ctx context.Context, mc *machine, tmpl string) error {
	mon := mc.handles().mon
	if err := mon.stop(ctx); err != nil {
		return err
	}
	err := mon.saveVM(ctx, readySnapshot)
	if err == nil && !fileExists(tmpl) {
		if terr := copyFile(filepath.Join(mc.spec.Dir, "disk.qcow2"), tmpl); terr != nil {
			m.log.Warn("could not save ready state for later VMs", "vm", mc.spec.ID, "op", "snapshot", "err", terr)
		} else {
			m.log.Info("saved ready state for later VMs", "vm", mc.spec.ID, "op", "snapshot", "path", tmpl)
			m.refillSpare(tmpl)
		}
	}
	if cerr := mon.cont(ctx); err == nil {
		err = cerr
	}
	return err
}

// templatePath is where the saved ready state of VMs like opts lives. Its
// name holds everything the saved state depends on: the base image's hash
// and the virtual hardware (its version, RAM size, vCPUs, screen,
// accelerator).
func (m *Manager) templatePath(img BaseImage, opts CreateOptions) string {
	hash := img.Hash
	if len(hash) > 16 {
		hash = hash[:16]
	}
	// A saved state holds the guest's devices: a VM with a NIC cannot load
	// one without, and the other way round. Forwards are host-side only.
	net := ""
	if hasNIC(opts.Network, opts.Forwards) {
		net = "-net"
	}
	name := fmt.Sprintf("%s-%s-%s-%dm-%dc-%dx%d-%s%s.qcow2", img.Name, hash, m.hardware(), opts.MemoryMiB, opts.VCPUs, opts.Width, opts.Height, m.accel, net)
	return filepath.Join(m.cfg.StateDir, "saved", name)
}

// hardwareVersion is the version of the device set domainXML gives a VM;
// saved ready states carry it in their name (templatePath), since QEMU
// cannot load a state saved with other devices. Raise it with every device
// change in domainTmpl. Versions: 1, the devices before issue 17 (names
// without a version were 1); 2, virtio-balloon with free page reporting.
const hardwareVersion = 2

// hardware is the hardware version of the VMs m makes: 1 without the
// balloon (Config.NoBalloon), which is version 1's device set.
func (m *Manager) hardware() string {
	if m.cfg.NoBalloon {
		return "hw1"
	}
	return fmt.Sprintf("hw%d", hardwareVersion)
}

// copyOverlay makes a VM's overlay from a copy of tmpl, a qcow2 holding
// the snapshot the VM starts from.
func (m *Manager) copyOverlay(dir, tmpl, overlay string) error {
	return m.overlayFrom(dir, tmpl, overlay, false)
}

// overlayFrom makes a VM's overlay from tmpl: with spare set (tmpl is a
// saved ready state, templatePath), from its spare if there is one
// (spare.go; Create makes the next once the VM is ready), else a copy.
func (m *Manager) overlayFrom(dir, tmpl, overlay string, spare bool) error {
	if err := makeVMDir(dir, m.uid, m.gid); err != nil {
		return err
	}
	if !spare || !m.takeSpare(tmpl, overlay) {
		if err := copyFile(tmpl, overlay); err != nil {
			return err
		}
	}
	if err := chownPrivate(overlay, m.uid, m.gid); err != nil {
		return fmt.Errorf("overlay %s: %w", overlay, err)
	}
	return nil
}

// copyFile copies src to dst atomically (a temp file renamed into place).
func copyFile(src, dst string) error { return copyFileContext(context.Background(), src, dst, false) }

// copyFileContext is copyFile, stopped when ctx ends; background copies
// run at the lowest CPU priority (nice 19), behind the VMs.
func copyFileContext(ctx context.Context, src, dst string, background bool) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	argv := []string{"cp", "--sparse=always", src, tmp}
	if background {
		argv = append([]string{"nice", "-n", "19"}, argv...)
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("copy %s to %s: %w: %s", src, tmp, err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
