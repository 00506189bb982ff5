package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/deskfarm/deskfarm/web"
	"github.com/spf13/cobra"
)

// cli runs deskfarm client commands against an httptest server of the
// real API over farmtest's in-memory farm.
type cli struct {
	t    *testing.T
	farm *vmmtest.Farm
	env  map[string]string
	// tokenFile is the Env's TokenFile: empty, as a test's should be.
	tokenFile string
}

func newCLI(t *testing.T, opts web.Options) *cli {
	t.Helper()
	srv, farm := farmtest.Serve(t, opts)
	// No token file: a farm serving on this host must not leak its token
	// into the tests.
	return &cli{t: t, farm: farm, env: map[string]string{"DESKFARM_SERVER": srv.URL,
		"DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token")}}
}

type result struct {
	stdout, stderr string
	exit           int // -1 when the command did not call Exit
	err            error
}

// run runs "deskfarm ARGS..." with stdin (nil: a terminal). Commands
// without a group ("create", "ls", ...) are vm's, as in the tests of the
// flag-based CLI this replaced.
func (c *cli) run(stdin []byte, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	res := result{exit: -1}
	in := bytes.NewReader(stdin)
	env := &Env{
		Stdin:       in,
		Stdout:      &out,
		Stderr:      &errb,
		Interactive: func(f any) bool { return f == any(in) && stdin == nil },
		Exit:        func(code int) { res.exit = code },
		Getenv:      func(k string) string { return c.env[k] },
		TokenFile:   c.tokenFile,
	}
	root := &cobra.Command{Use: "deskfarm", SilenceErrors: true, SilenceUsage: true}
	AddCommands(root, env)
	root.SetOut(&out)
	root.SetErr(&errb)
	switch args[0] {
	case "vm", "episode", "act", "screenshot", "mcp", "agent", "trajectories", "replay", "snapshot", "completion", "help", "--help":
	default:
		args = append([]string{"vm"}, args...)
	}
	root.SetArgs(args)
	res.err = root.Execute()
	res.stdout, res.stderr = out.String(), errb.String()
	return res
}

func (c *cli) mustRun(stdin []byte, args ...string) result {
	c.t.Helper()
	res := c.run(stdin, args...)
	if res.err != nil {
		c.t.Fatalf("deskfarm %s: %v\nstderr: %s", strings.Join(args, " "), res.err, res.stderr)
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
	var vm api.VM
	if err := json.Unmarshal([]byte(res.stdout), &vm); err != nil || vm.ID != "v02" || vm.Image != "desktop" || vm.Width != 1024 {
		t.Errorf("create --json printed %q (%v)", res.stdout, err)
	}

	if res = c.mustRun(nil, "ls", "-q"); res.stdout != "v01\nv02\n" {
		t.Errorf("ls -q printed %q", res.stdout)
	}
	res = c.mustRun(nil, "ls", "--json")
	var list api.VMList
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
	var rr api.ResetResponse
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
	if got := c.farm.FileOrNil("v01", "/usr/local/bin/run.sh"); !bytes.Equal(got, data) {
		t.Errorf("guest file = %q", got)
	}
	if mode := c.farm.FileMode("v01", "/usr/local/bin/run.sh"); mode != 0o750 {
		t.Errorf("mode = %#o, want the local file's 0750", mode)
	}
	c.mustRun([]byte("from stdin"), "put", "--mode", "0600", "v01", "-", "/etc/x")
	if got, mode := c.farm.FileOrNil("v01", "/etc/x"), c.farm.FileMode("v01", "/etc/x"); string(got) != "from stdin" || mode != 0o600 {
		t.Errorf("guest /etc/x = %q mode %#o", got, mode)
	}
	c.mustRun(nil, "put", "v01", "-", "/empty")
	if got, ok := c.farm.File("v01", "/empty"); !ok || len(got) != 0 {
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
	if err := os.Truncate(big, api.MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	res := c.run(nil, "put", "v01", big, "/big")
	if res.err == nil || !strings.Contains(res.err.Error(), "exceed the limit") {
		t.Errorf("put of a too-large file: %v", res.err)
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

// Flags may come before, between or after the positional arguments, and
// "--" ends them.
func TestCLIFlagPositions(t *testing.T) {
	c := newCLI(t, web.Options{})
	c.mustRun(nil, "create")
	c.mustRun([]byte("data"), "put", "v01", "-", "/f")
	dir := t.TempDir()
	for i, args := range [][]string{
		{"get", "v01", "/f", "-o", "OUT"},
		{"get", "-o", "OUT", "v01", "/f"},
		{"get", "v01", "-o", "OUT", "/f"},
		{"get", "v01", "--output=OUT", "/f"},
	} {
		out := filepath.Join(dir, strings.Repeat("x", i+1))
		for j := range args {
			args[j] = strings.ReplaceAll(args[j], "OUT", out)
		}
		c.mustRun(nil, args...)
		if got, err := os.ReadFile(out); err != nil || string(got) != "data" {
			t.Errorf("deskfarm vm %q wrote %q, %v", args, got, err)
		}
	}
	// After "--", "-o" is a path (which the server refuses, naming it).
	if res := c.run(nil, "get", "v01", "--", "-o"); res.err == nil || !strings.Contains(res.err.Error(), `path: "-o" is not absolute`) {
		t.Errorf("get v01 -- -o: %v", res.err)
	}
	if res := c.run(nil, "ls", "--bogus"); res.err == nil || !strings.Contains(res.err.Error(), "unknown flag: --bogus") {
		t.Errorf("unknown flag: %v", res.err)
	}
}

// Arguments the CLI can check itself are refused before any request,
// with what was wanted.
func TestCLIArgErrors(t *testing.T) {
	c := newCLI(t, web.Options{})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"rm"}, "want one or more VM IDs"},
		{[]string{"reset", "a", "b"}, "want a VM ID"},
		{[]string{"put", "v01", "-"}, "want ID LOCAL PATH"},
		{[]string{"create", "extra"}, "want no arguments"},
		{[]string{"put", "--mode", "999", "v01", "-", "/x"}, "--mode"},
		{[]string{"episode", "end"}, "want one or more episode IDs"},
		{[]string{"episode", "start", "--ttl", "x"}, "invalid argument"},
		{[]string{"act", "v01"}, "want VM JSON"},
		{[]string{"act", "v01", "{"}, "JSON argument"},
		{[]string{"act", "v01", `{"x":1}`}, "JSON must be"},
		{[]string{"screenshot"}, "want a VM ID"},
		{[]string{"exec", "--timeout", "soon", "v01", "--", "ls"}, "want seconds"},
	}
	for _, tt := range tests {
		res := c.run([]byte{}, tt.args...)
		if res.err == nil || !strings.Contains(res.err.Error(), tt.want) {
			t.Errorf("deskfarm %q: err %v, want it to say %q", tt.args, res.err, tt.want)
		}
	}
}

// The server's answer reaches the user with its code and field.
func TestCLIEpisodesWithoutPools(t *testing.T) {
	c := newCLI(t, web.Options{})
	res := c.run(nil, "episode", "start", "--pool", "desktop")
	if res.err == nil || !strings.Contains(res.err.Error(), "start episode") || !strings.Contains(res.err.Error(), "no_pools, HTTP 501") {
		t.Errorf("episode start: %v", res.err)
	}
	res = c.run(nil, "screenshot", "v01", "-o", filepath.Join(t.TempDir(), "s.png"))
	if res.err == nil || !strings.Contains(res.err.Error(), "no_display") {
		t.Errorf("screenshot: %v", res.err)
	}
}

func TestActBody(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"action":"left_click","coordinate":[1,2]}`, `{"input":{"action":"left_click","coordinate":[1,2]},"tool":"computer_20251124"}`},
		{`{"tool":"computer_20250124","input":{"action":"screenshot"}}`, `{"tool":"computer_20250124","input":{"action":"screenshot"}}`},
		{`{"kind":"click","x":1,"y":2}`, `{"action":{"kind":"click","x":1,"y":2}}`},
		{`[{"kind":"screenshot"}]`, `{"actions":[{"kind":"screenshot"}]}`},
		{`{"action":{"kind":"screenshot"}}`, `{"action":{"kind":"screenshot"}}`},
	}
	for _, tt := range tests {
		got, err := actBody(tt.in, "computer_20251124")
		if err != nil || string(got) != tt.want {
			t.Errorf("actBody(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// The client commands do not link the server: that is what lets the CLI,
// package client and users share the wire types without pulling in the
// farm (issue 8).
func TestNoServerDependencies(t *testing.T) {
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to list dependencies with")
		}
	}
	for _, pkg := range []string{".", "../../client", "../../api", "../../mcpserver", "../../agentloop", "../replay"} {
		out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{
				"github.com/deskfarm/deskfarm/pool", "github.com/deskfarm/deskfarm/vnc",
				"github.com/deskfarm/deskfarm/vmm", "github.com/deskfarm/deskfarm/desk",
				"github.com/deskfarm/deskfarm/web", "github.com/deskfarm/deskfarm/actions",
				"github.com/deskfarm/deskfarm/player", "github.com/deskfarm/deskfarm/vocab",
				"github.com/prometheus/",
			} {
				if dep == banned || strings.HasPrefix(dep, banned+"/") || strings.HasPrefix(dep, banned) && strings.HasSuffix(banned, "/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}

// A cluster agent's episode: start prints where it lives.
func TestCLIEpisodeStartShowsNode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.Episode{ID: "ep-0123456789ab", VM: "v03", Pool: "tiny", Warm: true,
			ViewerURL: "http://10.0.0.7:8080/vms/v03", Node: "n2", URL: "http://10.0.0.7:8080"})
	}))
	defer srv.Close()
	c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": srv.URL, "DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token")}}
	res := c.run(nil, "episode", "start", "--pool", "tiny")
	if res.err != nil || !strings.Contains(res.stdout, "ep-0123456789ab\tvm v03") || !strings.Contains(res.stdout, "\nnode n2\thttp://10.0.0.7:8080\n") {
		t.Errorf("episode start: %v\n%s", res.err, res.stdout)
	}
}
