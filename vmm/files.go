package vmm

// The state dir's layout and the modes of what deskfarm keeps in it.

import (
	"fmt"
	"os"
	"path/filepath"
)

// File modes. The guest is hostile and other host users are not trusted
// with it: a VM's directory (overlay with the guest's disk, its sockets,
// console log) belongs to the QEMU user alone, 0700 (deskfarm is root);
// saved ready states (guest RAM) are root's, 0600 in a 0700 directory. The
// state dir and vms/ are 0711: QEMU must pass through them to its own
// directory, but nobody can list them.
const (
	stateDirMode = 0o711
	vmDirMode    = 0o700
	privateMode  = 0o600
)

// prepareStateDir creates the state dir layout and tightens the modes of
// one made by an older deskfarm.
func prepareStateDir(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, "vms")} {
		if err := os.MkdirAll(d, stateDirMode); err != nil {
			return fmt.Errorf("create state dir: %w", err)
		}
		if err := os.Chmod(d, stateDirMode); err != nil {
			return fmt.Errorf("state dir %s: %w", d, err)
		}
	}
	saved := filepath.Join(dir, "saved")
	if err := os.MkdirAll(saved, 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	return os.Chmod(saved, 0o700)
}

// makeVMDir creates a VM's directory for the QEMU user alone.
func makeVMDir(dir string, uid, gid int) error {
	if err := os.Mkdir(dir, vmDirMode); err != nil {
		return fmt.Errorf("create vm dir: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown vm dir %s: %w", dir, err)
	}
	return os.Chmod(dir, vmDirMode) // whatever the umask
}

// chownPrivate gives a file to the QEMU user, readable by it alone.
func chownPrivate(path string, uid, gid int) error {
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, privateMode)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
