package vmm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ErrStateDirBusy means another deskfarm process manages the state dir.
var ErrStateDirBusy = errors.New("state dir in use by another deskfarm")

// lockStateDir takes an exclusive lock on dir for this Manager's life. Two
// farms on one state dir would each take the other's VMs for orphans (a
// starting farm removes VM directories that have no domain yet).
func lockStateDir(dir string, wait time.Duration) (*os.File, error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock state dir: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			f.Truncate(0)
			fmt.Fprintf(f, "%d\n", os.Getpid())
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			pid, _ := os.ReadFile(path)
			f.Close()
			return nil, fmt.Errorf("%w: %s (lock %s held by pid %s)", ErrStateDirBusy, dir, path, string(pid[:max(0, len(pid)-1)]))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
