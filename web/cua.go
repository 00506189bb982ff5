package web

import (
	"net/http"

	"github.com/deskfarm/deskfarm/cua"
)

// cua serves Cua's computer-server protocol for the target's VM under
// .../cua/ (package cua). Cua's Computer keeps the path prefix of its
// api_base_url, so one farm port serves every VM.
func (s *server) cua(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return err
	}
	h := cua.NewHandler(cua.Target{VM: t.vm, Runner: d, Screen: d, Guest: cua.FarmGuest{Farm: s.farm, VM: t.vm}},
		cua.Options{CheckOrigin: checkOrigin, Log: s.log})
	r2 := r.WithContext(t.ctx)
	u := *r.URL // WithContext shares the URL, which the request log reads
	u.Path, u.RawPath = "/"+r.PathValue("path"), ""
	r2.URL = &u
	h.ServeHTTP(w, r2)
	return nil
}
