package web

import (
	"fmt"
	"net/http"

	"github.com/deskfarm/deskfarm/api"
)

// Authenticate returns the API's guards as a middleware, for the farm's
// other listeners: OSWorld's per-VM ports (osworld.Ports.Wrap). It applies
// the same rules as the API: the Host allowlist (DNS rebinding), browser
// requests from other sites refused (Origin, Sec-Fetch-Site), the token or
// a trusted network, and the control token only: everything on those ports
// drives the VM, so a viewer token is refused. Bodies are not held to JSON:
// OSWorld's clients send forms and multipart uploads, and a page cannot
// send those cross-site without an Origin the guard refuses.
func Authenticate(opts Options) func(http.Handler) http.Handler {
	s := &server{log: opts.Logger, token: opts.Token, trusted: opts.TrustedNets,
		viewerToken: opts.ViewerToken, hosts: parseHosts(opts.AllowedHosts)}
	if s.trusted == nil {
		s.trusted = DefaultTrustedNets
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			setSecurityHeaders(w.Header())
			if err := s.checkHost(r); err != nil {
				writeError(w, r, err)
				return
			}
			if err := s.checkOrigin(r); err != nil {
				writeError(w, r, err)
				return
			}
			a, err := s.authenticate(r, accessControl)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="deskfarm"`)
				writeError(w, r, err)
				return
			}
			if a.role == roleViewer {
				writeError(w, r, &httpError{status: http.StatusForbidden, code: api.CodeViewerToken,
					msg: fmt.Sprintf("this is a viewer token: %s %s drives the VM and needs the control token", r.Method, r.URL.Path)})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// checkOrigin refuses a browser request from a page of another site, of
// any method: the Origin check of checkCrossSite without its body rules.
func (s *server) checkOrigin(r *http.Request) error {
	if origin := r.Header.Get("Origin"); origin != "" && !s.allowedOrigin(r, origin) {
		return &httpError{status: http.StatusForbidden, code: api.CodeCrossSite,
			msg: fmt.Sprintf("refused a cross-site request: %s %s from a page of %s (its Origin)", r.Method, r.URL.Path, origin)}
	}
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return &httpError{status: http.StatusForbidden, code: api.CodeCrossSite,
			msg: fmt.Sprintf("refused a cross-site request: %s %s from a page of another site (Sec-Fetch-Site: cross-site)", r.Method, r.URL.Path)}
	}
	return nil
}
