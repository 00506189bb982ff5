package vmm

// Saved ready states: the overlay of the first VM of an image and size,
// copied once it holds the ready snapshot, from which later VMs like it
// start instead of booting. The name of one says everything its content
// depends on (templatePath).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
// name holds everything the saved state depends on: the base image's
// recipe hash and build (imageKey) and the virtual hardware (its version,
// RAM size, vCPUs, screen, accelerator).
func (m *Manager) templatePath(img BaseImage, opts CreateOptions) string {
	hash := imageKey(img)
	// A saved state holds the guest's devices: a VM with a NIC cannot load
	// one without, and the other way round. Forwards are host-side only,
	// but a NIC on a restricted stack (forwards without network) has no
	// name server in the guest (guestNetworkScript): "-fwd", not "-net".
	net := ""
	switch {
	case opts.Network == NetworkUser:
		net = "-net"
	case hasNIC(opts.Network, opts.Forwards):
		net = "-fwd"
	}
	name := fmt.Sprintf("%s-%s-%s-%dm-%dc-%dx%d-%s%s.qcow2", img.Name, hash, m.hardware(), opts.MemoryMiB, opts.VCPUs, opts.Width, opts.Height, m.accel, net)
	return filepath.Join(m.cfg.StateDir, "saved", name)
}

// hardwareVersion is the version of the device set domainXML gives a VM,
// and of how its ready state is saved; saved ready states carry it in
// their name (templatePath), since QEMU cannot load a state saved with
// other devices. Raise it with every device change in domainTmpl, and
// with every change in what a saved state holds that later VMs depend on.
// Versions: 1, the devices before issue 17 (names without a version were
// 1); 2, virtio-balloon with free page reporting; 3, the accessibility
// port (org.deskfarm.a11y.0, DialA11y); 4, the same devices, the ready
// state saved with the guest's free memory not yet reported (shrinkRAM),
// so that a VM gives it back to the host after each loadvm.
const hardwareVersion = 4

// hardware is the hardware version of the VMs m makes, "nb" after it
// without the balloon (Config.NoBalloon).
func (m *Manager) hardware() string {
	if m.cfg.NoBalloon {
		return fmt.Sprintf("hw%dnb", hardwareVersion)
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
	// --sparse=auto: holes stay holes (SEEK_DATA), the data goes through
	// copy_file_range in the kernel, and on XFS or btrfs cp's default
	// --reflink=auto clones it. --sparse=always read and wrote every byte
	// in cp to look for zeros: a 400 MiB file took 2.19 s against 0.56 s
	// (ext4, 2026-12-02), and a fork or a spare copies the whole overlay.
	argv := []string{"cp", "--sparse=auto", src, tmp}
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

// shortHash is the part of an image's hash a saved ready state's name
// carries.
func shortHash(h string) string { return h[:min(len(h), 16)] }

// imageKey is what a saved ready state's name carries of its image: the
// recipe's hash and the build's (BaseImage.Build), hashed together, since
// the RAM it holds is good only over that build's disk. A forced rebuild,
// or a cache emptied and built again, then boots anew instead of loading
// a guest whose page cache and file system state belong to other bytes.
func imageKey(img BaseImage) string {
	if img.Build == "" {
		return shortHash(img.Hash)
	}
	sum := sha256.Sum256([]byte(img.Hash + "\x00" + img.Build))
	return hex.EncodeToString(sum[:8])
}

// savedName is the start of a saved ready state's name (templatePath):
// image, its imageKey, and the hardware version (absent before version 2
// named them; its number in m[4]).
var savedName = regexp.MustCompile(`^(.+)-([0-9a-f]{1,16})-(?:(hw([0-9]+)[a-z]*)-)?[0-9]+m-`)

// pruneSaved removes the saved ready states in dir (and their spares) that
// no VM can start from any more: of an image rebuilt since (another hash
// or build)
// or whose recipe is gone, and those of an older hardware version or named
// before hardware versions were (never loaded now: no setting makes their
// device set any more). Without it each rebuild of an image left its saved
// states behind for good (185 MB to 230 MB each, twice with the spare).
// Saved states of the balloon's other setting, another accelerator or size
// stay: a farm with other settings on this state dir starts from them. A VM never
// runs from its saved state's file (it starts from a copy), so removing one
// affects only later creates, which boot.
func pruneSaved(dir string, images ImageResolver, log *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // none yet
	}
	type verdict struct {
		hash  string
		known bool // false: the image's recipe is gone
	}
	current := map[string]verdict{} // by image name; absent: not asked yet
	for _, e := range entries {
		name := e.Name()
		base, _, _ := strings.Cut(name, ".qcow2")
		m := savedName.FindStringSubmatch(base + "-")
		if m == nil {
			continue // not a saved ready state's
		}
		why := ""
		v, asked := current[m[1]]
		if !asked {
			v.known = true
			img, err := images.Resolve(m[1])
			switch {
			case errors.Is(err, ErrUnknownImage):
				v.known = false
			case err == nil && img.Name == m[1]:
				v.hash = imageKey(img)
			default: // not built now, or a resolver of one image: keep
				v.hash = m[2]
			}
			current[m[1]] = v
		}
		switch {
		case m[3] == "":
			why = "named before hardware versions"
		case m[4] != strconv.Itoa(hardwareVersion):
			why = "hardware version " + m[4] + ", now " + strconv.Itoa(hardwareVersion)
		case !v.known:
			why = "image " + m[1] + " is no longer a recipe"
		case v.hash != m[2]:
			why = fmt.Sprintf("image %s is %s now", m[1], v.hash)
		}
		if why == "" {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			log.Warn("could not remove an outdated saved ready state", "op", "saved-state", "path", name, "err", err)
			continue
		}
		log.Info("removed an outdated saved ready state", "op", "saved-state", "path", name, "why", why)
	}
}
