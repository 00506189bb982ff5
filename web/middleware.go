package web

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// reqInfo collects what handlers learn about a request for its log line.
type reqInfo struct {
	op   string
	vm   string
	node string // the owner's, for a call proxied to another agent (cluster.go)
	auth string // the role authenticate found: "control", "viewer" or ""
	code string
	err  error
}

type reqInfoKey struct{}

func infoFrom(r *http.Request) *reqInfo {
	info, _ := r.Context().Value(reqInfoKey{}).(*reqInfo)
	return info
}

func noteVM(r *http.Request, id string) {
	if info := infoFrom(r); info != nil {
		info.vm = id
	}
}

// logRequests logs one line per request: method, path, status, duration,
// and the op, vm and error when there are any.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{}
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), reqInfoKey{}, info)))
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if info.code == CodeCanceled {
			status = statusClientClosed
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Duration("duration", time.Since(start)),
			slog.String("remote", r.RemoteAddr),
		}
		if info.op != "" {
			attrs = append(attrs, slog.String("op", info.op))
		}
		if info.vm != "" {
			attrs = append(attrs, slog.String("vm", info.vm))
		}
		if info.node != "" {
			attrs = append(attrs, slog.String("node", info.node))
		}
		if info.auth != "" {
			attrs = append(attrs, slog.String("auth", info.auth))
		}
		if info.err != nil {
			attrs = append(attrs, slog.String("code", info.code), slog.String("err", info.err.Error()))
		}
		level := slog.LevelInfo
		if status >= 500 && status != statusClientClosed {
			level = slog.LevelError
		}
		s.log.LogAttrs(r.Context(), level, "request", attrs...)
	})
}

// role is what an authenticated request may do.
type role int

const (
	roleNone    role = iota // not authenticated: /healthz only
	roleViewer              // the routes declared accessWatch (routes.go)
	roleControl             // everything
)

func (r role) String() string {
	switch r {
	case roleViewer:
		return "viewer"
	case roleControl:
		return "control"
	}
	return ""
}

// access is who a request is, as authenticate found it.
type access struct {
	role role
	// token is the token that was checked, and fromQuery whether it came
	// as ?token= (then the guard remembers it in a cookie).
	token     string
	fromQuery bool
	// staleCookie: the cookie held a token that is not (or no longer) one
	// of the server's; the guard expires it.
	staleCookie bool
}

// authenticate decides who a request is: a client in a trusted network
// (unless it presents a token, which then decides), the holder of the
// control token or of the viewer token. A public route (need) is open to
// all. Tokens
// are compared by digest, so neither their content nor their length
// leaks through timing.
func (s *server) authenticate(r *http.Request, need accessLevel) (access, error) {
	if need == accessPublic {
		return access{}, nil // anyone may ask; it tells nothing
	}
	got, source, err := bearerToken(r)
	if err != nil {
		return access{}, err
	}
	if source == "" {
		if s.trustedCaller(r) {
			return access{role: roleControl}, nil
		}
		if s.token == "" {
			return access{}, unauthorized(fmt.Sprintf("requests from %s need a token, and this server has none: "+
				"restart it with --token", r.RemoteAddr))
		}
		return access{}, unauthorized(`missing API token: send "Authorization: Bearer TOKEN", or open the page once with ?token=TOKEN`)
	}
	a := access{token: got, fromQuery: source == tokenParam}
	gotSum := sha256.Sum256([]byte(got))
	switch {
	case s.token != "" && tokenEqual(gotSum, s.token):
		a.role = roleControl
		return a, nil
	case s.viewerToken != "" && tokenEqual(gotSum, s.viewerToken):
		a.role = roleViewer
		return a, nil
	}
	if source != sourceHeader && source != tokenParam {
		// A cookie from before the tokens changed, or one that a page on
		// another port of this host set (cookies ignore ports): it goes,
		// and the request is judged as if it had none.
		if s.trustedCaller(r) {
			return access{role: roleControl, staleCookie: true}, nil
		}
		return access{staleCookie: true}, unauthorized("the token in cookie " + source +
			" is not this server's (it has been removed): open the page once with ?token=TOKEN")
	}
	if s.token == "" && s.viewerToken == "" {
		return access{}, unauthorized("the request carries an API token but this server has none: unset DESKFARM_TOKEN or start the server with --token")
	}
	return access{}, unauthorized(fmt.Sprintf("wrong API token (from the %s)", sourceName(source)))
}

// tokenEqual compares a presented token's digest with want's in constant
// time.
func tokenEqual(got [sha256.Size]byte, want string) bool {
	w := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(got[:], w[:]) == 1
}

// Browsers cannot set an Authorization header on page loads, websockets or
// EventSource: they present the token as ?token= once, then as a cookie.
// The cookie's name carries the farm's port: cookies are scoped by host
// only, and two farms on one host must not read each other's.
const (
	tokenParam   = "token"
	tokenCookie  = "deskfarm_token" // + "_PORT"
	sourceHeader = "header"
)

// cookieName is the token cookie's name for the port the browser sees.
func cookieName(r *http.Request) string {
	_, port := splitHost(r.Host, defaultPort(r))
	return tokenCookie + "_" + port
}

// bearerToken returns the request's token and where it came from: the
// Authorization header, ?token= (tokenParam) or the cookie (its name); ""
// when it sent none. The first present wins, in that order.
func bearerToken(r *http.Request) (token, source string, err error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if t := r.URL.Query().Get(tokenParam); t != "" {
			return t, tokenParam, nil
		}
		name := cookieName(r)
		if c, err := r.Cookie(name); err == nil && c.Value != "" {
			return c.Value, name, nil
		}
		return "", "", nil
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", "", unauthorized(`malformed Authorization header: want "Bearer TOKEN"`)
	}
	return strings.TrimSpace(tok), sourceHeader, nil
}

func sourceName(source string) string {
	if source == sourceHeader {
		return "Authorization header"
	}
	return "?token= parameter"
}

// trustedCaller reports whether r comes from a trusted network. A request
// another agent proxied (cluster.go) never does: its caller is not at that
// agent's address, and its own token decides.
func (s *server) trustedCaller(r *http.Request) bool {
	return !isProxied(r) && s.trustedAddr(r.RemoteAddr)
}

// trustedAddr reports whether a RemoteAddr is in a trusted network.
// Anything it cannot parse is untrusted.
func (s *server) trustedAddr(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range s.trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

func unauthorized(msg string) error {
	return &httpError{status: http.StatusUnauthorized, code: CodeUnauthorized, msg: msg}
}

// statusRecorder remembers the status a handler sent. It passes Flush and
// Hijack through for the streaming endpoints.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher.
func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker, for websockets.
func (w *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack: response writer does not support it")
	}
	if w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}
