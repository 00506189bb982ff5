package web

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// These tests attack the farm the way issue 9 found it open: from a web
// page the user happens to visit (cross-site requests, DNS rebinding) and
// with a viewer's token. Each runs a real HTTP server on loopback, so Host,
// the local address and the client's address are what a browser produces.

// secFarm is a served fake farm with one ready VM, "vm1", whose execs are
// counted.
type secFarm struct {
	srv   *httptest.Server
	farm  *vmmtest.Farm
	execs atomic.Int32
}

func newSecFarm(t *testing.T, opts Options) *secFarm {
	t.Helper()
	f := &secFarm{farm: vmmtest.New()}
	f.farm.ExecFn = func(req vmm.ExecRequest) (vmm.ExecResult, error) {
		f.execs.Add(1)
		return vmm.ExecResult{Stdout: []byte("uid=0(root)\n")}, nil
	}
	if _, err := f.farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	if opts.Desks == nil {
		// A still display, so taking control (a desk's) works without a VM.
		log := slog.New(slog.DiscardHandler)
		opts.Desks = desk.New(f.farm, desk.Options{Log: log, Dial: func(context.Context, vmm.VM, *slog.Logger) (desk.Display, error) {
			return &stillDisplay{}, nil
		}})
		t.Cleanup(opts.Desks.Close)
	}
	f.srv = httptest.NewServer(NewServer(f.farm, opts))
	t.Cleanup(f.srv.Close)
	return f
}

// port is the farm's serving port.
func (f *secFarm) port() string {
	_, p, _ := net.SplitHostPort(f.srv.Listener.Addr().String())
	return p
}

// send makes a request; header is name, value pairs, and "Host" sets the
// Host header. It returns the status and body.
func (f *secFarm) send(t *testing.T, method, path, body string, header ...string) (*http.Response, string) {
	t.Helper()
	resp, b := rawCall(t, method, f.srv.URL+path, body, header...)
	return resp, string(b)
}

// rawCall sends a request as given; header is name, value pairs, and
// "Host" sets the Host header. It returns the answer and its body.
func rawCall(t *testing.T, method, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// refused checks an error answer: its status, code, and words the message
// must contain.
func refused(t *testing.T, what string, resp *http.Response, body string, status int, code string, words ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d; body %s", what, resp.StatusCode, status, body)
		return
	}
	var er api.ErrorResponse
	if err := json.Unmarshal([]byte(body), &er); err != nil {
		t.Errorf("%s: error body %q: %v", what, body, err)
		return
	}
	if er.Error.Code != code {
		t.Errorf("%s: code %q, want %q (message %q)", what, er.Error.Code, code, er.Error.Message)
	}
	for _, w := range words {
		if !strings.Contains(er.Error.Message, w) {
			t.Errorf("%s: message %q does not say %q", what, er.Error.Message, w)
		}
	}
}

// A page on a rebinding name (rebind.attacker.example resolving to
// 127.0.0.1) sends its requests with its own name as Host: refused before
// anything runs, with the way to allow a name that is really the farm's.
func TestRebindingHostRefused(t *testing.T) {
	f := newSecFarm(t, Options{})
	host := "rebind.attacker.example:8080"
	resp, body := f.send(t, "GET", "/v1/vms", "", "Host", host)
	refused(t, "GET /v1/vms", resp, body, http.StatusMisdirectedRequest, api.CodeMisdirectedRequest,
		`"`+host+`"`, "--allow-host rebind.attacker.example")
	resp, body = f.send(t, "POST", "/v1/vms/vm1/exec", `{"argv":["id"]}`,
		"Host", host, "Content-Type", "application/json", "Origin", "http://"+host)
	refused(t, "POST exec", resp, body, http.StatusMisdirectedRequest, api.CodeMisdirectedRequest)
	if n := f.execs.Load(); n != 0 {
		t.Errorf("a rebinding page ran %d commands in the guest", n)
	}
	// A loopback name on another port is another server's.
	resp, body = f.send(t, "GET", "/v1/vms", "", "Host", "localhost:1")
	refused(t, "Host localhost:1", resp, body, http.StatusMisdirectedRequest, api.CodeMisdirectedRequest)

	// The names this farm does answer to.
	for _, h := range []string{"127.0.0.1:" + f.port(), "localhost:" + f.port(), "LocalHost:" + f.port(), "[::1]:" + f.port()} {
		if resp, body := f.send(t, "GET", "/v1/vms", "", "Host", h); resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %d %s", h, resp.StatusCode, body)
		}
	}
	// /healthz too is behind the check.
	resp, body = f.send(t, "GET", "/healthz", "", "Host", host)
	refused(t, "GET /healthz", resp, body, http.StatusMisdirectedRequest, api.CodeMisdirectedRequest)
}

// Names given with --allow-host reach the farm: a bare name on any port,
// NAME:PORT on that port only.
func TestAllowedHosts(t *testing.T) {
	f := newSecFarm(t, Options{AllowedHosts: []string{"farm.example", "Proxy.Example:8443"}})
	for h, want := range map[string]int{
		"farm.example":              200,
		"farm.example:" + f.port():  200,
		"FARM.example:443":          200,
		"proxy.example:8443":        200,
		"proxy.example":             421,
		"proxy.example:" + f.port(): 421,
		"other.example":             421,
	} {
		if resp, body := f.send(t, "GET", "/v1/vms", "", "Host", h); resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d: %s", h, resp.StatusCode, want, body)
		}
	}
}

// The attack of issue 9: a page on any site posts a "simple" text/plain
// request, which the browser sends without a preflight. It is refused and
// nothing runs; the CLI's client, which sends no Origin, still works.
func TestCrossSiteExecRefused(t *testing.T) {
	f := newSecFarm(t, Options{})
	const exec = "/v1/vms/vm1/exec"
	resp, body := f.send(t, "POST", exec, `{"argv":["id"]}`,
		"Content-Type", "text/plain", "Origin", "https://evil.example")
	refused(t, "text/plain POST from evil.example", resp, body, http.StatusForbidden, api.CodeCrossSite,
		"https://evil.example")
	// The same body typed as JSON (which a page cannot send without a
	// preflight this server never grants), and a fetch with no Origin but
	// the browser's Sec-Fetch-Site.
	resp, body = f.send(t, "POST", exec, `{"argv":["id"]}`,
		"Content-Type", "application/json", "Origin", "https://evil.example")
	refused(t, "JSON POST from evil.example", resp, body, http.StatusForbidden, api.CodeCrossSite)
	resp, body = f.send(t, "POST", exec, `{"argv":["id"]}`,
		"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site")
	refused(t, "Sec-Fetch-Site cross-site", resp, body, http.StatusForbidden, api.CodeCrossSite)
	// Another server on this host (a dev server on another port) is
	// another origin.
	resp, body = f.send(t, "POST", exec, `{"argv":["id"]}`,
		"Content-Type", "application/json", "Origin", "http://127.0.0.1:3000", "Sec-Fetch-Site", "same-site")
	refused(t, "POST from 127.0.0.1:3000", resp, body, http.StatusForbidden, api.CodeCrossSite)
	// Bodiless state changes are refused on the Origin alone.
	for _, rq := range [][2]string{{"POST", "/v1/vms/vm1/reset"}, {"POST", "/v1/vms/vm1/control"}, {"DELETE", "/v1/vms/vm1"}} {
		resp, body = f.send(t, rq[0], rq[1], "", "Origin", "null")
		refused(t, rq[0]+" "+rq[1]+" from Origin null", resp, body, http.StatusForbidden, api.CodeCrossSite)
	}
	// Without an Origin, a body must still say it is JSON.
	resp, body = f.send(t, "POST", exec, `{"argv":["id"]}`, "Content-Type", "text/plain")
	refused(t, "text/plain POST", resp, body, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
		"application/json")
	resp, body = f.send(t, "POST", exec, `{"argv":["id"]}`)
	refused(t, "POST without Content-Type", resp, body, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType)
	resp, body = f.send(t, "PUT", "/v1/vms/vm1/files?path=/tmp/x", "data", "Content-Type", "application/x-www-form-urlencoded")
	refused(t, "form-encoded upload", resp, body, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
		"application/octet-stream")
	if n := f.execs.Load(); n != 0 {
		t.Fatalf("cross-site requests ran %d commands in the guest", n)
	}
	if f.farm.Resets != 0 || f.farm.Count() != 1 {
		t.Fatalf("cross-site requests reset (%d) or destroyed the VM", f.farm.Resets)
	}

	// The CLI's client.
	c, err := client.New(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(context.Background(), client.VM("vm1"), api.ExecRequest{Argv: []string{"id"}})
	if err != nil || res.Stdout != "uid=0(root)\n" {
		t.Fatalf("client exec: %+v, %v", res, err)
	}
	if err := c.WriteFile(context.Background(), client.VM("vm1"), "/tmp/x", strings.NewReader("hi"), 2, 0o644); err != nil {
		t.Fatalf("client upload: %v", err)
	}
	if _, err := c.ResetVM(context.Background(), "vm1"); err != nil {
		t.Fatalf("client reset: %v", err)
	}
	// The farm's own pages: same-origin fetches, with the charset a
	// browser may add.
	resp, body = f.send(t, "POST", exec, `{"argv":["id"]}`, "Content-Type", "application/json; charset=utf-8",
		"Origin", "http://127.0.0.1:"+f.port(), "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("same-origin POST: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(t, "POST", "/v1/vms/vm1/control", "", "Origin", "http://localhost:"+f.port(),
		"Host", "localhost:"+f.port(), "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("take control from the VM page: %d %s", resp.StatusCode, body)
	}
}

// Websockets are never preflighted: their Origin is checked against the
// allowlist, not against the Host the page chose.
func TestWebsocketOrigin(t *testing.T) {
	f := newSecFarm(t, Options{})
	ws := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/v1/vms/vm1/"
	dial := func(path string, header ...string) *http.Response {
		t.Helper()
		h := http.Header{}
		for i := 0; i+1 < len(header); i += 2 {
			h.Set(header[i], header[i+1])
		}
		conn, resp, err := websocket.DefaultDialer.Dial(ws+path, h)
		if err == nil {
			conn.Close()
		}
		if resp == nil {
			t.Fatalf("dial %s: %v", path, err)
		}
		return resp
	}
	for _, path := range []string{"stream", "vnc"} {
		resp := dial(path, "Origin", "https://evil.example")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s from evil.example: %d, want 403", path, resp.StatusCode)
		}
		// Rebinding: Origin and Host agree, and both are the attacker's.
		resp = dial(path, "Origin", "http://rebind.attacker.example:"+f.port(), "Host", "rebind.attacker.example:"+f.port())
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("%s from a rebinding page: %d, want 421", path, resp.StatusCode)
		}
		// The farm's own page, under either loopback name, gets past the
		// check (to the handler, which has no display here).
		resp = dial(path, "Origin", "http://localhost:"+f.port())
		if resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMisdirectedRequest {
			t.Errorf("%s from the farm's own page: %d", path, resp.StatusCode)
		}
	}
	if !checkOrigin(httptest.NewRequest("GET", "/", nil)) {
		t.Error("checkOrigin refuses a request without an Origin")
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Origin", "https://evil.example")
	if checkOrigin(r) {
		t.Error("checkOrigin accepts an Origin the guard did not check")
	}
}

// A viewer token watches; it never acts, takes control, reads guest files,
// or types through a takeover connection.
func TestViewerTokenCannotAct(t *testing.T) {
	f := newSecFarm(t, Options{Token: "ctl-secret", ViewerToken: "view-secret", TrustedNets: []netip.Prefix{}})
	viewer := []string{"Authorization", "Bearer view-secret", "Content-Type", "application/json"}
	ctl := []string{"Authorization", "Bearer ctl-secret", "Content-Type", "application/json"}
	for _, path := range []string{"/", "/wall", "/vms/vm1", "/v1/vms", "/v1/vms/vm1", "/v1/vms/vm1/control", "/metrics"} {
		if resp, body := f.send(t, "GET", path, "", viewer...); resp.StatusCode != http.StatusOK {
			t.Errorf("viewer GET %s: %d %s", path, resp.StatusCode, body)
		}
	}
	for _, rq := range [][3]string{
		{"POST", "/v1/vms/vm1/control", ""},
		{"POST", "/v1/vms/vm1/exec", `{"argv":["id"]}`},
		{"POST", "/v1/vms/vm1/actions", `{"action":{"kind":"click","x":1,"y":1}}`},
		{"POST", "/v1/vms/vm1/reset", ""},
		{"POST", "/v1/vms", `{"image":"tiny"}`},
		{"DELETE", "/v1/vms/vm1", ""},
		{"DELETE", "/v1/vms/vm1/control", ""},
		{"GET", "/v1/vms/vm1/files?path=/etc/shadow", ""},
		{"POST", "/v1/episodes", `{"pool":"desktop"}`},
	} {
		resp, body := f.send(t, rq[0], rq[1], rq[2], viewer...)
		refused(t, "viewer "+rq[0]+" "+rq[1], resp, body, http.StatusForbidden, api.CodeViewerToken, "control token")
	}
	if n := f.execs.Load(); n != 0 || f.farm.Count() != 1 {
		t.Fatalf("a viewer ran %d commands or changed the VMs", n)
	}
	// The person in control holds a control token for the takeover; a
	// viewer who learns it still cannot type through it.
	resp, body := f.send(t, "POST", "/v1/vms/vm1/control", "", ctl...)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("take control with the control token: %d %s", resp.StatusCode, body)
	}
	var cr api.ControlResponse
	json.Unmarshal([]byte(body), &cr)
	resp, body = f.send(t, "GET", "/v1/vms/vm1/vnc?control_token="+cr.ControlToken, "", viewer...)
	refused(t, "viewer takeover with a control token", resp, body, http.StatusForbidden, api.CodeViewerToken)
	// The control token does everything.
	if resp, body := f.send(t, "POST", "/v1/vms/vm1/exec", `{"argv":["id"]}`, ctl...); resp.StatusCode != http.StatusOK {
		t.Errorf("control exec: %d %s", resp.StatusCode, body)
	}
}

// With trust in loopback off, a loopback client shows a token like any
// other, and a viewer token from loopback stays a viewer's.
func TestLoopbackTrustOff(t *testing.T) {
	f := newSecFarm(t, Options{Token: "ctl-secret", ViewerToken: "view-secret", TrustedNets: []netip.Prefix{}})
	resp, body := f.send(t, "GET", "/v1/vms", "")
	refused(t, "loopback without a token", resp, body, http.StatusUnauthorized, api.CodeUnauthorized)
	f = newSecFarm(t, Options{Token: "ctl-secret", ViewerToken: "view-secret"})
	if resp, body := f.send(t, "GET", "/v1/vms", ""); resp.StatusCode != http.StatusOK {
		t.Errorf("trusted loopback: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(t, "POST", "/v1/vms/vm1/reset", "", "Authorization", "Bearer view-secret")
	refused(t, "viewer token from loopback", resp, body, http.StatusForbidden, api.CodeViewerToken)
}

// The cookie is named for the farm's port, and only a token that was
// checked ever becomes one.
func TestTokenCookie(t *testing.T) {
	f := newSecFarm(t, Options{Token: "ctl-secret", ViewerToken: "view-secret", TrustedNets: []netip.Prefix{}})
	name := "deskfarm_token_" + f.port()
	cookie := func(resp *http.Response) *http.Cookie {
		for _, c := range resp.Cookies() {
			if strings.HasPrefix(c.Name, "deskfarm_token") {
				return c
			}
		}
		return nil
	}
	// A request authenticated by its header carries a ?token= that was
	// never checked: no cookie may come of it.
	resp, body := f.send(t, "GET", "/v1/vms?token=planted", "", "Authorization", "Bearer ctl-secret")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("header token: %d %s", resp.StatusCode, body)
	}
	if c := cookie(resp); c != nil {
		t.Errorf("set cookie %s=%q from a token that was not checked", c.Name, c.Value)
	}
	resp, _ = f.send(t, "GET", "/v1/vms?token=wrong", "")
	if resp.StatusCode != http.StatusUnauthorized || cookie(resp) != nil {
		t.Errorf("wrong query token: %d, cookie %v", resp.StatusCode, cookie(resp))
	}
	// A page opened with the viewer token remembers it, under the port's
	// name, and the cookie is only good for watching.
	resp, body = f.send(t, "GET", "/?token=view-secret", "")
	c := cookie(resp)
	if resp.StatusCode != http.StatusOK || c == nil {
		t.Fatalf("page with ?token=: %d, cookie %v: %s", resp.StatusCode, c, body)
	}
	if c.Name != name || c.Value != "view-secret" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie %+v, want %s=view-secret HttpOnly SameSite=Strict", c, name)
	}
	if resp, body := f.send(t, "GET", "/v1/vms", "", "Cookie", name+"=view-secret"); resp.StatusCode != http.StatusOK {
		t.Errorf("viewer cookie: %d %s", resp.StatusCode, body)
	}
	resp, body = f.send(t, "POST", "/v1/vms/vm1/control", "", "Cookie", name+"=view-secret")
	refused(t, "take control with the viewer cookie", resp, body, http.StatusForbidden, api.CodeViewerToken)
	// Another farm's cookie (another port) is not this farm's.
	resp, body = f.send(t, "GET", "/v1/vms", "", "Cookie", "deskfarm_token_1=ctl-secret; deskfarm_token=ctl-secret")
	refused(t, "another port's cookie", resp, body, http.StatusUnauthorized, api.CodeUnauthorized)
	// A cookie with a token that is not the server's (rotated, or set by a
	// page on another port: cookies ignore ports) is expired.
	resp, body = f.send(t, "GET", "/v1/vms", "", "Cookie", name+"=rotated")
	refused(t, "stale cookie", resp, body, http.StatusUnauthorized, api.CodeUnauthorized, "?token=")
	if c := cookie(resp); c == nil || c.Name != name || c.MaxAge >= 0 {
		t.Errorf("stale cookie not expired: %+v", c)
	}
	// From a trusted address it does not lock the user out.
	f = newSecFarm(t, Options{Token: "ctl-secret"})
	resp, body = f.send(t, "POST", "/v1/vms/vm1/reset", "", "Cookie", "deskfarm_token_"+f.port()+"=planted")
	if resp.StatusCode != http.StatusOK || cookie(resp) == nil || cookie(resp).MaxAge >= 0 {
		t.Errorf("stale cookie from loopback: %d %s, cookie %+v", resp.StatusCode, body, cookie(resp))
	}
}

// Every answer forbids sniffing and framing by other origins, including
// refusals.
func TestSecurityHeaders(t *testing.T) {
	f := newSecFarm(t, Options{})
	for _, rq := range [][]string{
		{"/v1/vms"}, {"/"}, {"/vms/vm1"}, {"/assets/vm.js"}, {"/nope"},
		{"/v1/vms", "Host", "rebind.attacker.example"},
	} {
		resp, _ := f.send(t, "GET", rq[0], "", rq[1:]...)
		h := resp.Header
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%v: X-Content-Type-Options %q", rq, h.Get("X-Content-Type-Options"))
		}
		if h.Get("X-Frame-Options") != "SAMEORIGIN" {
			t.Errorf("%v: X-Frame-Options %q", rq, h.Get("X-Frame-Options"))
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'self'") {
			t.Errorf("%v: Content-Security-Policy %q lacks frame-ancestors 'self'", rq, csp)
		}
		if h.Get("Cross-Origin-Resource-Policy") != "same-origin" {
			t.Errorf("%v: Cross-Origin-Resource-Policy %q", rq, h.Get("Cross-Origin-Resource-Policy"))
		}
		if h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%v: Referrer-Policy %q", rq, h.Get("Referrer-Policy"))
		}
	}
	// The pages run only the farm's own scripts.
	resp, _ := f.send(t, "GET", "/vms/vm1", "")
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") ||
		strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("page CSP %q", csp)
	}
}
