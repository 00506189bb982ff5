package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// harness is a server on a fake farm with one ready VM, "vm1".
type harness struct {
	t    *testing.T
	farm *vmmtest.Farm
	h    http.Handler
	logs *bytes.Buffer
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	farm := vmmtest.New()
	farm.ResetTime = 930 * time.Millisecond
	if _, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}
	return &harness{t: t, farm: farm, h: NewServer(farm, opts), logs: logs}
}

// do sends a request from loopback; body is a string, []byte or nil.
func (h *harness) do(method, target string, body any, header ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.doFrom("127.0.0.1:40000", method, target, body, header...)
}

func (h *harness) doFrom(remote, method, target string, body any, header ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	case io.Reader:
		r = b
	default:
		h.t.Fatalf("body of type %T", body)
	}
	req := httptest.NewRequest(method, target, r)
	req.RemoteAddr = remote
	// As the CLI sends it: to a loopback name, the body typed as its route
	// takes (security.go refuses other names and types).
	req.Host = "localhost:8080"
	if body != nil {
		ct := "application/json"
		if method == "PUT" {
			ct = "application/octet-stream"
		}
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.h.ServeHTTP(w, req)
	return w
}

// wantError checks an error response's status, code and field.
func wantError(t *testing.T, w *httptest.ResponseRecorder, status int, code, field string) ErrorBody {
	t.Helper()
	if w.Code != status {
		t.Errorf("status = %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var resp ErrorResponse
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("error body %q: %v", w.Body, err)
	}
	if resp.Error.Code != code || resp.Error.Field != field || resp.Error.Message == "" {
		t.Errorf("error = %+v, want code %q field %q and a message", resp.Error, code, field)
	}
	return resp.Error
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %q: %v", w.Body, err)
	}
	return v
}

func TestVMLifecycle(t *testing.T) {
	h := newHarness(t, Options{})

	w := h.do("POST", "/v1/vms", `{"image":"desktop","memory_mib":2048,"vcpus":2,"width":1024,"height":768}`)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: status %d, body %s", w.Code, w.Body)
	}
	vm := decode[api.VM](t, w)
	if vm.ID == "" || vm.Image != "desktop" || vm.MemoryMiB != 2048 || vm.Width != 1024 {
		t.Errorf("create returned %+v", vm)
	}
	if loc := w.Header().Get("Location"); loc != "/v1/vms/"+vm.ID {
		t.Errorf("Location = %q", loc)
	}

	w = h.do("GET", "/v1/vms", nil)
	if list := decode[VMList](t, w); w.Code != 200 || len(list.VMs) != 2 {
		t.Errorf("list: status %d, body %s", w.Code, w.Body)
	}
	w = h.do("GET", "/v1/vms/"+vm.ID, nil)
	if got := decode[api.VM](t, w); w.Code != 200 || got.ID != vm.ID {
		t.Errorf("get: status %d, body %s", w.Code, w.Body)
	}
	w = h.do("POST", "/v1/vms/"+vm.ID+"/reset", nil)
	if got := decode[ResetResponse](t, w); w.Code != 200 || got != (ResetResponse{ID: vm.ID, ResetSeconds: 0.93, ResetMS: 930}) {
		t.Errorf("reset: status %d, body %s", w.Code, w.Body)
	}
	w = h.do("DELETE", "/v1/vms/"+vm.ID, nil)
	if w.Code != http.StatusNoContent || w.Body.Len() != 0 {
		t.Errorf("delete: status %d, body %q", w.Code, w.Body)
	}
	wantError(t, h.do("GET", "/v1/vms/"+vm.ID, nil), 404, CodeNotFound, "")
	wantError(t, h.do("DELETE", "/v1/vms/"+vm.ID, nil), 404, CodeNotFound, "")
}

func TestEmptyListIsArray(t *testing.T) {
	h := newHarness(t, Options{})
	h.do("DELETE", "/v1/vms/vm1", nil)
	w := h.do("GET", "/v1/vms", nil)
	if got := strings.TrimSpace(w.Body.String()); got != `{"vms":[]}` {
		t.Errorf("empty list = %s, want {\"vms\":[]}", got)
	}
}

func TestSentinelCodes(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{vmm.ErrNotFound, 404, CodeNotFound},
		{vmm.ErrInvalid, 400, CodeInvalidRequest},
		{vmm.ErrUnknownImage, 400, CodeUnknownImage},
		{vmm.ErrImageNotBuilt, 409, CodeImageNotBuilt},
		{vmm.ErrBrokenImage, 500, CodeBrokenImage},
		{vmm.ErrNotRunning, 409, CodeNotRunning},
		{vmm.ErrInsufficientResources, 507, CodeInsufficientResources},
		{vmm.ErrTooLarge, 413, CodeTooLarge},
		{vmm.ErrAgent, 502, CodeAgentError},
		{vmm.ErrTimeout, 504, CodeTimeout},
		{vmm.ErrDead, 410, CodeVMDead},
		{errors.New("libvirt: connection reset"), 500, CodeInternal},
		// An agent call that timed out is a timeout; a dead VM is not merely not running.
		{fmt.Errorf("exec: %w: %w", vmm.ErrAgent, vmm.ErrTimeout), 504, CodeTimeout},
		{fmt.Errorf("reset: %w: %w", vmm.ErrNotRunning, vmm.ErrDead), 410, CodeVMDead},
		// Canceled by something other than this client.
		{context.Canceled, 500, CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			h := newHarness(t, Options{})
			h.farm.Err = fmt.Errorf("get vm vm1: %w", tt.err)
			body := wantError(t, h.do("GET", "/v1/vms/vm1", nil), tt.status, tt.code, "")
			if !strings.Contains(body.Message, "get vm vm1") {
				t.Errorf("message %q lost the farm's context", body.Message)
			}
		})
	}
}

// A field error from the farm (or any error with InvalidField) fills "field".
func TestFarmFieldError(t *testing.T) {
	h := newHarness(t, Options{})
	h.farm.Err = fmt.Errorf("create vm: %w", fielderr.New("vcpus", "host has 2 CPUs, asked for 8", vmm.ErrInvalid))
	wantError(t, h.do("POST", "/v1/vms", `{"image":"tiny","vcpus":8}`), 400, CodeInvalidRequest, "vcpus")
}

// The field comes from a typed error, never from the message text.
func TestFarmFieldTyped(t *testing.T) {
	h := newHarness(t, Options{})
	h.farm.Err = fmt.Errorf("create vm: %w", fielderr.Newf("vcpus", vmm.ErrInvalid, "8 is outside 1..2"))
	wantError(t, h.do("POST", "/v1/vms", `{"image":"tiny","vcpus":8}`), 400, CodeInvalidRequest, "vcpus")
	h.farm.Err = fmt.Errorf("create vm: %w", fielderr.Newf("memory_mib", vmm.ErrInsufficientResources, "too much"))
	wantError(t, h.do("POST", "/v1/vms", `{"image":"tiny"}`), 507, CodeInsufficientResources, "memory_mib")
	// Text that looks like a field is just text.
	h.farm.Err = fmt.Errorf("create vm: field vcpus: %w", vmm.ErrInvalid)
	wantError(t, h.do("POST", "/v1/vms", `{"image":"tiny"}`), 400, CodeInvalidRequest, "")
}

func TestCreateValidation(t *testing.T) {
	tests := []struct {
		name, body  string
		code, field string
	}{
		{"unknown field", `{"image":"tiny","memry_mib":512}`, CodeInvalidRequest, "memry_mib"},
		{"wrong type", `{"image":"tiny","memory_mib":"lots"}`, CodeInvalidRequest, "memory_mib"},
		{"fraction", `{"image":"tiny","vcpus":1.5}`, CodeInvalidRequest, "vcpus"},
		{"no image", `{"memory_mib":512}`, CodeInvalidRequest, "image"},
		{"small memory", `{"image":"tiny","memory_mib":64}`, CodeInvalidRequest, "memory_mib"},
		{"negative vcpus", `{"image":"tiny","vcpus":-1}`, CodeInvalidRequest, "vcpus"},
		{"negative width", `{"image":"tiny","width":-1}`, CodeInvalidRequest, "width"},
		// vmm's rules, not a copy of some of them: web checked neither.
		{"skewed width", `{"image":"tiny","width":1366,"height":768}`, CodeInvalidRequest, "width"},
		{"no height", `{"image":"tiny","width":1024}`, CodeInvalidRequest, "height"},
		{"bad network", `{"image":"tiny","network":"bridge"}`, CodeInvalidRequest, "network"},
		{"privileged host port", `{"image":"tiny","network":"user","forwards":[{"guest_port":22,"host_port":80}]}`, CodeInvalidRequest, "forwards[0].host_port"},
		{"empty body", ``, CodeBadJSON, ""},
		{"truncated", `{"image":"tiny"`, CodeBadJSON, ""},
		{"syntax", `{"image":tiny}`, CodeBadJSON, ""},
		{"array", `["tiny"]`, CodeBadJSON, ""},
		{"trailing", `{"image":"tiny"} {"image":"tiny"}`, CodeBadJSON, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			e := wantError(t, h.do("POST", "/v1/vms", tt.body), 400, tt.code, tt.field)
			if tt.field != "" && !strings.Contains(e.Message, tt.field) {
				t.Errorf("message %q does not name %s", e.Message, tt.field)
			}
			if h.farm.Count() != 1 {
				t.Errorf("a VM was created from an invalid request")
			}
		})
	}
}

func TestCreateBodyLimit(t *testing.T) {
	h := newHarness(t, Options{})
	body := `{"image":"` + strings.Repeat("x", maxJSONBody) + `"}`
	wantError(t, h.do("POST", "/v1/vms", body), 413, CodeTooLarge, "")
}

// Create hands the request's context to the farm, so a client that gives up
// stops the boot.
func TestCreateCancel(t *testing.T) {
	h := newHarness(t, Options{})
	started := make(chan struct{})
	var farmErr error
	h.farm.CreateHook = func(ctx context.Context, _ vmm.CreateOptions) error {
		close(started)
		<-ctx.Done()
		farmErr = fmt.Errorf("create vm: wait for agent: %w", ctx.Err())
		return farmErr
	}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, "POST", "http://localhost/v1/vms", strings.NewReader(`{"image":"tiny"}`))
	req.RemoteAddr = "127.0.0.1:1"
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.h.ServeHTTP(w, req); close(done) }()
	<-started
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("create did not return after the client canceled")
	}
	if !errors.Is(farmErr, context.Canceled) {
		t.Errorf("farm saw %v, want context.Canceled", farmErr)
	}
	if !strings.Contains(h.logs.String(), "status=499") {
		t.Errorf("log does not record the canceled request: %s", h.logs)
	}
}

func TestExec(t *testing.T) {
	h := newHarness(t, Options{})
	w := h.do("POST", "/v1/vms/vm1/exec", `{"argv":["cat"],"stdin":"hello\n","env":["A=1"],"timeout_s":2.5}`)
	if w.Code != 200 {
		t.Fatalf("exec: status %d, body %s", w.Code, w.Body)
	}
	if got := strings.TrimSpace(w.Body.String()); got != `{"exit_code":0,"stdout":"hello\n","stderr":""}` {
		t.Errorf("exec body = %s", got)
	}
	req := h.farm.LastExec
	if req.Argv[0] != "cat" || string(req.Stdin) != "hello\n" || req.Env[0] != "A=1" || req.Timeout != 2500*time.Millisecond {
		t.Errorf("farm got %+v", req)
	}

	// No timeout means the farm's default.
	h.do("POST", "/v1/vms/vm1/exec", `{"argv":["true"]}`)
	if h.farm.LastExec.Timeout != 0 {
		t.Errorf("timeout = %v, want 0 (the farm's default)", h.farm.LastExec.Timeout)
	}
	h.do("POST", "/v1/vms/vm1/exec", `{"argv":["true"],"timeout_s":3600}`)
	if h.farm.LastExec.Timeout != time.Hour {
		t.Errorf("timeout = %v, want 1h", h.farm.LastExec.Timeout)
	}
}

// Output that is not UTF-8 comes back in base64; text comes back as text,
// with no _b64 field.
func TestExecBinary(t *testing.T) {
	h := newHarness(t, Options{})
	bin := []byte{0x89, 'P', 'N', 'G', 0xff, 0x00}
	h.farm.ExecFn = func(req vmm.ExecRequest) (vmm.ExecResult, error) {
		return vmm.ExecResult{ExitCode: 3, Stdout: req.Stdin, Stderr: []byte("warning: ü\n")}, nil
	}
	w := h.do("POST", "/v1/vms/vm1/exec",
		fmt.Sprintf(`{"argv":["cat"],"stdin_b64":%q}`, base64.StdEncoding.EncodeToString(bin)))
	if w.Code != 200 {
		t.Fatalf("exec: status %d, body %s", w.Code, w.Body)
	}
	if !bytes.Equal(h.farm.LastExec.Stdin, bin) {
		t.Errorf("farm got stdin %q, want %q", h.farm.LastExec.Stdin, bin)
	}
	var raw map[string]any
	json.Unmarshal(w.Body.Bytes(), &raw)
	if _, ok := raw["stderr_b64"]; ok {
		t.Errorf("stderr_b64 present for text output: %s", w.Body)
	}
	resp := decode[ExecResponse](t, w)
	if resp.ExitCode != 3 || resp.Stdout != "" || resp.StdoutB64 == "" || resp.Stderr != "warning: ü\n" {
		t.Errorf("exec response %+v", resp)
	}
	if out, err := resp.StdoutBytes(); err != nil || !bytes.Equal(out, bin) {
		t.Errorf("StdoutBytes = %q, %v; want %q", out, err, bin)
	}
	if out, err := resp.StderrBytes(); err != nil || string(out) != "warning: ü\n" {
		t.Errorf("StderrBytes = %q, %v", out, err)
	}
}

func TestExecValidation(t *testing.T) {
	tests := []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"no argv", `{}`, 400, CodeInvalidRequest, "argv"},
		{"empty argv", `{"argv":[]}`, 400, CodeInvalidRequest, "argv"},
		{"empty program", `{"argv":[""]}`, 400, CodeInvalidRequest, "argv"},
		{"argv not strings", `{"argv":[1]}`, 400, CodeInvalidRequest, "argv"},
		{"argv string", `{"argv":"ls -l"}`, 400, CodeInvalidRequest, "argv"},
		{"nul", `{"argv":["a\u0000b"]}`, 400, CodeInvalidRequest, "argv"},
		{"negative timeout", `{"argv":["ls"],"timeout_s":-1}`, 400, CodeInvalidRequest, "timeout_s"},
		{"long timeout", `{"argv":["ls"],"timeout_s":3601}`, 400, CodeInvalidRequest, "timeout_s"},
		{"bad env", `{"argv":["ls"],"env":["NOEQUALS"]}`, 400, CodeInvalidRequest, "env"},
		{"both stdins", `{"argv":["ls"],"stdin":"a","stdin_b64":"YQ=="}`, 400, CodeInvalidRequest, "stdin_b64"},
		{"bad base64", `{"argv":["ls"],"stdin_b64":"not base64!"}`, 400, CodeInvalidRequest, "stdin_b64"},
		{"unknown field", `{"argv":["ls"],"cwd":"/tmp"}`, 400, CodeInvalidRequest, "cwd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Options{})
			wantError(t, h.do("POST", "/v1/vms/vm1/exec", tt.body), tt.status, tt.code, tt.field)
			if h.farm.LastExec.Argv != nil {
				t.Errorf("farm ran %+v", h.farm.LastExec)
			}
		})
	}
}

func TestExecStdinLimit(t *testing.T) {
	h := newHarness(t, Options{})
	big := base64.StdEncoding.EncodeToString(make([]byte, vmm.MaxFileSize+1))
	w := h.do("POST", "/v1/vms/vm1/exec", `{"argv":["cat"],"stdin_b64":"`+big+`"}`)
	wantError(t, w, 413, CodeTooLarge, "stdin_b64")
}

func TestFiles(t *testing.T) {
	h := newHarness(t, Options{})
	data := []byte("#!/bin/sh\necho hi\n\xff")
	w := h.do("PUT", "/v1/vms/vm1/files?path=/usr/local/bin/hi&mode=0755", data)
	if w.Code != http.StatusNoContent {
		t.Fatalf("put: status %d, body %s", w.Code, w.Body)
	}
	if mode := h.farm.FileMode("vm1", "/usr/local/bin/hi"); mode != 0o755 {
		t.Errorf("mode = %#o, want 0755", mode)
	}
	h.do("PUT", "/v1/vms/vm1/files?path=/tmp/a", "x")
	if mode := h.farm.FileMode("vm1", "/tmp/a"); mode != 0o644 {
		t.Errorf("default mode = %#o, want 0644", mode)
	}

	w = h.do("GET", "/v1/vms/vm1/files?path=/usr/local/bin/hi", nil)
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), data) {
		t.Errorf("get: status %d, body %q", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q", ct)
	}

	wantError(t, h.do("GET", "/v1/vms/vm1/files?path=relative/x", nil), 400, CodeInvalidRequest, "path")
	wantError(t, h.do("GET", "/v1/vms/vm1/files", nil), 400, CodeInvalidRequest, "path")
	wantError(t, h.do("PUT", "/v1/vms/vm1/files?path=x", "data"), 400, CodeInvalidRequest, "path")
	wantError(t, h.do("PUT", "/v1/vms/vm1/files?path=/x&mode=rw", "data"), 400, CodeInvalidRequest, "mode")
	wantError(t, h.do("PUT", "/v1/vms/vm1/files?path=/x&mode=0999", "data"), 400, CodeInvalidRequest, "mode")
	wantError(t, h.do("PUT", "/v1/vms/vm2/files?path=/x", "data"), 404, CodeNotFound, "")
}

func TestFileSizeLimit(t *testing.T) {
	h := newHarness(t, Options{})
	big := make([]byte, vmm.MaxFileSize+1)
	// With a Content-Length the server refuses before reading.
	wantError(t, h.do("PUT", "/v1/vms/vm1/files?path=/big", big), 413, CodeTooLarge, "")
	// Without one (chunked) it stops reading at the limit.
	chunked := struct{ io.Reader }{bytes.NewReader(big)}
	wantError(t, h.do("PUT", "/v1/vms/vm1/files?path=/big", chunked), 413, CodeTooLarge, "")
	if _, ok := h.farm.File("vm1", "/big"); ok {
		t.Error("oversized file reached the farm")
	}
	// Exactly the limit is fine.
	w := h.do("PUT", "/v1/vms/vm1/files?path=/big", big[:vmm.MaxFileSize])
	if w.Code != http.StatusNoContent {
		t.Errorf("put of MaxFileSize bytes: status %d, body %s", w.Code, w.Body)
	}
}

func TestAuth(t *testing.T) {
	const token = "s3cret-token"
	tests := []struct {
		name    string
		opts    Options
		remote  string
		path    string
		header  string
		wantOK  bool
		wantMsg string
	}{
		{"loopback v4", Options{Token: token}, "127.0.0.1:5000", "/v1/vms", "", true, ""},
		{"loopback 127/8", Options{Token: token}, "127.8.9.10:5000", "/v1/vms", "", true, ""},
		{"loopback v6", Options{Token: token}, "[::1]:5000", "/v1/vms", "", true, ""},
		{"loopback v4-mapped", Options{Token: token}, "[::ffff:127.0.0.1]:5000", "/v1/vms", "", true, ""},
		{"loopback no server token", Options{}, "127.0.0.1:5000", "/v1/vms", "", true, ""},
		{"remote no token", Options{Token: token}, "10.1.2.3:5000", "/v1/vms", "", false, "missing"},
		{"remote good token", Options{Token: token}, "10.1.2.3:5000", "/v1/vms", "Bearer " + token, true, ""},
		{"remote lowercase scheme", Options{Token: token}, "10.1.2.3:5000", "/v1/vms", "bearer " + token, true, ""},
		{"remote wrong token", Options{Token: token}, "10.1.2.3:5000", "/v1/vms", "Bearer nope", false, "wrong"},
		{"remote token prefix", Options{Token: token}, "10.1.2.3:5000", "/v1/vms", "Bearer s3cret", false, "wrong"},
		{"remote basic", Options{Token: token}, "10.1.2.3:5000", "/v1/vms", "Basic dTpw", false, "malformed"},
		{"remote v6", Options{Token: token}, "[2001:db8::1]:5000", "/v1/vms", "", false, "missing"},
		{"remote no server token", Options{}, "10.1.2.3:5000", "/v1/vms", "", false, "--token"},
		{"remote unknown route", Options{Token: token}, "10.1.2.3:5000", "/v2/secret", "", false, "missing"},
		{"unparsable remote", Options{Token: token}, "@", "/v1/vms", "", false, "missing"},
		{"loopback wrong token", Options{Token: token}, "127.0.0.1:5000", "/v1/vms", "Bearer nope", false, "wrong"},
		{"healthz open", Options{Token: token}, "10.1.2.3:5000", "/healthz", "", true, ""},
		{"trust nobody", Options{Token: token, TrustedNets: []netip.Prefix{}}, "127.0.0.1:5000", "/v1/vms", "", false, "missing"},
		{"trust nobody with token", Options{Token: token, TrustedNets: []netip.Prefix{}}, "127.0.0.1:5000", "/v1/vms", "Bearer " + token, true, ""},
		{"trusted lan", Options{Token: token, TrustedNets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "10.1.2.3:5000", "/v1/vms", "", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.opts)
			var hdr []string
			if tt.header != "" {
				hdr = []string{"Authorization", tt.header}
			}
			w := h.doFrom(tt.remote, "GET", tt.path, nil, hdr...)
			if tt.wantOK {
				if w.Code != 200 {
					t.Errorf("status %d, want 200; body %s", w.Code, w.Body)
				}
				return
			}
			e := wantError(t, w, 401, CodeUnauthorized, "")
			if !strings.Contains(e.Message, tt.wantMsg) {
				t.Errorf("message %q does not mention %q", e.Message, tt.wantMsg)
			}
			if w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if strings.Contains(w.Body.String(), token) {
				t.Error("401 body leaks the token")
			}
		})
	}
}

func TestRouting(t *testing.T) {
	h := newHarness(t, Options{})
	w := h.do("PATCH", "/v1/vms/vm1", nil)
	wantError(t, w, 405, CodeMethodNotAllowed, "")
	if allow := w.Header().Get("Allow"); allow != "GET, DELETE, HEAD" {
		t.Errorf("Allow = %q", allow)
	}
	wantError(t, h.do("GET", "/v1/vms/vm1/reset", nil), 405, CodeMethodNotAllowed, "")
	wantError(t, h.do("GET", "/v1/nothing", nil), 404, CodeNotFound, "")
	wantError(t, h.do("GET", "/nope", nil), 404, CodeNotFound, "")

	w = h.do("GET", "/healthz", nil)
	if w.Code != 200 || decode[HealthResponse](t, w).Status != "ok" {
		t.Errorf("healthz: status %d, body %s", w.Code, w.Body)
	}

	// A farm whose libvirtd is gone says so, and why, until it is back.
	h.farm.Lock()
	h.farm.HealthErr = &vmm.HypervisorDownError{Socket: "/run/libvirt/libvirt-sock", Since: time.Now().Add(-12 * time.Second),
		Err: errors.New("dial unix /run/libvirt/libvirt-sock: connect: connection refused")}
	h.farm.Unlock()
	wantError(t, h.do("GET", "/healthz", nil), 503, api.CodeHypervisorDown, "")
	if body := h.do("GET", "/healthz", nil).Body.String(); !strings.Contains(body, "libvirtd at /run/libvirt/libvirt-sock has not answered for 12s (dial unix") {
		t.Errorf("healthz with libvirtd gone: %s; want since when and why", body)
	}
	h.farm.Lock()
	h.farm.HealthErr = nil
	h.farm.Unlock()
	if w = h.do("GET", "/healthz", nil); w.Code != 200 {
		t.Errorf("healthz with libvirtd back: status %d, body %s", w.Code, w.Body)
	}
}

func TestRequestLog(t *testing.T) {
	h := newHarness(t, Options{})
	h.do("POST", "/v1/vms/vm1/exec", `{"argv":["true"]}`)
	h.do("GET", "/v1/vms/nope", nil)
	lines := strings.Split(strings.TrimSpace(h.logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 log lines, got %q", lines)
	}
	for _, want := range []string{"msg=request", "method=POST", "path=/v1/vms/vm1/exec", "status=200", "op=exec", "vm=vm1", "duration="} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %q lacks %q", lines[0], want)
		}
	}
	for _, want := range []string{"status=404", "op=get", "vm=nope", "code=not_found", "err="} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("log line %q lacks %q", lines[1], want)
		}
	}
}
