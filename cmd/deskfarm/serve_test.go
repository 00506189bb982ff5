package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/vmm"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

func waitFor(t *testing.T, out *syncBuffer, want string) {
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
	cfg := withFarm(t, farm, &closed)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	stopped := false
	go func() {
		done <- runServe(ctx, func() { stopped = true }, farmConfig{Accel: "tcg"}, ln, &out)
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
	if cfg.Token != "" {
		t.Errorf("loopback serve got a token %q", cfg.Token)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Error("still serving after shutdown")
	}
}

// Listening beyond loopback without a token generates one, prints it and
// hands it to the farm config.
func TestServeGeneratesToken(t *testing.T) {
	closed := 0
	cfg := withFarm(t, farmtest.NewFarm(), &closed)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skipf("cannot listen on 0.0.0.0: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, func() {}, farmConfig{}, ln, &out) }()
	waitFor(t, &out, "serving on")
	cancel()
	<-done
	if len(cfg.Token) != 64 || !strings.Contains(out.String(), "DESKFARM_TOKEN="+cfg.Token+"\n") {
		t.Errorf("token %q, output %q", cfg.Token, out.String())
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
		"--token", "tok", "--pool", "desktop.min_warm=2", "--pool", "desktop.max=3", "--accel", "tcg")
	if err == nil || !strings.Contains(err.Error(), "stop here") {
		t.Fatalf("serve: %v", err)
	}
	want := farmConfig{Listen: "127.0.0.1:0", StateDir: defaultStateDir, CacheDir: defaultCacheDir, Accel: "tcg",
		LibvirtSocket: defaultLibvirtSocket, Token: "tok", NoVNCDir: "/nv", Warm: "desktop", Pools: "p.yaml",
		PoolOverrides: []string{"desktop.min_warm=2", "desktop.max=3"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("farm config\n got %+v\nwant %+v", got, want)
	}
}
