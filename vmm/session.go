package vmm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
//
// The guest is not trusted: a line longer than maxSessionLine is dropped
// (the channel stays), and when the connection breaks while the VM lives
// the host side dials again.
type session struct {
	vm   string
	sock string

	mu   sync.Mutex // guards conn; held for writes
	conn net.Conn

	ready  chan struct{}
	times  chan string // replies to "time"
	closed chan struct{}
	once   sync.Once
}

// maxSessionLine bounds one line from the guest; real lines are a few dozen
// bytes.
const maxSessionLine = 4096

// Redial backoff of a broken session channel.
const (
	sessionRedialMin = 50 * time.Millisecond
	sessionRedialMax = time.Second
)

// dialSession connects to the VM's session socket, retrying while QEMU is
// still creating it. died is polled so a QEMU that exits fails fast.
func dialSession(ctx context.Context, vm, sock string, died func() error) (*session, error) {
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sock)
		if err == nil {
			s := &session{vm: vm, sock: sock, conn: conn, ready: make(chan struct{}, 1), times: make(chan string, 4), closed: make(chan struct{})}
			go s.run(conn)
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect session channel %s: %w", sock, ErrTimeout)
		}
		if derr := died(); derr != nil {
			return nil, derr
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run reads conn until it breaks, then redials until the session is closed.
func (s *session) run(conn net.Conn) {
	for {
		s.read(conn)
		conn.Close()
		if conn = s.redial(); conn == nil {
			return
		}
	}
}

func (s *session) redial() net.Conn {
	delay := sessionRedialMin
	for {
		select {
		case <-s.closed:
			return nil
		case <-time.After(delay):
		}
		conn, err := net.DialTimeout("unix", s.sock, time.Second)
		if err == nil {
			s.mu.Lock()
			select {
			case <-s.closed:
				s.mu.Unlock()
				conn.Close()
				return nil
			default:
			}
			s.conn = conn
			s.mu.Unlock()
			return conn
		}
		delay = min(2*delay, sessionRedialMax)
	}
}

// read handles the guest's lines until conn breaks.
func (s *session) read(conn net.Conn) {
	r := bufio.NewReaderSize(conn, maxSessionLine)
	for {
		line, err := readLine(r)
		if errors.Is(err, errLineTooLong) {
			continue
		}
		if err != nil {
			return
		}
		s.handle(strings.TrimSpace(line))
	}
}

var errLineTooLong = errors.New("session line too long")

// readLine reads one line of at most r's buffer size; a longer line is
// consumed to its end and reported as errLineTooLong.
func readLine(r *bufio.Reader) (string, error) {
	b, err := r.ReadSlice('\n')
	if err == nil {
		return string(bytes.TrimSuffix(b, []byte("\n"))), nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if err == io.EOF && len(b) > 0 {
			return "", io.ErrUnexpectedEOF
		}
		return "", err
	}
	for errors.Is(err, bufio.ErrBufferFull) {
		_, err = r.ReadSlice('\n')
	}
	if err != nil {
		return "", err
	}
	return "", errLineTooLong
}

func (s *session) handle(line string) {
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

func (s *session) close() {
	s.once.Do(func() {
		s.mu.Lock()
		close(s.closed)
		s.conn.Close()
		s.mu.Unlock()
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
	var now int64
	for {
		now = time.Now().UnixNano()
		s.mu.Lock()
		s.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := fmt.Fprintf(s.conn, "time %d\n", now)
		s.mu.Unlock()
		if err == nil {
			break
		}
		// A broken channel is being redialled; setting the clock again is
		// harmless, so wait for the new connection within ctx.
		select {
		case <-s.closed:
			return fmt.Errorf("session time on vm %s: channel closed", s.vm)
		case <-ctx.Done():
			return fmt.Errorf("session time on vm %s: %w (last: %v)", s.vm, ErrTimeout, err)
		case <-time.After(sessionRedialMin):
		}
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
