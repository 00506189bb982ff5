package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// setupMounts mounts proc, sysfs, devtmpfs and the tmpfs directories, then
// points stdin, stdout and stderr at /dev/console.
func setupMounts() {
	mounts := []struct {
		src, dir, fstype, data string
		flags                  uintptr
	}{
		{"proc", "/proc", "proc", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"sysfs", "/sys", "sysfs", "", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755", unix.MS_NOSUID},
		{"devpts", "/dev/pts", "devpts", "gid=5,mode=620,ptmxmode=666", unix.MS_NOSUID | unix.MS_NOEXEC},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
		{"tmpfs", "/tmp", "tmpfs", "mode=1777", unix.MS_NOSUID | unix.MS_NODEV},
		{"tmpfs", "/run", "tmpfs", "mode=0755", unix.MS_NOSUID | unix.MS_NODEV},
	}
	var errs []error
	for _, m := range mounts {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Mount(m.src, m.dir, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", m.fstype, m.dir, err))
		}
	}
	if fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY, 0); err == nil {
		for i := 0; i < 3; i++ {
			_ = unix.Dup2(fd, i)
		}
		if fd > 2 {
			unix.Close(fd)
		}
	}
	for _, err := range errs {
		logf("%v", err)
	}
}

// loadModules loads the kernel modules listed in list (one path per line,
// dependencies first; blank lines and # comments skipped). A module that is
// already loaded is fine; other failures are reported and skipped.
func loadModules(list string) {
	f, err := os.Open(list)
	if err != nil {
		logf("modules: %v", err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		path := strings.TrimSpace(sc.Text())
		if path == "" || strings.HasPrefix(path, "#") {
			continue
		}
		if err := loadModule(path); err != nil {
			logf("module %s: %v", path, err)
		}
	}
	if err := sc.Err(); err != nil {
		logf("modules: read %s: %v", list, err)
	}
}

func loadModule(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.FinitModule(fd, "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("finit_module: %w", err)
	}
	return nil
}

// wantedScreen returns the size deskfarm.screen=WxH on the kernel command
// line asks for, or 1280x800.
func wantedScreen() (int, int) {
	w, h := 1280, 800
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return w, h
	}
	for _, f := range strings.Fields(string(b)) {
		v, ok := strings.CutPrefix(f, "deskfarm.screen=")
		if !ok {
			continue
		}
		var pw, ph int
		if n, _ := fmt.Sscanf(v, "%dx%d", &pw, &ph); n == 2 && pw > 0 && ph > 0 {
			w, h = pw, ph
		}
	}
	return w, h
}

// portLinker makes /dev/virtio-ports/NAME symlinks for the virtio-serial
// ports, as udev would, and lets callers wait for a named port.
type portLinker struct {
	dir string

	mu      sync.Mutex
	known   map[string]string // port name -> device
	changed chan struct{}     // closed and replaced whenever a link is made
}

func newPortLinker(dir string) *portLinker {
	return &portLinker{dir: dir, changed: make(chan struct{}), known: map[string]string{}}
}

// run links ports as they appear: quickly during boot, then now and then.
func (p *portLinker) run() {
	_ = os.MkdirAll(p.dir, 0o755)
	start := time.Now()
	for {
		p.link()
		if time.Since(start) < portTimeout {
			time.Sleep(deviceRescan)
		} else {
			time.Sleep(deviceIdleGap)
		}
	}
}

func (p *portLinker) link() {
	ents, _ := filepath.Glob("/sys/class/virtio-ports/vport*")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(e, "name"))
		name := strings.TrimSpace(string(b))
		if err != nil || name == "" || strings.ContainsRune(name, '/') {
			continue
		}
		dev := "/dev/" + filepath.Base(e)
		p.mu.Lock()
		if p.known[name] == dev {
			p.mu.Unlock()
			continue
		}
		link := filepath.Join(p.dir, name)
		_ = os.Remove(link)
		if err := os.Symlink("../"+filepath.Base(e), link); err != nil {
			logf("link %s: %v", link, err)
		}
		p.known[name] = dev
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
}

// wait returns the /dev/virtio-ports path of port name once it exists. A
// zero timeout waits forever.
func (p *portLinker) wait(name string, timeout time.Duration) (string, error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	for {
		p.mu.Lock()
		_, ok := p.known[name]
		changed := p.changed
		p.mu.Unlock()
		if ok {
			return filepath.Join(p.dir, name), nil
		}
		select {
		case <-changed:
		case <-deadline:
			return "", fmt.Errorf("no virtio-serial port %s after %v", name, timeout)
		}
	}
}
