package web

import (
	"net/http"
	"time"

	"github.com/deskfarm/deskfarm/desk"
)

// CodeHumanControl is the error code of an agent action refused because a
// person holds control of the VM (409, desk.ErrHumanControl).
const CodeHumanControl = "human_control"

// CodeDisplayClosed is the error code of a call on a VM display that closed
// under it: the VM died or was destroyed, or the farm is shutting down
// (410, desk.ErrClosed).
const CodeDisplayClosed = "display_closed"

func init() {
	sentinels = append([]sentinel{
		{desk.ErrHumanControl, http.StatusConflict, CodeHumanControl},
		{desk.ErrNotInControl, http.StatusForbidden, CodeForbidden},
		{desk.ErrClosed, http.StatusGone, CodeDisplayClosed},
	}, sentinels...)
}

// ControlResponse is the body of POST /v1/vms/{id}/control.
type ControlResponse struct {
	// ControlToken grants input: pass it as ?control_token= to the VNC
	// websocket (GET /v1/vms/{id}/vnc). It is valid until DELETE
	// /v1/vms/{id}/control, another POST, or a reset of the VM.
	ControlToken string    `json:"control_token"`
	Since        time.Time `json:"since"`
}

// ControlStatus is the body of GET /v1/vms/{id}/control.
type ControlStatus struct {
	Human bool       `json:"human"`
	Since *time.Time `json:"since,omitempty"`
}

// mayTakeControl is the gate in front of desk.Desk.TakeControl, the one way
// control is taken. Today every authenticated client may; the viewer token
// (issue 9) is refused here.
func (s *server) mayTakeControl(r *http.Request) error { return nil }

func (s *server) takeControl(w http.ResponseWriter, r *http.Request) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	if err := s.mayTakeControl(r); err != nil {
		return err
	}
	d, err := s.desks.Get(r.Context(), vmID(r))
	if err != nil {
		return err
	}
	g, err := d.TakeControl()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, ControlResponse{ControlToken: g.Token, Since: g.Since})
	return nil
}

func (s *server) controlStatus(w http.ResponseWriter, r *http.Request) error {
	st := ControlStatus{}
	if since, ok := s.control.human(vmID(r)); ok {
		st.Human, st.Since = true, &since
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *server) releaseControl(w http.ResponseWriter, r *http.Request) error {
	if d := s.peek(vmID(r)); d != nil {
		d.ReleaseControl()
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// releaseOnDisconnect wraps proxy.go's handler, which returns when its
// connection ends: whatever the person held down through it is released,
// unless control changed hands meanwhile (then it was released already).
// It goes away when proxy.go moves onto desk.Takeover.
func (s *server) releaseOnDisconnect(h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		err := h(w, r)
		if token := r.URL.Query().Get("control_token"); token != "" {
			if d := s.peek(r.PathValue("id")); d != nil {
				d.HumanDisconnected(token)
			}
		}
		return err
	}
}

// peek returns vm id's open desk, if any, without dialling.
func (s *server) peek(id string) *desk.Desk {
	if s.desks == nil {
		return nil
	}
	return s.desks.Peek(id)
}

// controls answers control questions about a VM from its desk; a VM
// without an open desk has no person in control.
type controls struct{ desks *desk.Pool }

func (c controls) desk(id string) *desk.Desk {
	if c.desks == nil {
		return nil
	}
	return c.desks.Peek(id)
}

// valid reports whether token is vm id's current control token.
func (c controls) valid(id, token string) bool {
	d := c.desk(id)
	return d != nil && d.ValidControl(token)
}

// human reports whether a person holds vm id, and since when.
func (c controls) human(id string) (time.Time, bool) {
	if d := c.desk(id); d != nil {
		return d.Human()
	}
	return time.Time{}, false
}
