package vmm

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// a11ySockName is the host's end of a VM's accessibility port, in its dir.
const a11ySockName = "a11y.sock"

// DialA11y connects to vm's accessibility port: the virtio-serial port
// org.deskfarm.a11y.0, a byte stream to whatever the guest joins to it
// (package atspi runs a relay to the desktop's AT-SPI bus there, so the
// walk runs on the host rather than in the guest's slow CPU). The port
// takes one connection at a time: a second caller waits until the first
// connection is closed, or for its ctx. CloseWrite ends the stream but
// holds the port until Close. VMs made before hardware version 3
// have no port (ErrInvalid, saying so).
func (m *Manager) DialA11y(ctx context.Context, id string) (net.Conn, error) {
	mc, _, err := m.ready(id, "accessibility")
	if err != nil {
		return nil, err
	}
	gate := mc.a11yGate()
	mc.op.RUnlock()
	sock := filepath.Join(mc.spec.Dir, a11ySockName)
	if _, err := os.Stat(sock); err != nil {
		return nil, fmt.Errorf("vm %s has no accessibility port (it was made before hardware version 3; a new VM has one): %w", id, ErrInvalid)
	}
	select {
	case gate <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("accessibility port of vm %s: busy with another walk until %w", id, ctx.Err())
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		<-gate
		return nil, fmt.Errorf("accessibility port of vm %s: %w", id, err)
	}
	return &gatedConn{Conn: c, release: sync.OnceFunc(func() { <-gate })}, nil
}

// a11yGate is mc's one-connection gate of its accessibility port.
func (mc *machine) a11yGate() chan struct{} {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.a11y == nil {
		mc.a11y = make(chan struct{}, 1)
	}
	return mc.a11y
}

// gatedConn gives its gate back when closed.
type gatedConn struct {
	net.Conn
	release func()
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// CloseWrite ends the host's side of the stream and keeps the gate: QEMU
// then drops the connection, the guest sees the port's host go, and what
// ran there can finish before the next caller's may open the port (a
// virtio-serial port opens once at a time in the guest).
func (c *gatedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
