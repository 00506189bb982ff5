package web

import "net/http"

// Authenticate returns the API's authentication (token and trusted
// networks, as Options says) as a middleware, for other listeners that
// follow the same rules: OSWorld's per-VM ports (osworld.Ports.Wrap).
func Authenticate(opts Options) func(http.Handler) http.Handler {
	s := &server{log: opts.Logger, token: opts.Token, trusted: opts.TrustedNets}
	if s.trusted == nil {
		s.trusted = DefaultTrustedNets
	}
	return s.authenticate
}
