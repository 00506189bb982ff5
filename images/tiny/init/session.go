package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The session port's line protocol, shared with the host (vmm/session.go):
//
//	guest -> host  "ready"             once per boot, when the screen is drawn
//	                                   and the input devices are open
//	host -> guest  "time <unix-ns>"    set the clock (after a RAM restore)
//	guest -> host  "ok time <unix-ns>" done, echoing the request's number;
//	                                   "err time <why>" on failure
//
// Unknown lines are ignored.

// announceReady opens the session port, writes "ready\n" (which blocks until
// the host has the port open) and then serves the host's requests for the
// life of the guest.
func announceReady(ports *portLinker) {
	path, err := ports.wait(sessionPort, portTimeout)
	if err != nil {
		logf("session port: %v; still waiting", err)
		path, _ = ports.wait(sessionPort, 0)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		logf("open %s: %v", path, err)
		return
	}
	if err := writeAll(fd, "ready\n"); err != nil {
		logf("write ready to %s: %v", path, err)
		return
	}
	logf("ready at %.2fs", uptime())
	serveSession(fd, path)
}

// serveSession reads request lines from the session port and answers them.
// While no host is connected a read returns end of file at once, so reads
// are retried after a pause.
func serveSession(fd int, path string) {
	buf := make([]byte, 512)
	var pending []byte
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			if err != nil {
				logf("read %s: %v", path, err)
			}
			time.Sleep(250 * time.Millisecond)
			continue
		}
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			line := strings.TrimSpace(string(pending[:i]))
			pending = pending[i+1:]
			if reply := sessionReply(line); reply != "" {
				if err := writeAll(fd, reply+"\n"); err != nil {
					logf("write %s: %v", path, err)
				}
			}
		}
		if len(pending) > 4096 { // no newline in sight: not our protocol
			pending = pending[:0]
		}
	}
}

// sessionReply acts on one request line and returns the reply line, or ""
// for lines that need none.
func sessionReply(line string) string {
	arg, ok := strings.CutPrefix(line, "time ")
	if !ok {
		return ""
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(arg), 10, 64)
	if err != nil || ns <= 0 {
		return fmt.Sprintf("err time bad time %q", arg)
	}
	ts := unix.NsecToTimespec(ns)
	if err := setClock(&ts); err != nil {
		return fmt.Sprintf("err time %v", err)
	}
	return "ok time " + strings.TrimSpace(arg)
}

// setClock sets the realtime clock; a variable so tests need not.
var setClock = func(ts *unix.Timespec) error {
	return unix.ClockSettime(unix.CLOCK_REALTIME, ts)
}

// writeAll writes s to fd in full.
func writeAll(fd int, s string) error {
	b := []byte(s)
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
