package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// memFarm is an in-memory vmm.Farm for round-trip tests of the CLI and
// client through the real HTTP handler. It boots nothing.
type memFarm struct {
	mu        sync.Mutex
	vms       map[string]vmm.VM
	files     map[string][]byte
	modes     map[string]uint32
	n         int
	destroyed int
}

var _ vmm.Farm = (*memFarm)(nil)

func newMemFarm() *memFarm {
	return &memFarm{vms: map[string]vmm.VM{}, files: map[string][]byte{}, modes: map[string]uint32{}}
}

func (f *memFarm) lookup(id string) error {
	if _, ok := f.vms[id]; !ok {
		return fmt.Errorf("vm %s: %w", id, vmm.ErrNotFound)
	}
	return nil
}

func (f *memFarm) Create(_ context.Context, o vmm.CreateOptions) (vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.Image != "desktop" && o.Image != "tiny" {
		return vmm.VM{}, fmt.Errorf("create vm: image %q: %w", o.Image, vmm.ErrUnknownImage)
	}
	f.n++
	vm := vmm.VM{ID: fmt.Sprintf("v%02d", f.n), Image: o.Image, State: vmm.StateReady, Accel: "tcg",
		MemoryMiB: cmp(o.MemoryMiB, vmm.DefaultMemoryMiB), VCPUs: cmp(o.VCPUs, vmm.DefaultVCPUs),
		Width: cmp(o.Width, vmm.DefaultWidth), Height: cmp(o.Height, vmm.DefaultHeight),
		CreatedAt: time.Now().Add(time.Duration(f.n) * time.Millisecond), BootSeconds: 34.2}
	f.vms[vm.ID] = vm
	return vm, nil
}

func cmp(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (f *memFarm) List(context.Context) ([]vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var vms []vmm.VM
	for _, vm := range f.vms {
		vms = append(vms, vm)
	}
	return vms, nil
}

func (f *memFarm) Get(_ context.Context, id string) (vmm.VM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vms[id], f.lookup(id)
}

func (f *memFarm) Destroy(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return err
	}
	delete(f.vms, id)
	f.destroyed++
	return nil
}

func (f *memFarm) Reset(_ context.Context, id string) (vmm.ResetResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return vmm.ResetResult{Duration: 310 * time.Millisecond}, f.lookup(id)
}

// Exec understands three programs: cat (stdin to stdout), env, and fail
// (writes its args to stderr and exits 7).
func (f *memFarm) Exec(_ context.Context, id string, req vmm.ExecRequest) (vmm.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return vmm.ExecResult{}, err
	}
	switch req.Argv[0] {
	case "cat":
		return vmm.ExecResult{Stdout: req.Stdin}, nil
	case "env":
		return vmm.ExecResult{Stdout: []byte(strings.Join(req.Env, "\n"))}, nil
	case "fail":
		return vmm.ExecResult{ExitCode: 7, Stderr: []byte(strings.Join(req.Argv[1:], " "))}, nil
	case "timeout":
		return vmm.ExecResult{}, fmt.Errorf("exec in vm %s: after %s: %w", id, req.Timeout, vmm.ErrTimeout)
	}
	return vmm.ExecResult{ExitCode: 127}, nil
}

func (f *memFarm) ReadFile(_ context.Context, id, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return nil, err
	}
	data, ok := f.files[id+path]
	if !ok {
		return nil, fmt.Errorf("read %s in vm %s: no such file: %w", path, id, vmm.ErrAgent)
	}
	return data, nil
}

func (f *memFarm) WriteFile(_ context.Context, id, path string, data []byte, mode uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.lookup(id); err != nil {
		return err
	}
	f.files[id+path], f.modes[id+path] = data, mode
	return nil
}

// cli runs deskfarm vm commands against an httptest server on a memFarm.
type cli struct {
	t    *testing.T
	farm *memFarm
	srv  *httptest.Server
	env  map[string]string
}

func newCLI(t *testing.T, opts web.Options) *cli {
	t.Helper()
	farm := newMemFarm()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(web.NewServer(farm, opts))
	t.Cleanup(srv.Close)
	return &cli{t: t, farm: farm, srv: srv, env: map[string]string{"DESKFARM_SERVER": srv.URL}}
}

type result struct {
	stdout, stderr string
	exit           int // -1 when the command did not call exit
	err            error
}

// run runs "deskfarm vm ARGS..." with stdin (nil: a terminal).
func (c *cli) run(stdin []byte, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	res := result{exit: -1}
	saved := vmio
	t := c.t
	t.Cleanup(func() { vmio = saved })
	vmio = vmIO{
		stdin:  bytes.NewReader(stdin),
		stdout: &out,
		stderr: &errb,
		interactive: func(f any) bool {
			return f == vmio.stdin && stdin == nil
		},
		exit:   func(code int) { res.exit = code },
		getenv: func(k string) string { return c.env[k] },
	}
	res.err = cmdVM(args)
	vmio = saved
	res.stdout, res.stderr = out.String(), errb.String()
	return res
}

func (c *cli) mustRun(stdin []byte, args ...string) result {
	c.t.Helper()
	res := c.run(stdin, args...)
	if res.err != nil {
		c.t.Fatalf("deskfarm vm %s: %v\nstderr: %s", strings.Join(args, " "), res.err, res.stderr)
	}
	return res
}

func TestCLICreateListRemove(t *testing.T) {
	c := newCLI(t, web.Options{})
	res := c.mustRun(nil, "create", "--image", "tiny", "--memory", "512", "--vcpus", "1")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], "v01 ") {
		t.Fatalf("create printed %q", res.stdout)
	}
	for _, want := range []string{"tiny", "ready", "512 MiB", "1280x800", "34.2s"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("create row %q lacks %q", lines[1], want)
		}
	}

	res = c.mustRun(nil, "create", "--json", "--width", "1024", "--height", "768")
	var vm vmm.VM
	if err := json.Unmarshal([]byte(res.stdout), &vm); err != nil || vm.ID != "v02" || vm.Image != "desktop" || vm.Width != 1024 {
		t.Errorf("create --json printed %q (%v)", res.stdout, err)
	}

	if res = c.mustRun(nil, "ls", "-q"); res.stdout != "v01\nv02\n" {
		t.Errorf("ls -q printed %q", res.stdout)
	}
	res = c.mustRun(nil, "ls", "--json")
	var list web.VMList
	if err := json.Unmarshal([]byte(res.stdout), &list); err != nil || len(list.VMs) != 2 {
		t.Errorf("ls --json printed %q (%v)", res.stdout, err)
	}

	// One unknown ID does not stop the others; the error names it and the server's code.
	res = c.run(nil, "rm", "v01", "nope", "v02")
	if res.stdout != "v01\nv02\n" {
		t.Errorf("rm printed %q", res.stdout)
	}
	if res.err == nil || !strings.Contains(res.err.Error(), "remove vm nope") || !strings.Contains(res.err.Error(), "not_found, HTTP 404") {
		t.Errorf("rm error = %v", res.err)
	}
	if res = c.mustRun(nil, "ls"); strings.Count(res.stdout, "\n") != 1 {
		t.Errorf("ls after rm printed %q", res.stdout)
	}
}

func TestCLIServerErrors(t *testing.T) {
	c := newCLI(t, web.Options{})
	res := c.run(nil, "create", "--image", "windows")
	if res.err == nil || !strings.Contains(res.err.Error(), `image "windows"`) || !strings.Contains(res.err.Error(), "unknown_image") {
		t.Errorf("create unknown image: %v", res.err)
	}
	res = c.run(nil, "create", "--memory", "64")
	if res.err == nil || !strings.Contains(res.err.Error(), "memory_mib") || !strings.Contains(res.err.Error(), "invalid_request, HTTP 400") {
		t.Errorf("create small memory: %v", res.err)
	}
	if res = c.run(nil, "reset", "nope"); res.err == nil || !strings.Contains(res.err.Error(), "not_found") {
		t.Errorf("reset unknown: %v", res.err)
	}
	c.env["DESKFARM_SERVER"] = "ftp://x"
	if res = c.run(nil, "ls"); res.err == nil || !strings.Contains(res.err.Error(), "want http://") {
		t.Errorf("bad server URL: %v", res.err)
	}
}

func TestCLIConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newCLI(t, web.Options{})
	res := c.run(nil, "ls", "--server", "http://"+addr)
	if res.err == nil || !strings.Contains(res.err.Error(), "deskfarm serve") {
		t.Errorf("connection refused error = %v", res.err)
	}
}

func TestCLIReset(t *testing.T) {
	c := newCLI(t, web.Options{})
	c.mustRun(nil, "create")
	if res := c.mustRun(nil, "reset", "v01"); res.stdout != "v01 reset in 0.31s\n" {
		t.Errorf("reset printed %q", res.stdout)
	}
	res := c.mustRun(nil, "reset", "v01", "--json")
	var rr web.ResetResponse
	if err := json.Unmarshal([]byte(res.stdout), &rr); err != nil || rr.ResetMS != 310 {
		t.Errorf("reset --json printed %q", res.stdout)
	}
}

func TestCLIExec(t *testing.T) {
	c := newCLI(t, web.Options{})
	c.mustRun(nil, "create")

	// Binary stdin goes through and comes back byte for byte.
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\n'}
	res := c.mustRun(bin, "exec", "v01", "--", "cat")
	if res.stdout != string(bin) || res.exit != -1 {
		t.Errorf("cat: stdout %q, exit %d", res.stdout, res.exit)
	}
	// A terminal stdin is not read; -n skips a piped one.
	if res = c.mustRun(nil, "exec", "v01", "--", "cat"); res.stdout != "" {
		t.Errorf("cat with terminal stdin printed %q", res.stdout)
	}
	if res = c.mustRun([]byte("x"), "exec", "-n", "v01", "--", "cat"); res.stdout != "" {
		t.Errorf("cat -n printed %q", res.stdout)
	}
	// Guest stderr goes to stderr; the guest's exit code becomes ours.
	res = c.mustRun(nil, "exec", "v01", "--", "fail", "--verbose", "-x")
	if res.stderr != "--verbose -x" || res.stdout != "" || res.exit != 7 {
		t.Errorf("fail: stdout %q, stderr %q, exit %d", res.stdout, res.stderr, res.exit)
	}
	// Without "--", flags end at the ID and argv keeps its own.
	if res = c.mustRun(nil, "exec", "v01", "fail", "-l"); res.stderr != "-l" || res.exit != 7 {
		t.Errorf("fail without --: stderr %q, exit %d", res.stderr, res.exit)
	}
	// Flags may follow the ID when "--" is there.
	res = c.mustRun(nil, "exec", "v01", "--env", "A=1", "--env", "B=2", "--", "env")
	if res.stdout != "A=1\nB=2" {
		t.Errorf("env printed %q", res.stdout)
	}
	res = c.run(nil, "exec", "--timeout", "2m", "v01", "--", "timeout")
	if res.err == nil || !strings.Contains(res.err.Error(), "after 2m0s") || !strings.Contains(res.err.Error(), "timeout, HTTP 504") {
		t.Errorf("timeout: %v", res.err)
	}
	res = c.run(nil, "exec", "--timeout", "4000", "v01", "--", "cat")
	if res.err == nil || !strings.Contains(res.err.Error(), "timeout_s") {
		t.Errorf("long timeout: %v", res.err)
	}
	if res = c.run(nil, "exec", "v01"); res.err == nil || !strings.Contains(res.err.Error(), "ARGV") {
		t.Errorf("exec without argv: %v", res.err)
	}
	if res = c.run(nil, "exec", "v01", "--"); res.err == nil {
		t.Error("exec with empty argv succeeded")
	}
}

func TestCLIFiles(t *testing.T) {
	c := newCLI(t, web.Options{})
	c.mustRun(nil, "create")
	dir := t.TempDir()
	script := filepath.Join(dir, "run.sh")
	data := []byte("#!/bin/sh\necho hi\n\x00\xff")
	if err := os.WriteFile(script, data, 0o750); err != nil {
		t.Fatal(err)
	}
	c.mustRun(nil, "put", "v01", script, "/usr/local/bin/run.sh")
	if got := c.farm.files["v01/usr/local/bin/run.sh"]; !bytes.Equal(got, data) {
		t.Errorf("guest file = %q", got)
	}
	if mode := c.farm.modes["v01/usr/local/bin/run.sh"]; mode != 0o750 {
		t.Errorf("mode = %#o, want the local file's 0750", mode)
	}
	c.mustRun([]byte("from stdin"), "put", "--mode", "0600", "v01", "-", "/etc/x")
	if got, mode := c.farm.files["v01/etc/x"], c.farm.modes["v01/etc/x"]; string(got) != "from stdin" || mode != 0o600 {
		t.Errorf("guest /etc/x = %q mode %#o", got, mode)
	}
	c.mustRun(nil, "put", "v01", "-", "/empty")
	if got, ok := c.farm.files["v01/empty"]; !ok || len(got) != 0 {
		t.Errorf("empty upload = %q, %v", got, ok)
	}

	if res := c.mustRun(nil, "get", "v01", "/usr/local/bin/run.sh"); res.stdout != string(data) {
		t.Errorf("get printed %q", res.stdout)
	}
	out := filepath.Join(dir, "copy")
	c.mustRun(nil, "get", "v01", "/usr/local/bin/run.sh", "-o", out)
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
		t.Errorf("get -o wrote %q, %v", got, err)
	}

	// A failed get leaves no file behind.
	missing := filepath.Join(dir, "missing")
	res := c.run(nil, "get", "-o", missing, "v01", "/nope")
	if res.err == nil || !strings.Contains(res.err.Error(), "agent_error") {
		t.Errorf("get missing: %v", res.err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("failed get left %s", missing)
	}
	if res = c.run(nil, "put", "v01", script, "relative"); res.err == nil || !strings.Contains(res.err.Error(), "path") {
		t.Errorf("put to relative path: %v", res.err)
	}
	if res = c.run(nil, "get", "v01"); res.err == nil || !strings.Contains(res.err.Error(), "wrong number of arguments") {
		t.Errorf("get without path: %v", res.err)
	}
}

func TestCLIFileTooLarge(t *testing.T) {
	c := newCLI(t, web.Options{})
	c.mustRun(nil, "create")
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, vmm.MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	res := c.run(nil, "put", "v01", big, "/big")
	if res.err == nil || !strings.Contains(res.err.Error(), "exceed the limit") {
		t.Errorf("put of a too-large file: %v", res.err)
	}
	// The server enforces it too, for clients that do not check.
	cl, _ := newAPIClient(c.srv.URL, "")
	f, _ := os.Open(big)
	defer f.Close()
	err := cl.writeFile(context.Background(), "v01", "/big", f, -1, 0o644)
	if ae, ok := err.(*apiError); !ok || ae.Code != web.CodeTooLarge || ae.Status != 413 {
		t.Errorf("chunked upload of a too-large file: %v", err)
	}
}

func TestCLIToken(t *testing.T) {
	// Trust no network, as a server behind a local proxy would.
	c := newCLI(t, web.Options{Token: "tok123", TrustedNets: []netip.Prefix{}})
	res := c.run(nil, "ls")
	if res.err == nil || !strings.Contains(res.err.Error(), "unauthorized, HTTP 401") {
		t.Errorf("ls without token: %v", res.err)
	}
	c.env["DESKFARM_TOKEN"] = "tok123"
	c.mustRun(nil, "ls")
}

// A proxy's non-JSON error still reads as an error with the status.
func TestClientNonJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
	}))
	defer srv.Close()
	cl, err := newAPIClient(srv.URL+"/", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.listVMs(context.Background())
	ae, ok := err.(*apiError)
	if !ok || ae.Status != 502 || ae.Code != "http_502" || ae.Message != "upstream unavailable" {
		t.Errorf("err = %#v", err)
	}
}

// IDs are escaped into the path.
func TestClientEscapesIDs(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cl, _ := newAPIClient(srv.URL, "")
	if err := cl.deleteVM(context.Background(), "a/b c"); err != nil {
		t.Fatal(err)
	}
	if got != "/v1/vms/a%2Fb%20c" {
		t.Errorf("path = %q", got)
	}
}

func TestParseInterspersed(t *testing.T) {
	tests := []struct {
		args []string
		pos  []string
		o    string
	}{
		{[]string{"ID", "PATH", "-o", "F"}, []string{"ID", "PATH"}, "F"},
		{[]string{"-o", "F", "ID", "PATH"}, []string{"ID", "PATH"}, "F"},
		{[]string{"ID", "-o", "F", "PATH"}, []string{"ID", "PATH"}, "F"},
		{[]string{"ID", "--", "-o", "F"}, []string{"ID", "-o", "F"}, ""},
		{[]string{"ID", "-", "PATH"}, []string{"ID", "-", "PATH"}, ""},
	}
	for _, tt := range tests {
		f := newVMFlags("get")
		o := f.String("o", "", "")
		pos, err := f.parse(tt.args, 0, -1)
		if err != nil || !slices.Equal(pos, tt.pos) || *o != tt.o {
			t.Errorf("parse(%q) = %q, -o %q, %v; want %q, -o %q", tt.args, pos, *o, err, tt.pos, tt.o)
		}
	}
}

func (f *memFarm) Subscribe(ctx context.Context) <-chan vmm.Event {
	ch := make(chan vmm.Event)
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

func (f *memFarm) SetLabel(context.Context, string, string, string) error { return nil }
