package web

// The guards between the farm and the browser (issue 9). A farm on
// loopback is in reach of every web page its user opens: a browser sends a
// "simple" request (a POST of text/plain, a form, a websocket handshake)
// to any address without asking the server first, and a page served from
// a name the attacker later points at 127.0.0.1 (DNS rebinding) is, to the
// browser, of the same origin as the farm. Each request meets, in order:
//
//  1. headers: every answer forbids MIME sniffing, framing by other
//     origins (the take-control page cannot be clickjacked) and sending
//     the address, which may carry ?token=, as a Referer;
//  2. the Host check: only names of this farm reach any route, else 421;
//  3. the cross-site check: a state change (any method but GET and HEAD)
//     or a websocket handshake from a page of another origin gets 403, and
//     a body must declare the type its route's row takes, else 415;
//  4. authentication (middleware.go): trusted network, control token or
//     viewer token, else 401, unless the row is public;
//  5. the role check: a viewer token may call only the rows declared
//     watch, else 403.
//
// What each route takes and who may call it is declared on its row of the
// route table (routes.go); nothing here reads the URL to decide.
//
// The threat model and the test that proves each guard are in
// docs/security.md.

import (
	"context"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/api"
)

// Security headers sent with every answer.
const (
	// contentSecurityPolicy lets pages run only the farm's own scripts and
	// styles (noVNC included, served from /novnc/), talk only to the farm
	// ('self' covers ws: and wss: to the same host and port, CSP level 3),
	// and be framed only by the farm's own pages.
	contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
		"img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; " +
		"form-action 'self'; frame-ancestors 'self'"
)

// setSecurityHeaders sets the headers every answer carries, refusals
// included.
func setSecurityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "SAMEORIGIN") // for browsers without frame-ancestors
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	// A page opened with ?token= must not hand it to anyone as a Referer.
	h.Set("Referrer-Policy", "no-referrer")
	// Other origins may not embed screenshots or scripts (no-cors loads).
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// guard runs the checks above, then mux. It is the farm's whole handler
// chain short of the request log.
func (s *server) guard(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w.Header())
		// A request another agent proxied (cluster.go) passed that
		// agent's Host and cross-site checks; only the cluster token
		// says it did.
		proxied := s.hasClusterToken(r)
		if proxied {
			r = r.WithContext(context.WithValue(r.Context(), proxiedKey{}, true))
		} else if err := s.checkHost(r); err != nil {
			writeError(w, r, err)
			return
		}
		// The matched row of the route table (routes.go) declares the
		// body type and who may call it; the mux finds it without serving
		// it. A request that matches no row (404, 405) runs nothing but an
		// error answer: it needs a token, nothing more.
		h, _ := mux.Handler(r)
		rt, _ := h.(*routeHandler)
		p := policy{access: accessWatch, body: bodyNone}
		if rt != nil {
			p = rt.policy
		}
		if err := s.checkCrossSite(r, p.body, proxied); err != nil {
			writeError(w, r, err)
			return
		}
		need := p.needs(r)
		if need == accessCluster {
			s.serveCluster(w, r, mux, proxied)
			return
		}
		a, err := s.authenticate(r, need)
		if info := infoFrom(r); info != nil {
			info.auth = a.role.String()
		}
		if a.staleCookie {
			http.SetCookie(w, &http.Cookie{Name: cookieName(r), Path: "/", MaxAge: -1,
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="deskfarm"`)
			writeError(w, r, err)
			return
		}
		if a.role == roleViewer && need == accessControl {
			op := ""
			if rt != nil {
				op = " (" + rt.op + ")"
			}
			writeError(w, r, &httpError{status: http.StatusForbidden, code: api.CodeViewerToken,
				msg: fmt.Sprintf("this is a viewer token: it can watch, but %s %s%s needs the control token "+
					"(deskfarm serve --token, or the state dir's token file)", r.Method, r.URL.Path, op)})
			return
		}
		if a.fromQuery {
			// A browser opened a link with ?token= and the token was the
			// one checked: remember it in a cookie so that the page's own
			// requests (assets, websockets, the activity feed), which
			// cannot carry an Authorization header, pass too. The pages
			// drop ?token= from the address bar (assets/page.js).
			http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: a.token, Path: "/",
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
		}
		if q := r.URL.Query(); q.Has(tokenParam) {
			q.Del(tokenParam)
			r.URL.RawQuery = q.Encode()
		}
		ctx := context.WithValue(r.Context(), originCheckedKey{}, true)
		mux.ServeHTTP(w, r.WithContext(context.WithValue(ctx, callerKey{}, a)))
	})
}

// serveCluster serves a row of access cluster: only another agent, with
// the cluster token, may call it; no client token does, nor a trusted
// network.
func (s *server) serveCluster(w http.ResponseWriter, r *http.Request, mux *http.ServeMux, proxied bool) {
	if !proxied {
		w.Header().Set("WWW-Authenticate", `Bearer realm="deskfarm"`)
		writeError(w, r, unauthorized(fmt.Sprintf("%s %s is for the cluster's agents: it needs the cluster token "+
			"in the %s header (serve --cluster-token-file); client tokens do not open it", r.Method, r.URL.Path, ClusterTokenHeader)))
		return
	}
	if info := infoFrom(r); info != nil {
		info.auth = "cluster"
	}
	mux.ServeHTTP(w, r)
}

// checkHost refuses a request whose Host is not a name of this farm: the
// guard against DNS rebinding. It runs before authentication, since a
// rebinding page reaches the farm from loopback.
func (s *server) checkHost(r *http.Request) error {
	name, port := splitHost(r.Host, defaultPort(r))
	if s.allowedName(r, name, port) {
		return nil
	}
	msg := fmt.Sprintf("Host %q is not a name this farm answers to (a guard against DNS rebinding): "+
		"open it as http://%s/", r.Host, net.JoinHostPort("127.0.0.1", orDefault(servingPort(r), port)))
	if name != "" {
		msg += fmt.Sprintf(", or, if %s is this farm's name, start deskfarm serve with --allow-host %s", name, hostArg(name))
	}
	return &httpError{status: http.StatusMisdirectedRequest, code: api.CodeMisdirectedRequest, msg: msg}
}

// allowedName reports whether host name and port name this farm: a
// loopback name or the address the request came in on, with the port it
// came in on, or an Options.AllowedHosts entry.
func (s *server) allowedName(r *http.Request, name, port string) bool {
	name = strings.ToLower(name)
	for _, h := range s.hosts {
		if h.name == name && (h.port == "" || h.port == port) {
			return true
		}
	}
	if sp := servingPort(r); sp != "" && port != sp {
		return false
	}
	if name == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(name)
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	// An address literal cannot be rebound; the farm's own address is one
	// a client typed (a farm listening on 0.0.0.0, reached by its LAN IP).
	return ip.IsLoopback() || ip == localIP(r)
}

// checkCrossSite refuses a state change or websocket handshake that a
// browser sends for a page of another origin, and a body of a type its
// route does not take. Clients that are not browsers send neither Origin
// nor Sec-Fetch-Site and pass.
//
// A proxied request (cluster.go) had its Origin checked by the agent that
// proxied it; its body is still held to its row's type.
func (s *server) checkCrossSite(r *http.Request, body bodyKind, proxied bool) error {
	ws := websocket.IsWebSocketUpgrade(r)
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
		if !ws {
			return nil
		}
	}
	what := r.Method + " " + r.URL.Path
	if proxied {
		// Checked by the proxying agent.
	} else if origin := r.Header.Get("Origin"); origin != "" && !s.allowedOrigin(r, origin) {
		msg := fmt.Sprintf("refused a cross-site request: %s from a page of %s (its Origin); "+
			"only this farm's own pages may act on it from a browser", what, origin)
		if u, err := url.Parse(origin); err == nil && u.Hostname() != "" {
			msg += fmt.Sprintf(". If %s is this farm behind a proxy, start deskfarm serve with --allow-host %s",
				origin, hostArg(u.Hostname()))
		}
		return &httpError{status: http.StatusForbidden, code: api.CodeCrossSite, msg: msg}
	}
	// Sec-Fetch-Site is set by the browser and cannot be forged by a page.
	if !proxied && r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return &httpError{status: http.StatusForbidden, code: api.CodeCrossSite,
			msg: fmt.Sprintf("refused a cross-site request: %s from a page of another site (Sec-Fetch-Site: cross-site); "+
				"only this farm's own pages may act on it from a browser", what)}
	}
	if ws || r.ContentLength == 0 {
		return nil
	}
	want := body.mediaType()
	got := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(got); err == nil && mt == want {
		return nil
	}
	if got == "" {
		got = "none"
	} else {
		got = fmt.Sprintf("%q", got)
	}
	return &httpError{status: http.StatusUnsupportedMediaType, code: api.CodeUnsupportedMediaType,
		msg: fmt.Sprintf("%s: a body of Content-Type %s is not taken here: send Content-Type: %s "+
			"(curl: -H 'Content-Type: %s'). Web pages can send other types to any address without asking, "+
			"so the farm refuses them", what, got, want, want)}
}

// allowedOrigin reports whether a browser Origin is a page of this farm:
// an http(s) origin whose host and port pass allowedName. "null" (a
// sandboxed frame, a file:// page) never does.
func (s *server) allowedOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return false
	}
	def := "80"
	if u.Scheme == "https" {
		def = "443"
	}
	name, port := splitHost(u.Host, def)
	return s.allowedName(r, name, port)
}

// originCheckedKey marks a request whose Origin the guard accepted.
type originCheckedKey struct{}

// checkOrigin is the websocket upgrader's origin check: a request without
// an Origin (not from a browser) passes, one with an Origin passes when
// the guard checked it against the allowlist. Upgrade sites use it
// through the upgrader's CheckOrigin, never their own comparison with the
// Host, which the page chooses.
func checkOrigin(r *http.Request) bool {
	if r.Header.Get("Origin") == "" {
		return true
	}
	ok, _ := r.Context().Value(originCheckedKey{}).(bool)
	return ok
}

// hostRule is one Options.AllowedHosts entry; port "" matches any.
type hostRule struct{ name, port string }

// parseHosts turns Options.AllowedHosts into rules. An entry that is not
// NAME or NAME:PORT is kept whole as a name, which matches no Host.
func parseHosts(list []string) []hostRule {
	var out []hostRule
	for _, h := range list {
		name, port := splitHost(h, "")
		out = append(out, hostRule{name: strings.ToLower(name), port: port})
	}
	return out
}

// splitHost splits HOST[:PORT] (a Host header, an Origin's host) into a
// name without brackets and a port, def when there is none.
func splitHost(hostport, def string) (name, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), def
}

// defaultPort is the port a Host without one means.
func defaultPort(r *http.Request) string {
	if r.TLS != nil {
		return "443"
	}
	return "80"
}

// servingPort is the port of the local address the request came in on,
// "" when the handler runs outside an http.Server (a test calling
// ServeHTTP); then only names are checked.
func servingPort(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		return fmt.Sprint(a.Port)
	}
	return ""
}

// localIP is the address the request came in on, the zero Addr when
// unknown.
func localIP(r *http.Request) netip.Addr {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// hostArg is name as --allow-host takes it (an IPv6 literal in brackets).
func hostArg(name string) string {
	if strings.Contains(name, ":") {
		return "[" + name + "]"
	}
	return name
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
