package web

// The takeover path: GET /v1/vms/{id}/vnc upgrades to a websocket that
// speaks RFB to noVNC. The RFB server is vnc.Server, fed from the VM's
// shared vnc.Client mirror: viewers never open their own connection to
// QEMU, so every VM keeps exactly one VNC connection. This file only
// adapts: it checks the control token, upgrades, turns the websocket into
// a byte stream and decides, per input event, whether the connection still
// holds the VM's control.
//
// Input reaches vnc.Client.Key and Pointer only while the connection
// presents the VM's current control token (?control_token=, from POST
// /v1/vms/{id}/control). Without it the connection is read-only whatever
// the browser does (noVNC's viewOnly flag is enforced only in the
// browser); when the token stops being current, vnc.Server releases the
// keys and buttons the person held.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vnc"
)

// vncProxy serves GET /v1/vms/{id}/vnc[?control_token=T] and the
// episode's /v1/episodes/{id}/vnc, which ends with the episode.
func (s *server) vncProxy(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := t.vm
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	// A stale token is refused before the upgrade, with a clear 403; ""
	// opens a read-only connection.
	tk, err := d.Takeover(r.URL.Query().Get("control_token"))
	if err != nil {
		return err
	}
	defer tk.Close() // releases every key and button the person holds
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // Upgrade answered the client
	}
	s.serveRFB(t.ctx, id, d.Frames(), tk, conn)
	return nil
}

// serveRFB runs vnc.Server on conn until either side goes away.
func (s *server) serveRFB(ctx context.Context, id string, frames desk.FrameSource, tk *desk.Takeover, conn *websocket.Conn) {
	srv := &vnc.Server{
		Source:       frames,
		Input:        takeoverInput{tk},
		InputAllowed: tk.InControl,
		WriteTimeout: wsWriteTimeout,
		VM:           id,
		Log:          s.log,
	}
	mode := "read-only"
	if tk.InControl() {
		mode = "control"
	}
	start := time.Now()
	s.log.Info("vnc viewer connected", "vm", id, "op", "vnc_proxy", "mode", mode, "remote", conn.RemoteAddr().String())
	st, err := srv.Serve(ctx, &wsStream{conn: conn})
	s.log.Info("vnc viewer disconnected", "vm", id, "op", "vnc_proxy", "mode", mode,
		"duration", time.Since(start).Round(time.Millisecond), "updates", st.Updates,
		"forwarded", st.Forwarded, "dropped", st.Dropped, "released", st.Released, "err", err)
}

// takeoverInput adapts a desk.Takeover to vnc.InputSink (argument order).
type takeoverInput struct{ t *desk.Takeover }

func (i takeoverInput) Key(down bool, keysym uint32) error { return i.t.Key(keysym, down) }
func (i takeoverInput) Pointer(x, y int, buttons uint8) error {
	return i.t.Pointer(x, y, buttons)
}

// wsStream makes a websocket a byte stream for vnc.Server: binary messages
// in, one binary message per Write out. A normal close from the browser
// reads as io.EOF.
type wsStream struct {
	conn *websocket.Conn
	r    io.Reader
}

func (s *wsStream) Read(p []byte) (int, error) {
	for {
		if s.r == nil {
			_, r, err := s.conn.NextReader()
			if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
				return 0, io.EOF
			}
			if err != nil {
				return 0, err
			}
			s.r = r
		}
		n, err := s.r.Read(p)
		if errors.Is(err, io.EOF) {
			s.r = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (s *wsStream) Write(p []byte) (int, error) {
	if err := s.conn.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *wsStream) Close() error                       { return s.conn.Close() }
func (s *wsStream) SetReadDeadline(t time.Time) error  { return s.conn.SetReadDeadline(t) }
func (s *wsStream) SetWriteDeadline(t time.Time) error { return s.conn.SetWriteDeadline(t) }
