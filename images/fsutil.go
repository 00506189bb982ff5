package images

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path (created if missing), polling
// until ctx ends. waiting, if not nil, is called once when the lock is busy.
// The returned function releases it.
func lockFile(ctx context.Context, path string, waiting func()) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for first := true; ; first = false {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		if first && waiting != nil {
			waiting()
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, context.Cause(ctx)
		case <-time.After(lockPollEvery):
		}
	}
}

// lockHeld reports whether some process holds the flock on path.
func lockHeld(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// removeLockFile removes a lock file nobody holds.
func removeLockFile(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		os.Remove(path)
	}
}

// staleBuildDir reports whether a temporary build directory belongs to a
// build that is no longer running: its lock is free, or it has no lock
// file and is older than deadBuildMinAge.
func staleBuildDir(dir string) (bool, error) {
	held, err := lockHeld(filepath.Join(dir, buildLockFile))
	if errors.Is(err, fs.ErrNotExist) {
		st, err := os.Stat(dir)
		if err != nil {
			return false, err
		}
		return time.Since(st.ModTime()) > deadBuildMinAge, nil
	}
	if err != nil {
		return false, err
	}
	return !held, nil
}

// removeTree removes dir after unmounting whatever is mounted below it (a
// recipe killed mid-build may leave proc, sysfs or devpts mounted in its
// chroot). It refuses to remove anything while a mount remains: removing
// through a bind mount would delete the host's files.
func removeTree(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return err
	}
	mounts, err := mountsUnder(real)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	for _, m := range mounts {
		if unix.Unmount(m, 0) != nil {
			unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	if len(mounts) > 0 {
		left, err := mountsUnder(real)
		if err != nil {
			return fmt.Errorf("remove %s: %w", dir, err)
		}
		if len(left) > 0 {
			return fmt.Errorf("remove %s: refusing, still mounted: %s", dir, strings.Join(left, ", "))
		}
	}
	if err := os.RemoveAll(real); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// openedUnder returns a process that has a file below dir open (QEMU holds
// its backing file), or 0.
func openedUnder(dir string) (pid int, file string) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, ""
	}
	prefix := filepath.Clean(dir) + "/"
	for _, p := range procs {
		n, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err == nil && strings.HasPrefix(target, prefix) {
				return n, target
			}
		}
	}
	return 0, ""
}

// syncFile fsyncs a file or directory.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// exchange atomically swaps two paths (renameat2 RENAME_EXCHANGE, Linux 3.15).
func exchange(a, b string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
		return fmt.Errorf("exchange %s and %s: %w", a, b, err)
	}
	return nil
}
