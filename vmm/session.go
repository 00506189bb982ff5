package vmm

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// waitSessionReady connects to the VM's org.deskfarm.session.0 channel and
// waits for the guest's "ready" line. The guest session writes it once its
// desktop is drawn; polling the screen is no signal, since panel clocks keep
// redrawing it. died is polled so a QEMU that exits during boot fails fast.
func waitSessionReady(ctx context.Context, sock string, died func() error) error {
	var conn net.Conn
	var err error
	for conn == nil {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", sock)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("connect session channel %s: %w", sock, ErrTimeout)
			}
			if derr := died(); derr != nil {
				return derr
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer conn.Close()

	lines := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "ready" {
				lines <- nil
				return
			}
		}
		lines <- fmt.Errorf("session channel %s closed before ready: %v", sock, sc.Err())
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-lines:
			return err
		case <-ctx.Done():
			conn.Close()
			return fmt.Errorf("wait for session ready on %s: %w", sock, ErrTimeout)
		case <-tick.C:
			if err := died(); err != nil {
				return err
			}
		}
	}
}
