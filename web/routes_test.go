package web

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deskfarm/deskfarm/api"
)

// concretePath fills a table pattern's wildcards with values the fake farm
// knows: vm1, an episode id, a file under a {path...}.
func concretePath(pattern string) string {
	r := strings.NewReplacer("{$}", "", "{id}", "vm1", "{path...}", "status", "{name...}", "trajectory.jsonl")
	p := r.Replace(pattern)
	if strings.HasSuffix(pattern, "/files") {
		p += "?path=/etc/hostname"
	}
	return p
}

// A viewer token walks the whole table: every row declared control
// refuses it with 403 viewer_token before its handler runs, every watch
// row lets it through (whatever the handler then answers), and a public row
// needs no token at all. Nothing a viewer sent changed the farm.
func TestViewerTokenEveryRoute(t *testing.T) {
	f := newSecFarm(t, Options{Token: "ctl-secret", ViewerToken: "view-secret", TrustedNets: []netip.Prefix{}})
	s := newServer(f.farm, Options{})
	rows := s.expand(s.routes())
	if len(rows) < 40 {
		t.Fatalf("the table expands to %d rows; it has more", len(rows))
	}
	var control, watch int
	for _, rt := range rows {
		what := rt.method + " " + rt.path
		status, body := sendNoRead(t, f.srv.URL, rt.method, concretePath(rt.path), "Authorization", "Bearer view-secret")
		switch rt.access {
		case accessControl:
			control++
			if status != http.StatusForbidden || !strings.Contains(body, api.CodeViewerToken) {
				t.Errorf("viewer %s (control): %d %s, want 403 %s", what, status, body, api.CodeViewerToken)
			}
		case accessWatch, accessPublic:
			watch++
			if status == http.StatusForbidden || status == http.StatusUnauthorized {
				t.Errorf("viewer %s (%s): %d %s", what, rt.access, status, body)
			}
		default:
			t.Errorf("%s: access %s", what, rt.access)
		}
		if rt.access == accessPublic {
			if status, body := sendNoRead(t, f.srv.URL, rt.method, concretePath(rt.path)); status == http.StatusUnauthorized {
				t.Errorf("%s is public, but without a token: %d %s", what, status, body)
			}
		}
	}
	if control == 0 || watch == 0 {
		t.Fatalf("%d control and %d watch rows", control, watch)
	}
	if n := f.execs.Load(); n != 0 || f.farm.Count() != 1 || f.farm.Resets != 0 {
		t.Fatalf("a viewer ran %d commands, reset %d times or changed the VMs (%d)", n, f.farm.Resets, f.farm.Count())
	}
	// A takeover connection that presents a control token needs control.
	status, body := sendNoRead(t, f.srv.URL, "GET", "/v1/vms/vm1/vnc?control_token=x", "Authorization", "Bearer view-secret")
	if status != http.StatusForbidden || !strings.Contains(body, api.CodeViewerToken) {
		t.Errorf("viewer takeover with a control_token: %d %s", status, body)
	}
}

// sendNoRead sends a bodiless request and returns the status and the
// start of the body; it does not wait for a stream to end.
func sendNoRead(t *testing.T, base, method, path string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp.StatusCode, ""
	}
	b := make([]byte, 4096)
	n, _ := resp.Body.Read(b)
	return resp.StatusCode, string(b[:n])
}

// The policy is the row's, not the method's: a GET declared control (one
// that reads a secret, say) is refused to a viewer token, and its handler
// never runs. The guard before the route table let every GET but a few
// named paths through to a viewer.
func TestGETDeclaredControlRefusesViewer(t *testing.T) {
	f := newSecFarm(t, Options{})
	s := newServer(f.farm, Options{Token: "ctl-secret", ViewerToken: "view-secret", TrustedNets: []netip.Prefix{}})
	var ran atomic.Int32
	secret := func(w http.ResponseWriter, r *http.Request, tg target) error {
		ran.Add(1)
		w.Write([]byte("the secret of " + tg.vm)) //nolint:errcheck
		return nil
	}
	rows := append(s.routes(), route{method: "GET", path: "/secret", op: "secret",
		policy: policy{access: accessControl, body: bodyNone}, vm: secret, scope: vmAndEpisode})
	srv := httptest.NewServer(s.handler(rows))
	defer srv.Close()

	for _, path := range []string{"/v1/vms/vm1/secret", "/v1/episodes/ep1/secret"} {
		status, body := sendNoRead(t, srv.URL, "GET", path, "Authorization", "Bearer view-secret")
		if status != http.StatusForbidden || !strings.Contains(body, api.CodeViewerToken) || !strings.Contains(body, "control token") {
			t.Errorf("viewer GET %s: %d %s, want 403 %s", path, status, body, api.CodeViewerToken)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the secret was read %d times with a viewer token", n)
	}
	status, body := sendNoRead(t, srv.URL, "GET", "/v1/vms/vm1/secret", "Authorization", "Bearer ctl-secret")
	if status != http.StatusOK || body != "the secret of vm1" {
		t.Errorf("control GET: %d %q", status, body)
	}
}

// A row says who may call it and what body it takes, or it is not served.
func TestRouteRowsDeclarePolicy(t *testing.T) {
	s := newServer(nil, Options{})
	for _, rt := range s.routes() {
		if err := rt.check(); err != nil {
			t.Error(err)
		}
	}
	h := func(w http.ResponseWriter, r *http.Request) error { return nil }
	for name, bad := range map[string]route{
		"no access":      {method: "GET", path: "/x", policy: policy{body: bodyNone}, h: h},
		"no body":        {method: "POST", path: "/x", policy: policy{access: accessControl}, h: h},
		"GET with body":  {method: "GET", path: "/x", policy: policy{access: accessWatch, body: bodyJSON}, h: h},
		"no handler":     {method: "GET", path: "/x", policy: policy{access: accessWatch, body: bodyNone}},
		"mutates, no vm": {method: "POST", path: "/x", policy: policy{access: accessControl, body: bodyNone, mutates: true}, h: h},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("a row with %s was served", name)
				}
			}()
			s.handler(append(s.routes(), bad))
		}()
	}
}

// A VM row that episodes share is written once and served at both paths,
// with one policy.
func TestVMRowsServeEpisodes(t *testing.T) {
	s := newServer(nil, Options{})
	served := map[string]route{}
	for _, rt := range s.expand(s.routes()) {
		served[rt.method+" "+rt.path] = rt
	}
	for _, rt := range s.routes() {
		if rt.vm == nil {
			continue
		}
		vm, ok := served[rt.method+" /v1/vms/{id}"+rt.path]
		if !ok {
			t.Errorf("%s %s: no /v1/vms route", rt.method, rt.path)
			continue
		}
		ep, ok := served[rt.method+" /v1/episodes/{id}"+rt.path]
		if ok != (rt.scope == vmAndEpisode) {
			t.Errorf("%s %s: episode route served %v, scope %d", rt.method, rt.path, ok, rt.scope)
		}
		if ok && (vm.access != ep.access || vm.body != ep.body || vm.mutates != ep.mutates) {
			t.Errorf("%s %s: vm policy %+v, episode policy %+v", rt.method, rt.path, vm.policy, ep.policy)
		}
	}
	for _, p := range []string{"POST /v1/episodes/{id}/actions", "GET /v1/episodes/{id}/files", "POST /v1/episodes/{id}/cua/{path...}"} {
		if _, ok := served[p]; !ok {
			t.Errorf("%s is not served", p)
		}
	}
}
