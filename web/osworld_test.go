package web

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// Other listeners (OSWorld's per-VM ports) get the API's rules: a remote
// client needs the token, loopback does not.
func TestAuthenticateMiddleware(t *testing.T) {
	h := Authenticate(Options{Token: "s3cret", ViewerToken: "v1ew"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, c := range []struct {
		remote, auth, host, origin string
		want                       int
	}{
		{"192.0.2.1:1234", "", "", "", http.StatusUnauthorized},
		{"192.0.2.1:1234", "Bearer wrong", "", "", http.StatusUnauthorized},
		{"192.0.2.1:1234", "Bearer s3cret", "", "", http.StatusTeapot},
		{"127.0.0.1:1234", "", "", "", http.StatusTeapot},
		// The API's browser guards hold here too.
		{"127.0.0.1:1234", "", "rebind.attacker.example", "", http.StatusMisdirectedRequest},
		{"127.0.0.1:1234", "", "", "https://evil.example", http.StatusForbidden},
		// Everything on these ports drives the VM: a viewer may not.
		{"192.0.2.1:1234", "Bearer v1ew", "", "", http.StatusForbidden},
	} {
		req := httptest.NewRequest("GET", "/screenshot", nil)
		req.Host = "127.0.0.1"
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		req.RemoteAddr = c.remote
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s %q host %q origin %q: %d, want %d", c.remote, c.auth, c.host, c.origin, rec.Code, c.want)
		}
	}
}

// An episode's record carries its VM's OSWorld address while it lasts.
func TestEpisodeOSWorldAddress(t *testing.T) {
	farm := vmmtest.New()
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "osworld", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 1, Max: 1}}}
	cfg.SetDefaults()
	pools, err := pool.New(context.Background(), farm, cfg, pool.Options{StateDir: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr := func(vm string) (string, bool) { return "127.0.0.1:40000:40001:40002:40003", vm != "" }
	srv := httptest.NewServer(NewServer(farm, Options{Pools: pools, Logger: slog.New(slog.DiscardHandler), OSWorldAddress: addr}))
	t.Cleanup(func() { srv.Close(); pools.Close(); farm.Close() })
	code, b := send(t, "POST", srv.URL+"/v1/episodes", `{"pool":"osworld"}`)
	var ep api.Episode
	if code != http.StatusCreated || json.Unmarshal(b, &ep) != nil || ep.OSWorldAddress != "127.0.0.1:40000:40001:40002:40003" {
		t.Fatalf("start: %d %s", code, b)
	}
	if code, b := send(t, "GET", srv.URL+"/v1/episodes/"+ep.ID, ""); code != http.StatusOK || !strings.Contains(string(b), `"osworld_address":"127.0.0.1:40000`) {
		t.Fatalf("get: %d %s", code, b)
	}
}
