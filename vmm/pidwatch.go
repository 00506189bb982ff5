package vmm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// libvirt's lifecycle event for a killed QEMU arrived 1.5 s after the kill
// on this 2-core host under load (TestE2EDeathIsAnnounced): libvirt reaps
// the process and runs its stop job first. To announce a death within about
// a second regardless, vmm also watches each QEMU process itself through a
// pidfd. libvirt's event carries the better reason (powered off, crashed,
// destroyed), so a process exit is announced only if libvirt has said
// nothing pidExitGrace after it, unless libvirt announced the exit ahead
// (a guest shutdown: that reason is used at once).

// DefaultQEMUPidDir is where libvirtd's QEMU driver keeps <domain>.pid files.
const DefaultQEMUPidDir = "/run/libvirt/qemu"

// pidExitGrace is how long a seen QEMU exit waits for libvirt's own event.
const pidExitGrace = 700 * time.Millisecond

// reasonProcessExited is EventDied's reason when the pidfd saw QEMU exit
// before libvirt reported why.
const reasonProcessExited = "qemu exited (libvirt had not reported why yet)"

// watchProcess starts watching mc's QEMU; a missing pid file (a domain
// libvirt already stopped, a host layout that differs) only logs, since
// libvirt's events still report the death.
func (m *Manager) watchProcess(mc *machine) {
	pidFile := filepath.Join(m.cfg.QEMUPidDir, DomainPrefix+mc.spec.ID+".pid")
	stop := mc.stopWatch
	err := watchPid(pidFile, stop, func() {
		var reason string
		mc.with(func(st *machineState) { st.procExited, reason = true, st.exitReason })
		if reason == "" {
			select {
			case <-stop:
				return
			case <-time.After(pidExitGrace):
			}
			reason = reasonProcessExited
		}
		m.died(mc, reason)
	})
	if err != nil {
		m.log.Debug("not watching QEMU process; relying on libvirt events", "vm", mc.spec.ID, "op", "watch", "err", err)
	}
}

// watchPid calls exited, on its own goroutine, when the process named in
// pidFile exits; it returns an error if it cannot watch. Closing stop ends
// the watch without a call.
func watchPid(pidFile string, stop <-chan struct{}, exited func()) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("pid file %s: %q", pidFile, b)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	go func() {
		defer unix.Close(fd)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// A pidfd polls readable when the process exits. The timeout
			// only lets stop be noticed.
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 1000)
			if errors.Is(err, unix.EINTR) || n == 0 {
				continue
			}
			if err != nil {
				return
			}
			exited()
			return
		}
	}()
	return nil
}
