package main

import (
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// children tracks processes init started, so that the reaper, which waits
// for every child (PID 1 inherits all orphans), can tell their owners when
// they exit.
var children = struct {
	sync.Mutex
	exited map[int]chan syscall.WaitStatus
}{exited: map[int]chan syscall.WaitStatus{}}

// startReaper collects exited children whenever SIGCHLD arrives.
func startReaper() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGCHLD)
	go func() {
		for range ch {
			reap()
		}
	}()
}

// reap collects every exited child. It holds the lock so that a process
// started under the lock is registered before its exit can be seen.
func reap() {
	children.Lock()
	defer children.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		if c, ok := children.exited[pid]; ok {
			delete(children.exited, pid)
			c <- ws
		}
	}
}

// startChild starts argv[0] with stdin on /dev/null and stdout and stderr
// on the console, and returns a channel that receives its exit status.
func startChild(argv []string) (int, <-chan syscall.WaitStatus, error) {
	null, err := os.Open("/dev/null")
	if err != nil {
		return 0, nil, err
	}
	defer null.Close()
	out, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		out = null
	} else {
		defer out.Close()
	}
	children.Lock()
	defer children.Unlock()
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: []uintptr{null.Fd(), out.Fd(), out.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return 0, nil, err
	}
	c := make(chan syscall.WaitStatus, 1)
	children.exited[pid] = c
	return pid, c, nil
}

// superviseAgent runs qemu-ga on the guest agent port and restarts it
// whenever it exits.
func superviseAgent(ports *portLinker) {
	path, err := ports.wait(agentPort, portTimeout)
	if err != nil {
		logf("guest agent: %v; still waiting", err)
		path, _ = ports.wait(agentPort, 0)
	}
	_ = os.MkdirAll("/run/qemu-ga", 0o755)
	argv := []string{agentPath, "-m", "virtio-serial", "-p", path, "-t", "/run/qemu-ga"}
	for {
		pid, exited, err := startChild(argv)
		if err != nil {
			logf("start %s: %v", agentPath, err)
		} else {
			logf("qemu-ga started (pid %d) at %.2fs", pid, uptime())
			ws := <-exited
			logf("qemu-ga exited: %v", describeExit(ws))
		}
		time.Sleep(agentRestart)
	}
}

func describeExit(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return "status " + strconv.Itoa(ws.ExitStatus())
}
