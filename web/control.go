package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/api"
)

// The control bodies are wire types (package api).
type (
	ControlResponse = api.ControlResponse
	ControlStatus   = api.ControlStatus
)

// controls tracks which VMs a person has taken over. A VM has at most one
// control token at a time.
type controls struct {
	mu   sync.Mutex
	held map[string]controlGrant
}

type controlGrant struct {
	token string
	since time.Time
}

func newControls() *controls { return &controls{held: map[string]controlGrant{}} }

// take grants control of vm id, replacing any earlier grant (taking over
// from another browser tab is one more explicit step, not an error).
func (c *controls) take(id string) (controlGrant, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return controlGrant{}, fmt.Errorf("take control of vm %s: %w", id, err)
	}
	g := controlGrant{token: hex.EncodeToString(b), since: time.Now()}
	c.mu.Lock()
	c.held[id] = g
	c.mu.Unlock()
	return g, nil
}

// release hands vm id back to the agent.
func (c *controls) release(id string) {
	c.mu.Lock()
	delete(c.held, id)
	c.mu.Unlock()
}

// human reports whether a person holds vm id, and since when.
func (c *controls) human(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.held[id]
	return g.since, ok
}

// valid reports whether token is vm id's current control token.
func (c *controls) valid(id, token string) bool {
	if token == "" {
		return false
	}
	c.mu.Lock()
	g, ok := c.held[id]
	c.mu.Unlock()
	return ok && subtle.ConstantTimeCompare([]byte(g.token), []byte(token)) == 1
}

func (s *server) takeControl(w http.ResponseWriter, r *http.Request) error {
	id := vmID(r)
	if _, err := s.farm.Get(r.Context(), id); err != nil {
		return err
	}
	g, err := s.control.take(id)
	if err != nil {
		return err
	}
	s.log.Info("human took control", "vm", id, "op", "control")
	writeJSON(w, http.StatusCreated, ControlResponse{ControlToken: g.token, Since: g.since})
	return nil
}

func (s *server) controlStatus(w http.ResponseWriter, r *http.Request) error {
	id := vmID(r)
	st := ControlStatus{}
	if since, ok := s.control.human(id); ok {
		st.Human, st.Since = true, &since
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

func (s *server) releaseControl(w http.ResponseWriter, r *http.Request) error {
	id := vmID(r)
	s.control.release(id)
	s.log.Info("control handed back to the agent", "vm", id, "op", "control")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// agentInput refuses h while a person holds the VM's control.
func (s *server) agentInput(h apiHandler) apiHandler {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if since, ok := s.control.human(id); ok {
			noteVM(r, id)
			return &httpError{status: http.StatusConflict, code: CodeHumanControl,
				msg: fmt.Sprintf("actions on vm %s: a person has controlled it since %s; "+
					"retry after they hand it back (DELETE /v1/vms/%s/control)", id, since.Format(time.RFC3339), id)}
		}
		return h(w, r)
	}
}
