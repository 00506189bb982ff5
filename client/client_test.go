package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/web"
)

func newClient(t *testing.T, opts web.Options, copts ...client.Option) (*client.Client, *vmmtest.Farm) {
	t.Helper()
	srv, farm := farmtest.Serve(t, opts)
	c, err := client.New(srv.URL, copts...)
	if err != nil {
		t.Fatal(err)
	}
	return c, farm
}

// apiErr returns err as an *api.Error, failing the test when it is not one.
func apiErr(t *testing.T, err error) *api.Error {
	t.Helper()
	e, ok := errors.AsType[*api.Error](err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *api.Error", err, err)
	}
	return e
}

func TestVMLifecycle(t *testing.T) {
	ctx := context.Background()
	c, farm := newClient(t, web.Options{})
	vm, err := c.CreateVM(ctx, api.CreateOptions{Image: "tiny", MemoryMiB: 512, Width: 1024, Height: 768})
	if err != nil {
		t.Fatal(err)
	}
	if vm.ID == "" || vm.Image != "tiny" || vm.State != api.StateReady || vm.MemoryMiB != 512 || vm.Width != 1024 {
		t.Errorf("created %+v", vm)
	}
	got, err := c.GetVM(ctx, vm.ID)
	if err != nil || got.ID != vm.ID || !got.CreatedAt.Equal(vm.CreatedAt) {
		t.Errorf("GetVM = %+v, %v", got, err)
	}
	vms, err := c.ListVMs(ctx)
	if err != nil || len(vms) != 1 || vms[0].ID != vm.ID {
		t.Errorf("ListVMs = %+v, %v", vms, err)
	}
	res, err := c.ResetVM(ctx, vm.ID)
	if err != nil || res.ID != vm.ID || res.ResetMS != 310 {
		t.Errorf("ResetVM = %+v, %v", res, err)
	}
	if err := c.DestroyVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if farm.Destroyed != 1 {
		t.Errorf("farm destroyed %d VMs", farm.Destroyed)
	}
	e := apiErr(t, c.DestroyVM(ctx, vm.ID))
	if e.Status != 404 || e.Code != api.CodeNotFound || !api.IsCode(e, api.CodeNotFound) {
		t.Errorf("second destroy: %+v", e)
	}
}

func TestExecAndFiles(t *testing.T) {
	ctx := context.Background()
	c, farm := newClient(t, web.Options{})
	vm, err := c.CreateVM(ctx, api.CreateOptions{Image: "desktop"})
	if err != nil {
		t.Fatal(err)
	}
	bin := []byte{0, 1, 0xff, '\n'}
	res, err := c.Exec(ctx, client.VM(vm.ID), api.ExecRequest{Argv: []string{"cat"}, StdinB64: "AAH/Cg=="})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := res.StdoutBytes(); err != nil || !bytes.Equal(out, bin) || res.StdoutB64 == "" {
		t.Errorf("cat of binary stdin: %q, %v (%+v)", out, err, res)
	}
	res, err = c.Exec(ctx, client.VM(vm.ID), api.ExecRequest{Argv: []string{"fail", "x"}})
	if err != nil || res.ExitCode != 7 || res.Stderr != "x" {
		t.Errorf("a failing program is a response, not an error: %+v, %v", res, err)
	}

	if err := c.WriteFile(ctx, client.VM(vm.ID), "/etc/x", strings.NewReader("hello"), 5, 0o600); err != nil {
		t.Fatal(err)
	}
	if farm.FileOrNil(vm.ID, "/etc/x") == nil || farm.FileMode(vm.ID, "/etc/x") != 0o600 {
		t.Errorf("guest file %q mode %#o", farm.FileOrNil(vm.ID, "/etc/x"), farm.FileMode(vm.ID, "/etc/x"))
	}
	var buf bytes.Buffer
	if n, err := c.ReadFile(ctx, client.VM(vm.ID), "/etc/x", &buf); err != nil || n != 5 || buf.String() != "hello" {
		t.Errorf("ReadFile = %d %q, %v", n, buf.String(), err)
	}
	_, err = c.ReadFile(ctx, client.VM(vm.ID), "/nope", &buf)
	if e := apiErr(t, err); e.Code != api.CodeAgentError || e.Status != 502 {
		t.Errorf("missing file: %+v", e)
	}
}

// Every bad input comes back as an *api.Error that names the field, with
// the invalid_request code and status 400, whichever call it came through.
func TestBadInputNamesField(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, web.Options{})
	vm, err := c.CreateVM(ctx, api.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	on := client.VM(vm.ID)
	tests := []struct {
		name, field string
		call        func() error
	}{
		{"create without image", "image", func() error { _, err := c.CreateVM(ctx, api.CreateOptions{}); return err }},
		{"create with little memory", "memory_mib", func() error {
			_, err := c.CreateVM(ctx, api.CreateOptions{Image: "tiny", MemoryMiB: 64})
			return err
		}},
		{"create with negative vcpus", "vcpus", func() error {
			_, err := c.CreateVM(ctx, api.CreateOptions{Image: "tiny", VCPUs: -1})
			return err
		}},
		{"create with negative width", "width", func() error {
			_, err := c.CreateVM(ctx, api.CreateOptions{Image: "tiny", Width: -8})
			return err
		}},
		{"create with negative height", "height", func() error {
			_, err := c.CreateVM(ctx, api.CreateOptions{Image: "tiny", Height: -8})
			return err
		}},
		{"exec without argv", "argv", func() error { _, err := c.Exec(ctx, on, api.ExecRequest{}); return err }},
		{"exec with a NUL in argv", "argv", func() error {
			_, err := c.Exec(ctx, on, api.ExecRequest{Argv: []string{"a\x00b"}})
			return err
		}},
		{"exec with a bad env entry", "env", func() error {
			_, err := c.Exec(ctx, on, api.ExecRequest{Argv: []string{"env"}, Env: []string{"NOEQUALS"}})
			return err
		}},
		{"exec with both stdins", "stdin_b64", func() error {
			_, err := c.Exec(ctx, on, api.ExecRequest{Argv: []string{"cat"}, Stdin: "a", StdinB64: "YQ=="})
			return err
		}},
		{"exec with bad base64", "stdin_b64", func() error {
			_, err := c.Exec(ctx, on, api.ExecRequest{Argv: []string{"cat"}, StdinB64: "!!"})
			return err
		}},
		{"exec with a long timeout", "timeout_s", func() error {
			_, err := c.Exec(ctx, on, api.ExecRequest{Argv: []string{"cat"}, TimeoutS: api.MaxExecTimeout + 1})
			return err
		}},
		{"exec with a negative timeout", "timeout_s", func() error {
			_, err := c.Exec(ctx, on, api.ExecRequest{Argv: []string{"cat"}, TimeoutS: -1})
			return err
		}},
		{"read a relative path", "path", func() error { _, err := c.ReadFile(ctx, on, "etc/x", &bytes.Buffer{}); return err }},
		{"read no path", "path", func() error { _, err := c.ReadFile(ctx, on, "", &bytes.Buffer{}); return err }},
		{"write a relative path", "path", func() error {
			return c.WriteFile(ctx, on, "x", strings.NewReader(""), 0, 0o644)
		}},
		{"write with a bad mode", "mode", func() error {
			return c.WriteFile(ctx, on, "/x", strings.NewReader(""), 0, 0o17777)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := apiErr(t, tt.call())
			if e.Field != tt.field || e.Code != api.CodeInvalidRequest || e.Status != 400 || e.Message == "" {
				t.Errorf("got %+v, want field %q, invalid_request, 400", e, tt.field)
			}
			if !strings.Contains(e.Error(), tt.field) {
				t.Errorf("error text %q does not name %s", e.Error(), tt.field)
			}
		})
	}
}

func TestNoPoolsNoDisplay(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, web.Options{})
	_, err := c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "desktop"})
	if e := apiErr(t, err); e.Code != api.CodeNoPools || e.Status != 501 {
		t.Errorf("StartEpisode without pools: %+v", e)
	}
	_, err = c.Pools(ctx)
	if e := apiErr(t, err); e.Code != api.CodeNoPools {
		t.Errorf("Pools without pools: %+v", e)
	}
	_, err = c.Act(ctx, client.VM("v01"), api.ActionsRequest{Tool: "computer_20251124"})
	if e := apiErr(t, err); e.Code != api.CodeNoDisplay || e.Status != 501 {
		t.Errorf("Act without a display: %+v", e)
	}
	_, err = c.Screenshot(ctx, client.Episode("e1"), api.ScreenshotOptions{}, &bytes.Buffer{})
	if e := apiErr(t, err); e.Code != api.CodeNoPools {
		t.Errorf("episode screenshot without pools: %+v", e)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Errorf("Health: %v", err)
	}
}

func TestToken(t *testing.T) {
	ctx := context.Background()
	// Trust no network, as a server behind a local proxy would.
	opts := web.Options{Token: "tok123", TrustedNets: []netip.Prefix{}}
	c, _ := newClient(t, opts)
	_, err := c.ListVMs(ctx)
	if e := apiErr(t, err); e.Code != api.CodeUnauthorized || e.Status != 401 {
		t.Errorf("without token: %+v", e)
	}
	c, _ = newClient(t, opts, client.WithToken("tok123"))
	if _, err := c.ListVMs(ctx); err != nil {
		t.Errorf("with token: %v", err)
	}
}

func TestFileTooLarge(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, web.Options{})
	vm, _ := c.CreateVM(ctx, api.CreateOptions{Image: "tiny"})
	if err := c.WriteFile(ctx, client.VM(vm.ID), "/big", strings.NewReader(""), api.MaxFileSize+1, 0o644); err == nil ||
		!strings.Contains(err.Error(), "exceed the limit") {
		t.Errorf("declared too-large upload: %v", err)
	}
	// The server enforces it too, for a body of unknown length.
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, api.MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(big)
	defer f.Close()
	err := c.WriteFile(ctx, client.VM(vm.ID), "/big", f, -1, 0o644)
	if e := apiErr(t, err); e.Code != api.CodeTooLarge || e.Status != 413 {
		t.Errorf("chunked upload of a too-large file: %+v", e)
	}
}

// A proxy's non-JSON error still reads as an *api.Error with the status.
func TestNonJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListVMs(context.Background())
	if e := apiErr(t, err); e.Status != 502 || e.Code != "http_502" || e.Message != "upstream unavailable" {
		t.Errorf("err = %+v", e)
	}
}

// IDs are escaped into the path, for VMs and episodes alike.
func TestEscapesIDs(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.EscapedPath())
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	ctx := context.Background()
	c.DestroyVM(ctx, "a/b c")
	c.Exec(ctx, client.Episode("e/1"), api.ExecRequest{Argv: []string{"true"}})
	want := []string{"/v1/vms/a%2Fb%20c", "/v1/episodes/e%2F1/exec"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("paths = %q, want %q", got, want)
	}
}

func TestConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := client.New("http://" + addr)
	if _, err := c.ListVMs(context.Background()); err == nil || !strings.Contains(err.Error(), "deskfarm serve") {
		t.Errorf("connection refused error = %v", err)
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x", "127.0.0.1:8080", "http://"} {
		if _, err := client.New(u); err == nil || !strings.Contains(err.Error(), "want http://") {
			t.Errorf("New(%q) = %v", u, err)
		}
	}
}

// On this host, the CLI finds the farm's control token in the state dir's
// file when $DESKFARM_TOKEN is unset; the file never goes to another host.
func TestTokenFile(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("tok123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{client.EnvTokenFile: file}
	getenv := func(k string) string { return env[k] }
	for server, want := range map[string]string{
		"http://127.0.0.1:8080":    "tok123",
		"http://localhost:8080":    "tok123",
		"http://[::1]:8080":        "tok123",
		"http://farm.example:8080": "",
		"http://192.0.2.7:8080":    "",
	} {
		if got := client.TokenFor(server, getenv, ""); got != want {
			t.Errorf("TokenFor(%s) = %q, want %q", server, got, want)
		}
	}
	env[client.EnvToken] = "from-env"
	if got := client.TokenFor("http://127.0.0.1:8080", getenv, ""); got != "from-env" {
		t.Errorf("$DESKFARM_TOKEN set: got %q", got)
	}
	delete(env, client.EnvToken)
	env[client.EnvTokenFile] = filepath.Join(t.TempDir(), "missing")
	if got := client.TokenFor("http://127.0.0.1:8080", getenv, ""); got != "" {
		t.Errorf("missing file: got %q", got)
	}
	// With $DESKFARM_TOKEN_FILE unset, the default file is read, and a
	// test's "" reads none.
	delete(env, client.EnvTokenFile)
	if got := client.TokenFor("http://127.0.0.1:8080", getenv, file); got != "tok123" {
		t.Errorf("default file: got %q", got)
	}
	if got := client.TokenFor("http://127.0.0.1:8080", getenv, ""); got != "" {
		t.Errorf("no default file: got %q", got)
	}

	// FromEnv against a farm that trusts no address.
	srv, _ := farmtest.Serve(t, web.Options{Token: "tok123", TrustedNets: []netip.Prefix{}})
	t.Setenv(client.EnvServer, srv.URL)
	t.Setenv(client.EnvToken, "")
	t.Setenv(client.EnvTokenFile, file)
	c, err := client.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListVMs(ctx); err != nil {
		t.Errorf("FromEnv with the token file: %v", err)
	}
}

// A cluster's failure codes are errors.Is-able sentinels, each matching
// its own code only; episode routes go through the agent asked.
func TestClusterErrors(t *testing.T) {
	codes := map[string]string{"/v1/episodes/ep-lost/reset": api.CodeNodeLost, "/v1/episodes": api.CodeClusterUnavailable,
		"/v1/episodes/ep-far/screenshot": api.CodeNodeUnreachable}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code := codes[r.URL.Path]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(api.Status(code))
		json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: code, Message: "node n2: " + code}})
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	ctx := context.Background()
	_, lost := c.Reset(ctx, client.Episode("ep-lost"))
	_, unavailable := c.StartEpisode(ctx, api.StartEpisodeRequest{Pool: "tiny"})
	_, unreachable := c.Screenshot(ctx, client.Episode("ep-far"), api.ScreenshotOptions{}, io.Discard)
	for _, tt := range []struct {
		err, want error
	}{{lost, client.ErrNodeLost}, {unavailable, client.ErrClusterUnavailable}, {unreachable, client.ErrNodeUnreachable}} {
		for _, other := range []error{client.ErrNodeLost, client.ErrClusterUnavailable, client.ErrNodeUnreachable} {
			if got := errors.Is(tt.err, other); got != (other == tt.want) {
				t.Errorf("errors.Is(%v, %v) = %v", tt.err, other, got)
			}
		}
	}
	if e := apiErr(t, lost); e.Status != http.StatusGone || !strings.Contains(e.Message, "node n2") {
		t.Errorf("node_lost: %+v", e)
	}
}
