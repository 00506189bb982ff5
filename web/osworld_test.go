package web

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Other listeners (OSWorld's per-VM ports) get the API's rules: a remote
// client needs the token, loopback does not.
func TestAuthenticateMiddleware(t *testing.T) {
	h := Authenticate(Options{Token: "s3cret"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, c := range []struct {
		remote, auth string
		want         int
	}{
		{"192.0.2.1:1234", "", http.StatusUnauthorized},
		{"192.0.2.1:1234", "Bearer wrong", http.StatusUnauthorized},
		{"192.0.2.1:1234", "Bearer s3cret", http.StatusTeapot},
		{"127.0.0.1:1234", "", http.StatusTeapot},
	} {
		req := httptest.NewRequest("GET", "/screenshot", nil)
		req.RemoteAddr = c.remote
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %q: %d, want %d", c.remote, c.auth, rec.Code, c.want)
		}
	}
}
