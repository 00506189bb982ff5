package vmm

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// guestEnd accepts session connections on sock and hands them to the test.
func guestEnd(t *testing.T, sock string) <-chan net.Conn {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	conns := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	return conns
}

func acceptWithin(t *testing.T, conns <-chan net.Conn, d time.Duration) net.Conn {
	t.Helper()
	select {
	case c := <-conns:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(d):
		t.Fatalf("no session connection within %s", d)
		return nil
	}
}

// answerTime plays the guest's side of "time".
func answerTime(c net.Conn) {
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if ns, ok := strings.CutPrefix(sc.Text(), "time "); ok {
			fmt.Fprintf(c, "ok time %s\n", ns)
		}
	}
}

// A hostile guest's overlong line is dropped; the lines after it still count.
func TestSessionDropsOverlongLine(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	conns := guestEnd(t, sock)
	s, err := dialSession(context.Background(), "vm1", sock, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	c := acceptWithin(t, conns, time.Second)
	fmt.Fprintf(c, "%s\nready\n", strings.Repeat("x", 10*maxSessionLine))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.waitReady(ctx, func() error { return nil }); err != nil {
		t.Fatalf("ready after an overlong line: %v", err)
	}
	select {
	case <-conns:
		t.Fatal("the overlong line broke the connection")
	default:
	}
}

// When the channel breaks while the VM lives, the host dials again and the
// clock can still be set.
func TestSessionRedials(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	conns := guestEnd(t, sock)
	s, err := dialSession(context.Background(), "vm1", sock, func() error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	acceptWithin(t, conns, time.Second).Close()
	c := acceptWithin(t, conns, 2*time.Second)
	go answerTime(c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.setTime(ctx); err != nil {
		t.Fatalf("set time after redial: %v", err)
	}
	s.close()
	select {
	case <-conns:
		t.Fatal("dialled again after close")
	case <-time.After(3 * sessionRedialMin):
	}
}
