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
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/vnc"
)

// vncProxy serves GET /v1/vms/{id}/vnc[?control_token=T].
func (s *server) vncProxy(w http.ResponseWriter, r *http.Request) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	id := vmID(r)
	token := r.URL.Query().Get("control_token")
	if token != "" && !s.control.valid(id, token) {
		return &httpError{status: http.StatusForbidden, code: CodeForbidden,
			msg: fmt.Sprintf("vnc of vm %s: the control token is not the current one (take control again)", id)}
	}
	d, err := s.desks.Get(r.Context(), id)
	if err != nil {
		return err
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return nil // Upgrade answered the client
	}
	s.serveRFB(r, id, clientScreen{d.Display}, conn, token)
	return nil
}

// CodeForbidden is the error code of a control token that is not (or no
// longer) the VM's current one (403).
const CodeForbidden = "forbidden"

// serveRFB runs vnc.Server on conn until either side goes away.
func (s *server) serveRFB(r *http.Request, id string, scr screen, conn *websocket.Conn, token string) {
	srv := &vnc.Server{
		Source:       scr,
		Input:        humanInput{s: s, id: id, scr: scr},
		InputAllowed: func() bool { return token != "" && s.control.valid(id, token) },
		WriteTimeout: wsWriteTimeout,
		VM:           id,
		Log:          s.log,
	}
	mode := "read-only"
	if token != "" {
		mode = "control"
	}
	start := time.Now()
	s.log.Info("vnc viewer connected", "vm", id, "op", "vnc_proxy", "mode", mode, "remote", conn.RemoteAddr().String())
	st, err := srv.Serve(r.Context(), &wsStream{conn: conn})
	s.log.Info("vnc viewer disconnected", "vm", id, "op", "vnc_proxy", "mode", mode,
		"duration", time.Since(start).Round(time.Millisecond), "updates", st.Updates,
		"forwarded", st.Forwarded, "dropped", st.Dropped, "released", st.Released, "err", err)
}

// humanInput passes a person's input to the VM's display and records
// presses for the live view's activity overlay.
type humanInput struct {
	s   *server
	id  string
	scr screen
}

func (h humanInput) Key(down bool, keysym uint32) error {
	err := h.scr.Key(keysym, 0, down)
	if down {
		ev := ActivityEvent{Time: time.Now(), Source: "human", Kind: "key_down"}
		if keysym >= 0x20 && keysym <= 0x7e {
			ev.Text = string(rune(keysym))
		} else {
			ev.Keys = []string{fmt.Sprintf("keysym 0x%x", keysym)}
		}
		h.s.activity.add(h.id, ev)
	}
	return err
}

func (h humanInput) Pointer(x, y int, buttons uint8) error {
	err := h.scr.Pointer(x, y, buttons)
	if buttons != 0 {
		h.s.activity.add(h.id, ActivityEvent{Time: time.Now(), Source: "human", Kind: "button_down",
			X: &x, Y: &y, Button: buttonName(buttons)})
	}
	return err
}

func buttonName(mask uint8) string {
	switch {
	case mask&1 != 0:
		return "left"
	case mask&2 != 0:
		return "middle"
	case mask&4 != 0:
		return "right"
	}
	return "wheel"
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
