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

// authenticate lets through requests from trusted networks and requests
// carrying the token; /healthz is open to all.
func (s *server) authenticate(next http.Handler) http.Handler {
	var want [sha256.Size]byte
	if s.token != "" {
		want = sha256.Sum256([]byte(s.token))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if err := s.authorize(r, want); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="deskfarm"`)
			writeError(w, r, err)
			return
		}
		if q := r.URL.Query(); q.Has(tokenParam) {
			// A browser opened a link with ?token=: remember it in a cookie
			// so the page's own requests (assets, websockets, the activity
			// feed), which cannot carry an Authorization header, pass too.
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: q.Get(tokenParam), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q.Del(tokenParam)
			r.URL.RawQuery = q.Encode()
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) authorize(r *http.Request, want [sha256.Size]byte) error {
	got, presented, err := bearerToken(r)
	if err != nil {
		return err
	}
	if presented {
		// Compare digests so neither the content nor the length leaks.
		gotSum := sha256.Sum256([]byte(got))
		if s.token == "" {
			return unauthorized("the request carries an API token but this server has none: unset DESKFARM_TOKEN or start the server with --token")
		}
		if subtle.ConstantTimeCompare(gotSum[:], want[:]) != 1 {
			return unauthorized("wrong API token")
		}
		return nil
	}
	if s.trustedAddr(r.RemoteAddr) {
		return nil
	}
	if s.token == "" {
		return unauthorized(fmt.Sprintf("requests from %s need a token, and this server has none: "+
			"restart it with --token", r.RemoteAddr))
	}
	return unauthorized(`missing API token: send "Authorization: Bearer TOKEN"`)
}

// bearerToken returns the request's bearer token and whether it sent one.
// Browsers cannot set an Authorization header on page loads, websockets or
// EventSource: they present the token as ?token= once, then as a cookie.
const (
	tokenParam  = "token"
	tokenCookie = "deskfarm_token"
)

func bearerToken(r *http.Request) (string, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if t := r.URL.Query().Get(tokenParam); t != "" {
			return t, true, nil
		}
		if c, err := r.Cookie(tokenCookie); err == nil && c.Value != "" {
			return c.Value, true, nil
		}
		return "", false, nil
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", true, unauthorized(`malformed Authorization header: want "Bearer TOKEN"`)
	}
	return strings.TrimSpace(tok), true, nil
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
