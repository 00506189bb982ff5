package vmm

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// session is deskfarm's own channel to the guest: the virtio-serial port
// org.deskfarm.session.0, a unix socket on the host. The line protocol:
//
//	guest -> host  "ready"             the desktop session is up and drawn
//	host -> guest  "time <unix-ns>"    set the clock (after a RAM restore)
//	guest -> host  "ok time <unix-ns>" done; "err time <why>" failed
//
// Screen polling is no readiness signal (panel clocks redraw it), so the
// guest says when it is ready. Setting the clock here takes milliseconds;
// qemu-ga's guest-set-time runs hwclock, which waits for an RTC second edge
// (1-2 s measured on the desktop image).
type session struct {
	vm   string
	conn net.Conn

	wmu    sync.Mutex // serialises writes
	ready  chan struct{}
	times  chan string // replies to "time"
	closed chan struct{}
	once   sync.Once
}

// dialSession connects to the VM's session socket, retrying while QEMU is
// still creating it. died is polled so a QEMU that exits fails fast.
func dialSession(ctx context.Context, vm, sock string, died func() error) (*session, error) {
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sock)
		if err == nil {
			s := &session{vm: vm, conn: conn, ready: make(chan struct{}, 1), times: make(chan string, 4), closed: make(chan struct{})}
			go s.read()
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect session channel %s: %w", sock, ErrTimeout)
		}
		if derr := died(); derr != nil {
			return nil, derr
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *session) read() {
	defer s.close()
	sc := bufio.NewScanner(s.conn)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "ready":
			select {
			case s.ready <- struct{}{}:
			default:
			}
		case strings.HasPrefix(line, "ok time ") || strings.HasPrefix(line, "err time"):
			select {
			case s.times <- line:
			default: // nobody waiting: a late reply to a timed-out request
			}
		}
	}
}

func (s *session) close() {
	s.once.Do(func() {
		s.conn.Close()
		close(s.closed)
	})
}

// waitReady waits for the guest's "ready" line, polling died.
func (s *session) waitReady(ctx context.Context, died func() error) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.ready:
			return nil
		case <-s.closed:
			if err := died(); err != nil {
				return err
			}
			return fmt.Errorf("session channel of vm %s closed before ready", s.vm)
		case <-ctx.Done():
			return fmt.Errorf("wait for session ready of vm %s: %w", s.vm, ErrTimeout)
		case <-tick.C:
			if err := died(); err != nil {
				return err
			}
		}
	}
}

// setTime sets the guest clock to now and waits for the guest to confirm.
func (s *session) setTime(ctx context.Context) error {
	for drained := false; !drained; {
		select {
		case <-s.times:
		default:
			drained = true
		}
	}
	now := time.Now().UnixNano()
	s.wmu.Lock()
	s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := fmt.Fprintf(s.conn, "time %d\n", now)
	s.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("session time on vm %s: %w", s.vm, err)
	}
	want := "ok time " + strconv.FormatInt(now, 10)
	for {
		select {
		case line := <-s.times:
			if line == want {
				return nil
			}
			if strings.HasPrefix(line, "err") {
				return fmt.Errorf("session time on vm %s: guest says %q", s.vm, line)
			}
		case <-s.closed:
			return fmt.Errorf("session time on vm %s: channel closed", s.vm)
		case <-ctx.Done():
			return fmt.Errorf("session time on vm %s: %w", s.vm, ErrTimeout)
		}
	}
}
