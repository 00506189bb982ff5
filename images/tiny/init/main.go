// Command init is /init of deskfarm's tiny guest image: a PID 1 that shows a
// screen whose every pixel follows from the input it receives, for exact and
// fast tests of clicks and keys over VNC.
//
// It mounts the kernel filesystems, loads the kernel modules the image lists,
// keeps the QEMU guest agent running on its virtio-serial port, draws the
// screen described in package screen on /dev/fb0, applies every event from
// /dev/input/event* to it and to the input log, and then writes "ready\n" to
// the org.deskfarm.session.0 port once per boot and sets the clock when the
// host asks there (see session.go). It never exits; problems are reported on
// /dev/console.
//
// Build it static: CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/deskfarm/deskfarm/images/tiny/screen"
)

// Paths inside the guest.
const (
	modulesList   = "/etc/deskfarm/modules" // module paths in load order
	agentPath     = "/usr/sbin/qemu-ga"
	agentPort     = "org.qemu.guest_agent.0"
	sessionPort   = "org.deskfarm.session.0"
	virtioPortDir = "/dev/virtio-ports"
	fbDevice      = "/dev/fb0"
	stateDir      = "/run/deskfarm"
	guestPath     = "/usr/sbin:/usr/bin:/sbin:/bin"
)

// Timeouts for boot steps. Past them init carries on and reports what is
// missing; nothing here makes it stop.
const (
	fbTimeout     = 20 * time.Second // /dev/fb0 after modules load
	inputTimeout  = 20 * time.Second // keyboard and tablet event devices
	portTimeout   = 20 * time.Second // virtio-serial ports
	agentRestart  = time.Second      // delay before restarting qemu-ga
	deviceRescan  = 100 * time.Millisecond
	deviceIdleGap = 2 * time.Second // rescan period once boot is over
)

func main() {
	defer func() {
		if r := recover(); r != nil {
			logf("panic: %v\n%s", r, debug.Stack())
			hang()
		}
	}()
	boot()
	hang()
}

// boot runs the boot steps in order. Each step logs its own failures and
// lets boot go on with what works.
func boot() {
	setupMounts()
	handleSignals()
	startReaper()
	logf("starting at %.2fs", uptime())
	_ = os.MkdirAll(stateDir, 0o755)
	os.Setenv("PATH", guestPath)
	os.Setenv("HOME", "/root")
	os.Setenv("TERM", "linux")
	if err := unix.Sethostname([]byte("tiny")); err != nil {
		logf("sethostname: %v", err)
	}
	// Ctrl+Alt+Del sends SIGINT to init instead of rebooting.
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
		logf("ctrl-alt-del off: %v", err)
	}

	start := time.Now()
	loadModules(modulesList)
	logf("modules loaded in %v", time.Since(start).Round(time.Millisecond))

	ports := newPortLinker(virtioPortDir)
	go ports.run()
	go superviseAgent(ports)

	fb, err := waitFramebuffer(fbDevice, fbTimeout)
	var c *screen.Canvas
	if err != nil {
		logf("framebuffer: %v; drawing off-screen only", err)
		c = screen.NewCanvas(wantedScreen())
	} else {
		c = screen.NewCanvas(fb.width, fb.height)
		fb.flush(c.Img, c.Img.Rect)
		logf("first frame %dx%d drawn at %.2fs", fb.width, fb.height, uptime())
	}
	sz := c.Size()
	writeFile(screen.ScreenPath, fmt.Sprintf("%dx%d\n", sz.X, sz.Y))
	if w, h := wantedScreen(); w != sz.X || h != sz.Y {
		logf("screen is %dx%d, kernel command line asks for %dx%d", sz.X, sz.Y, w, h)
	}

	m := newModel(c, fb, screen.InputLogPath, screen.TextPath)
	devs := newDeviceSet(m.events)
	go devs.scan()
	go m.run()
	if err := devs.waitReady(inputTimeout); err != nil {
		logf("input: %v", err)
	}
	logf("input devices open at %.2fs", uptime())
	go announceReady(ports)
}

// handleSignals keeps signals from ending PID 1 and turns busybox's halt,
// poweroff and reboot requests (SIGUSR1, SIGUSR2, SIGTERM) into the act.
func handleSignals() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGPWR, unix.SIGPIPE, unix.SIGALRM)
	go func() {
		for s := range ch {
			var cmd int
			switch s {
			case unix.SIGTERM:
				cmd = unix.LINUX_REBOOT_CMD_RESTART
			case unix.SIGUSR1:
				cmd = unix.LINUX_REBOOT_CMD_HALT
			case unix.SIGUSR2:
				cmd = unix.LINUX_REBOOT_CMD_POWER_OFF
			default:
				logf("ignoring signal %v", s)
				continue
			}
			logf("signal %v: shutting down", s)
			unix.Sync()
			if err := unix.Reboot(cmd); err != nil {
				logf("reboot(%#x): %v", cmd, err)
			}
		}
	}()
}

// hang blocks forever: PID 1 must not return.
func hang() {
	for {
		time.Sleep(time.Hour)
	}
}

// logf reports on the console (stderr is /dev/console).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "deskfarm-init: "+format+"\n", args...)
}

// uptime is the time since the kernel started, in seconds.
func uptime() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return float64(ts.Nano()) / 1e9
}

// writeFile replaces path's content atomically (write, then rename).
func writeFile(path, content string) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		logf("write %s: %v", tmp, err)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		logf("rename %s: %v", tmp, err)
	}
}
