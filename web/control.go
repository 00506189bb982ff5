package web

import (
	"net/http"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

// The control bodies are wire types (package api).
type (
	ControlResponse = api.ControlResponse
	ControlStatus   = api.ControlStatus
)

// mayTakeControl is the gate in front of desk.Desk.TakeControl, the one way
// control is taken. Today every authenticated client may; the viewer token
// is refused before it, by the route's row (routes.go).
func (s *server) mayTakeControl(r *http.Request) error { return nil }

// takeControl serves POST /v1/vms/{id}/control; its row is a mutating
// one, so an unleased pool VM refuses it and a taken one is touched.
func (s *server) takeControl(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	if err := s.mayTakeControl(r); err != nil {
		return err
	}
	d, err := s.desks.Get(r.Context(), t.vm)
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

func (s *server) controlStatus(w http.ResponseWriter, r *http.Request, t target) error {
	st := ControlStatus{}
	if d := s.peek(t.vm); d != nil {
		if since, ok := d.Human(); ok {
			st.Human, st.Since = true, &since
		}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *server) releaseControl(w http.ResponseWriter, r *http.Request, t target) error {
	if d := s.peek(t.vm); d != nil {
		d.ReleaseControl()
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// peek returns vm id's open desk, if any, without dialling.
func (s *server) peek(id string) *desk.Desk {
	if s.desks == nil {
		return nil
	}
	return s.desks.Peek(id)
}
