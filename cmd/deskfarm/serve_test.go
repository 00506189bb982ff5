package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testbuf"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/vmm"
)

// withFarm points newFarm at farm for one test and records its config.
func withFarm(t *testing.T, farm vmm.Farm, closed *int) *farmConfig {
	t.Helper()
	saved := newFarm
	t.Cleanup(func() { newFarm = saved })
	var got farmConfig
	newFarm = func(ctx context.Context, cfg farmConfig) (vmm.Farm, func() error, error) {
		got = cfg
		return farm, func() error { *closed++; return nil }, nil
	}
	return &got
}

func waitFor(t *testing.T, out *testbuf.Buffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(out.String(), want) {
			return
		}
	}
	t.Fatalf("output %q never contained %q", out.String(), want)
}

// Serve answers, then on cancel shuts down, closes the farm once, and
// leaves the VMs alone.
func TestServeShutdown(t *testing.T) {
	farm := farmtest.NewFarm()
	farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"})
	closed := 0
	withFarm(t, farm, &closed)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out testbuf.Buffer
	done := make(chan error, 1)
	stopped := false
	go func() {
		done <- runServe(ctx, func() { stopped = true }, farmConfig{Accel: "tcg", StateDir: t.TempDir()}, ln, &out)
	}()
	url := "http://" + ln.Addr().String()
	waitFor(t, &out, "deskfarm: serving on "+url+"\n")

	resp, err := http.Get(url + "/v1/vms")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /v1/vms: %s", resp.Status)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runServe: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runServe did not return after cancel")
	}
	if closed != 1 || !stopped {
		t.Errorf("farm closed %d times, stop called %v", closed, stopped)
	}
	if farm.Destroyed != 0 || farm.Count() != 1 {
		t.Errorf("shutdown destroyed VMs")
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
}

// serveFor runs runServe on a loopback port until the test ends and
// returns its URL.
func serveFor(t *testing.T, cfg farmConfig) (string, *testbuf.Buffer) {
	t.Helper()
	closed := 0
	withFarm(t, farmtest.NewFarm(), &closed)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &testbuf.Buffer{}
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, func() {}, cfg, ln, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runServe: %v", err)
		}
	})
	waitFor(t, out, "serving on")
	return "http://" + ln.Addr().String(), out
}

// get sends a request with an optional bearer token and Host and returns
// the status.
func get(t *testing.T, method, url, token, host string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readToken reads a token file and checks that only its owner can read it.
func readToken(t *testing.T, path string) string {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Serve keeps a control and a viewer token in 0600 files of the state
// dir, generated once and reused after; --trust-loopback=false makes
// loopback clients show one; the viewer token only watches.
func TestServeTokens(t *testing.T) {
	dir := t.TempDir()
	// An older file with a wider mode is replaced by a 0600 one.
	if err := os.WriteFile(filepath.Join(dir, "viewer-token"), []byte("old-viewer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	url, out := serveFor(t, farmConfig{StateDir: dir, NoLoopbackTrust: true})
	ctl, viewer := readToken(t, filepath.Join(dir, "token")), readToken(t, filepath.Join(dir, "viewer-token"))
	if len(ctl) != 64 || viewer != "old-viewer" {
		t.Fatalf("control token %q, viewer token %q (want a new one and the kept one)", ctl, viewer)
	}
	if strings.Contains(out.String(), ctl) {
		t.Errorf("serve printed the control token: %q", out.String())
	}
	for _, c := range []struct {
		method, token string
		want          int
	}{
		{"GET", "", 401}, {"GET", ctl, 200}, {"GET", viewer, 200},
		{"POST", viewer, 403}, {"POST", ctl, 404}, // no such VM: past the guards
	} {
		path := "/v1/vms"
		if c.method == "POST" {
			path = "/v1/vms/nope/reset"
		}
		if got := get(t, c.method, url+path, c.token, ""); got != c.want {
			t.Errorf("%s %s with token %q: %d, want %d", c.method, path, c.token, got, c.want)
		}
	}

	// The next serve keeps the tokens; one given by flag replaces its file.
	dir2 := t.TempDir()
	for _, f := range []string{"token", "viewer-token"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		os.WriteFile(filepath.Join(dir2, f), b, 0o600)
	}
	url, _ = serveFor(t, farmConfig{StateDir: dir2, ViewerToken: "new-viewer", NoLoopbackTrust: true})
	if got := readToken(t, filepath.Join(dir2, "token")); got != ctl {
		t.Errorf("restart made a new control token %q, want the kept %q", got, ctl)
	}
	if got := readToken(t, filepath.Join(dir2, "viewer-token")); got != "new-viewer" {
		t.Errorf("viewer-token file %q after --viewer-token new-viewer", got)
	}
	if got := get(t, "GET", url+"/v1/vms", "new-viewer", ""); got != 200 {
		t.Errorf("the flag's viewer token: %d", got)
	}
}

// The Host check through serve: --listen's host and --allow-host names
// reach the farm, others get 421; loopback is trusted by default.
func TestServeAllowHost(t *testing.T) {
	url, _ := serveFor(t, farmConfig{StateDir: t.TempDir(), Listen: "127.0.0.1:0", AllowHosts: []string{"farm.example"}})
	for host, want := range map[string]int{"": 200, "farm.example": 200, "rebind.attacker.example:8080": 421} {
		if got := get(t, "GET", url+"/v1/vms", "", host); got != want {
			t.Errorf("Host %q: %d, want %d", host, got, want)
		}
	}
	if got := allowedHosts(farmConfig{Listen: "0.0.0.0:8080", AllowHosts: []string{"a"}}); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("allowed hosts with a wildcard --listen: %q", got)
	}
	if got := allowedHosts(farmConfig{Listen: "farm.lan:8080"}); !reflect.DeepEqual(got, []string{"farm.lan"}) {
		t.Errorf("allowed hosts with --listen farm.lan:8080: %q", got)
	}
}

func TestServeFlags(t *testing.T) {
	saved := newFarm
	t.Cleanup(func() { newFarm = saved })
	newFarm = nil
	if _, err := run(t, "serve", "--accel", "hvf"); err == nil || !strings.Contains(err.Error(), "auto, kvm or tcg") {
		t.Errorf("bad accel: %v", err)
	}
	if _, err := run(t, "serve", "extra"); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("extra args: %v", err)
	}
	if _, err := run(t, "serve", "--token", "same", "--viewer-token", "same"); err == nil || !strings.Contains(err.Error(), "same as --token") {
		t.Errorf("viewer token = control token: %v", err)
	}
	if _, err := run(t, "serve", "--listen", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "no VM backend") {
		t.Errorf("no backend: %v", err)
	}
	// The README's and Makefile's flags parse, and reach the farm config.
	var got farmConfig
	newFarm = func(ctx context.Context, cfg farmConfig) (vmm.Farm, func() error, error) {
		got = cfg
		return nil, nil, errors.New("stop here")
	}
	_, err := run(t, "serve", "--listen", "127.0.0.1:0", "--warm", "desktop", "--pools", "p.yaml", "--novnc-dir", "/nv",
		"--token", "tok", "--pool", "desktop.min_warm=2", "--pool", "desktop.max=3", "--accel", "tcg",
		"--viewer-token", "vtok", "--trust-loopback=false", "--allow-host", "a.example", "--allow-host", "b.example:443",
		"--trajectory-budget", "5GiB", "--trajectory-retention", "36h", "--ksm=false", "--memory-overcommit", "1.5", "--boot-timeout", "90s")
	if err == nil || !strings.Contains(err.Error(), "stop here") {
		t.Fatalf("serve: %v", err)
	}
	want := farmConfig{Listen: "127.0.0.1:0", StateDir: defaultStateDir, CacheDir: defaultCacheDir, Accel: "tcg",
		LibvirtSocket: defaultLibvirtSocket, Token: "tok", NoVNCDir: "/nv", Warm: "desktop", Pools: "p.yaml",
		PoolOverrides: []string{"desktop.min_warm=2", "desktop.max=3"},
		ViewerToken:   "vtok", NoLoopbackTrust: true, AllowHosts: []string{"a.example", "b.example:443"},
		TrajectoryBudget: 5 << 30, TrajectoryRetention: 36 * time.Hour, NoKSM: true, MemoryOvercommit: 1.5, BootTimeout: 90 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("farm config\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range [][]string{{"--memory-overcommit", "0.5"}, {"--trajectory-budget", "lots"}, {"--trajectory-budget", "-1GB"}, {"--trajectory-retention", "a week"}, {"--boot-timeout", "5s"}, {"--boot-timeout", "2h"}} {
		if _, err := run(t, append([]string{"serve"}, bad...)...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestTrajectoryFlagValues(t *testing.T) {
	for in, want := range map[string]int64{"20GiB": 20 << 30, "500MB": 500e6, "1048576": 1 << 20, "1.5 KiB": 1536} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "-1d": -24 * time.Hour, "-1s": -time.Second} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("parseRetention(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "0d", "", "x"} {
		if _, err := parseRetention(in); err == nil {
			t.Errorf("parseRetention(%q) passed", in)
		}
	}
}
