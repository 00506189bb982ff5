package web

// Live frames for browsers: GET /v1/vms/{id}/stream upgrades to a websocket
// that carries the VM's desktop as binary frame messages. The frames, their
// format and the hub that encodes them once for every viewer belong to
// package desk (hub.go there); this file is the websocket end: limits,
// handshake, pings, and a writer per viewer that always sends the newest
// state, so a slow viewer skips states and never holds up others.

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

// MaxStreamFPS caps the frames a viewer gets per second.
const MaxStreamFPS = desk.MaxStreamFPS

// Websocket limits.
const (
	// wsWriteTimeout bounds one websocket write; a viewer that cannot take
	// a frame in this time is dropped.
	wsWriteTimeout = 5 * time.Second
	// wsHandshakeTimeout bounds the upgrade response.
	wsHandshakeTimeout = 10 * time.Second
	// wsPongWait is how long a viewer may stay silent (no pong) before it
	// is taken for dead; pings go every wsPingEvery.
	wsPongWait  = 30 * time.Second
	wsPingEvery = 10 * time.Second
)

// Viewer connection caps (Options.MaxViewersPerVM, Options.MaxViewers),
// counting frame streams, activity feeds and VNC takeover connections. A
// viewer costs a goroutine pair and a socket, and its frames are shared, so
// the caps guard against a swarm of idle connections, not against work.
const (
	DefaultMaxViewersPerVM = 32
	DefaultMaxViewers      = 512
)

// upgrader accepts websockets from pages of this server only.
var upgrader = websocket.Upgrader{
	HandshakeTimeout: wsHandshakeTimeout,
	ReadBufferSize:   4096,
	WriteBufferSize:  64 << 10,
	Subprotocols:     []string{"binary"},
	CheckOrigin:      checkOrigin, // security.go
}

// viewerLimits counts open viewer connections per VM and in all.
type viewerLimits struct {
	perVM, total int

	mu    sync.Mutex
	byVM  map[string]int
	count int
}

func newViewerLimits(perVM, total int) *viewerLimits {
	if perVM <= 0 {
		perVM = DefaultMaxViewersPerVM
	}
	if total <= 0 {
		total = DefaultMaxViewers
	}
	return &viewerLimits{perVM: perVM, total: total, byVM: map[string]int{}}
}

// acquire takes a slot for a viewer of vm id, or refuses with 429.
func (l *viewerLimits) acquire(id string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byVM[id] >= l.perVM:
		return nil, &httpError{status: http.StatusTooManyRequests, code: api.CodeTooManyViewers,
			msg: fmt.Sprintf("vm %s already has %d viewer connections (the limit)", id, l.perVM)}
	case l.count >= l.total:
		return nil, &httpError{status: http.StatusTooManyRequests, code: api.CodeTooManyViewers,
			msg: fmt.Sprintf("the farm already has %d viewer connections (the limit)", l.total)}
	}
	l.byVM[id]++
	l.count++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.count--
			if l.byVM[id]--; l.byVM[id] <= 0 {
				delete(l.byVM, id)
			}
		})
	}, nil
}

// capped holds a viewer slot of the VM for as long as h runs: a websocket
// or event-stream handler returns when its connection ends.
func (s *server) capped(h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		release, err := s.viewers.acquire(r.PathValue("id"))
		if err != nil {
			noteVM(r, r.PathValue("id"))
			return err
		}
		defer release()
		return h(w, r)
	}
}

// cappedVM is capped for a VM row, whose target names the VM.
func (s *server) cappedVM(h targetHandler) targetHandler {
	return func(w http.ResponseWriter, r *http.Request, t target) error {
		release, err := s.viewers.acquire(t.vm)
		if err != nil {
			return err
		}
		defer release()
		return h(w, r, t)
	}
}

// stream serves GET /v1/vms/{id}/stream?fps=N and the episode's
// /v1/episodes/{id}/stream: the frame websocket. An episode's stream ends
// with the episode (its target's context), a cluster's reaches the episode
// through any agent (proxied, cluster.go).
func (s *server) stream(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := t.vm
	fps := 0
	if q := r.URL.Query().Get("fps"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > MaxStreamFPS {
			return invalidf("fps", "%q: want 1 to %d", q, MaxStreamFPS)
		}
		fps = n
	}
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	v, err := d.Watch(fps)
	if err != nil {
		return err
	}
	defer v.Close()
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // Upgrade answered the client
	}
	s.serveViewer(t.ctx, d, v, conn)
	return nil
}

// serveViewer streams frames to conn until it goes away, the desk closes
// (then the close message says why) or ctx ends (an episode's stream at
// the episode's end).
func (s *server) serveViewer(ctx context.Context, d *desk.Desk, v *desk.Viewer, conn *websocket.Conn) {
	defer conn.Close()
	id := d.VM
	s.log.Debug("viewer joined", "vm", id, "op", "stream", "remote", conn.RemoteAddr().String(), "min_gap", v.MinGap())

	// Reader: answers pings, notices a closed or dead viewer.
	gone := make(chan struct{})
	conn.SetReadLimit(4096)
	conn.SetReadDeadline(time.Now().Add(wsPongWait)) //nolint:errcheck // fails only on a closed conn
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(wsPongWait)) })
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()

	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	var lastSent time.Time
	for {
		select {
		case <-gone:
			return
		case <-ctx.Done():
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "episode ended"), time.Now().Add(time.Second)) //nolint:errcheck // best effort
			return
		case <-v.Done():
			reason := "stream ended"
			if err := d.Err(); err != nil {
				reason = err.Error()
			}
			if len(reason) > 120 { // a close frame's reason fits 123 bytes
				reason = reason[:120]
			}
			conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, reason), time.Now().Add(time.Second)) //nolint:errcheck // best effort
			return
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteTimeout)); err != nil {
				return
			}
			continue
		case <-v.Wake():
		}
		if gap := v.MinGap(); gap > 0 {
			if wait := gap - time.Since(lastSent); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-v.Done():
					t.Stop()
					continue
				case <-gone:
					t.Stop()
					return
				}
			}
		}
		f, err := v.Next()
		if err != nil {
			s.log.Warn("frame for viewer", "vm", id, "op", "stream", "err", err)
			return
		}
		if f == nil {
			continue
		}
		conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout)) //nolint:errcheck // fails only on a closed conn
		if err := conn.WriteMessage(websocket.BinaryMessage, f.Data); err != nil {
			s.log.Debug("viewer gone", "vm", id, "op", "stream", "err", err)
			return
		}
		lastSent = time.Now()
	}
}
