package atspi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/deskfarm/deskfarm/guestx"
)

// session is one connection to a guest's accessibility bus: the VM's port,
// the relay in the guest, the bus's D-Bus connection and the
// applications' sockets (peers) opened on it.
type session struct {
	conn      net.Conn
	relay     chan relayResult
	stopRelay context.CancelFunc
	detached  bool // the relay forked away from its exec (keep.go)
	mx        *mux
	bus       *dbus.Conn
	uid       string

	mu       sync.Mutex
	keepPeer bool                  // peers stay open for the session's life
	peerConn map[string]*dbus.Conn // by address, when keepPeer
}

// openSession connects to vm's port, starts the relay and says hello on
// the bus. With events non-nil the session is kept (keep.go): the relay
// forks away from its exec once its hello is written, the bus connection
// hands every signal to events, and applications' sockets stay open
// between walks.
func openSession(ctx context.Context, g Guest, vm string, events dbus.SignalHandler) (s *session, err error) {
	conn, err := g.DialA11y(ctx, vm)
	if err != nil {
		return nil, err
	}
	s = &session{conn: conn, relay: make(chan relayResult, 1), detached: events != nil, keepPeer: events != nil, peerConn: map[string]*dbus.Conn{}}
	// The host must be connected before the relay starts: the guest reads
	// end-of-file on a port no host holds.
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d) // a stalled guest cannot outlast the walk
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	nonce := hex.EncodeToString(nb[:])
	argv := []string{"python3", "-", nonce}
	timeout := Timeout
	if s.detached {
		argv = append(argv, strconv.Itoa(int(keepMax/time.Second)))
	}
	req, err := guestx.Request(guestx.Cmd{Argv: argv, Stdin: relayScript, Timeout: timeout})
	if err != nil {
		conn.Close()
		return nil, err
	}
	// Root opens the port as fd 3, then guestx becomes the desktop user
	// (the bus takes only its user's connections), keeping fd 3.
	// A relay that was killed, or a kept one reading its end, may hold
	// the port for a moment more: the open is tried for up to 5 s (true,
	// a regular builtin: a failed redirection on exec would end the
	// shell) before the real one.
	req.Argv = append([]string{"sh", "-c", portOpen, portPath}, req.Argv...)
	rctx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	s.stopRelay = stopRelay
	go func() {
		res, err := g.Exec(rctx, vm, req)
		s.relay <- relayResult{res, err}
	}()
	defer func() {
		if err != nil {
			s.close()
		}
	}()

	hello := make(chan helloResult, 1)
	go func() {
		uid, err := readHello(byteReader{conn}, nonce)
		hello <- helloResult{uid, err}
	}()
	relay := s.relay
	for s.uid == "" {
		select {
		case h := <-hello:
			if h.err != nil {
				return s, relayFailed(s.relay, h.err)
			}
			s.uid = h.uid
		case r := <-relay:
			s.relay <- r // for close's wait
			if s.detached && r.err == nil && r.res.ExitCode == 0 {
				relay = nil // forked after its hello, which is on its way
				continue
			}
			return s, r.failure()
		case <-ctx.Done():
			return s, ctx.Err()
		}
	}
	// godbus closes its stream on bus.Close, which close runs first: the
	// bus channel's close ends the relay's bus connection, and the port
	// stays ours until the relay has exited.
	mx, busChan := newMux(conn)
	s.mx = mx
	var opts []dbus.ConnOption
	if events != nil {
		opts = append(opts, dbus.WithSignalHandler(events))
	}
	bus, err := dbus.NewConn(busChan, opts...)
	if err != nil {
		return s, err
	}
	s.bus = bus
	if err := bus.Auth([]dbus.Auth{dbus.AuthExternal(s.uid)}); err != nil {
		return s, fmt.Errorf("authenticate on the accessibility bus: %w", err)
	}
	if err := bus.Hello(); err != nil {
		return s, fmt.Errorf("hello on the accessibility bus: %w", err)
	}
	if s.detached {
		_ = conn.SetDeadline(time.Time{}) // the session outlives this walk
	}
	return s, nil
}

// peers connects to an application's own socket at addr (Peers); a kept
// session keeps the connection for its next walks.
func (s *session) peers(ctx context.Context, addr string) (*dbus.Conn, error) {
	if s.keepPeer {
		s.mu.Lock()
		c := s.peerConn[addr]
		s.mu.Unlock()
		if c != nil && c.Connected() {
			return c, nil
		}
	}
	p, err := peerPath(addr)
	if err != nil {
		return nil, err
	}
	ch, err := s.mx.open(p)
	if err != nil {
		return nil, err
	}
	c, err := authPeer(ctx, ch, s.uid)
	if err != nil || !s.keepPeer {
		return c, err
	}
	s.mu.Lock()
	if old := s.peerConn[addr]; old != nil {
		old.Close()
	}
	s.peerConn[addr] = c
	s.mu.Unlock()
	return c, nil
}

// alive is false once the port or the relay has gone.
func (s *session) alive() bool {
	if s.mx.closed() || !s.bus.Connected() {
		return false
	}
	if s.detached {
		return true // its exec ended at the fork
	}
	select {
	case r := <-s.relay:
		s.relay <- r
		return false
	default:
		return true
	}
}

// close ends the session and leaves nothing in the guest: the relay reads
// end-of-file and exits. A relay still under its exec is waited for, up
// to 5 s, and then killed (the exec's context), so that a next walk's
// relay finds the port free; a kept relay, forked away, exits on its own
// (the next relay's open waits for it, portOpen).
func (s *session) close() {
	// A write stuck on a guest that stopped reading (a kept session has
	// no deadline) would hold the port's frames, and the closes below
	// write frames too.
	_ = s.conn.SetDeadline(time.Now().Add(5 * time.Second))
	s.mu.Lock()
	peers := s.peerConn
	s.peerConn = map[string]*dbus.Conn{}
	s.mu.Unlock()
	for _, c := range peers {
		c.Close()
	}
	if s.bus != nil {
		s.bus.Close()
	}
	if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		s.conn.Close()
	}
	select {
	case <-s.relay:
	case <-time.After(5 * time.Second):
		s.stopRelay() // Exec kills it
		<-s.relay
	}
	s.stopRelay()
	s.conn.Close()
}
