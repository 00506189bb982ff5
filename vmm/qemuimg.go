package vmm

// qemu-img: a VM's disk is a qcow2 overlay on its image's read-only base.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

func (m *Manager) makeOverlay(dir, base, overlay string) error {
	if _, err := os.Stat(base); err != nil {
		return fmt.Errorf("base image %s: %w: %w", base, ErrBrokenImage, err)
	}
	if err := makeVMDir(dir, m.uid, m.gid); err != nil {
		return err
	}
	out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, overlay).CombinedOutput()
	if err != nil {
		// qemu-img opens the backing file to size the overlay: a failure here
		// is almost always a damaged base image.
		return fmt.Errorf("qemu-img create overlay %s on %s: %w: %w: %s", overlay, base, ErrBrokenImage, err, strings.TrimSpace(string(out)))
	}
	if err := chownPrivate(overlay, m.uid, m.gid); err != nil {
		return fmt.Errorf("overlay %s: %w", overlay, err)
	}
	return nil
}
