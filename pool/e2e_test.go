package pool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// TestE2EEpisodes drives episodes on real tiny VMs through the HTTP API.
func TestE2EEpisodes(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	// Start clean and leave nothing: the pool state of this test's farm.
	os.Remove(filepath.Join(testenv.StateDir, pool.StateFileName))
	t.Cleanup(func() { os.Remove(filepath.Join(testenv.StateDir, pool.StateFileName)) })
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "tiny", Image: "tiny", MemoryMiB: 256, VCPUs: 1, MinWarm: 2, Max: 3}}}
	cfg.SetDefaults()
	opts := pool.Options{StateDir: testenv.StateDir, ReapInterval: 200 * time.Millisecond, ReconcileInterval: time.Second}
	pm, err := pool.New(context.Background(), m, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { pm.Close() }()
	desks := desk.NewPool(m, nil)
	defer desks.Close()
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Pools: pm}))
	defer srv.Close()

	call := func(method, path string, in any, want int, out any) {
		t.Helper()
		var body bytes.Buffer
		if in != nil {
			json.NewEncoder(&body).Encode(in)
		}
		req, _ := http.NewRequest(method, srv.URL+path, &body)
		if in != nil {
			req.Header.Set("Content-Type", "application/json") // web refuses untyped bodies
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var raw json.RawMessage
		json.NewDecoder(resp.Body).Decode(&raw)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, raw)
		}
		if out != nil {
			json.Unmarshal(raw, out)
		}
	}
	waitWarm := func(n int) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for pm.Pools()[0].Warm < n {
			if time.Now().After(deadline) {
				t.Fatalf("pool never reached %d warm: %+v", n, pm.Pools())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitWarm(2)

	// Four sequential episodes, each clean.
	for i := 0; i < 4; i++ {
		var ep web.EpisodeResponse
		call("POST", "/v1/episodes", web.StartEpisodeRequest{Pool: "tiny", TTLS: 600}, 201, &ep)
		if !ep.Warm || ep.ViewerURL == "" {
			t.Fatalf("episode %d: %+v", i, ep)
		}
		var res web.ExecResponse
		call("POST", "/v1/episodes/"+ep.ID+"/exec", web.ExecRequest{Argv: []string{"sh", "-c", "ls /tmp/mark-* 2>/dev/null; touch /tmp/mark-" + ep.ID}}, 200, &res)
		if strings.TrimSpace(res.Stdout) != "" {
			t.Fatalf("episode %d (vm %s) sees a previous episode's file: %q", i, ep.VM, res.Stdout)
		}
		call("GET", "/v1/episodes/"+ep.ID+"/screenshot", nil, 200, nil)
		call("DELETE", "/v1/episodes/"+ep.ID, nil, 200, nil)
		call("POST", "/v1/episodes/"+ep.ID+"/exec", web.ExecRequest{Argv: []string{"true"}}, 410, nil)
	}

	// Three parallel episodes never share a VM (max 3).
	waitWarm(2)
	var (
		mu  sync.Mutex
		eps []web.EpisodeResponse
		wg  sync.WaitGroup
	)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ep web.EpisodeResponse
			call("POST", "/v1/episodes", web.StartEpisodeRequest{Pool: "tiny"}, 201, &ep)
			mu.Lock()
			eps = append(eps, ep)
			mu.Unlock()
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, ep := range eps {
		if seen[ep.VM] {
			t.Fatalf("two episodes on vm %s: %+v", ep.VM, eps)
		}
		seen[ep.VM] = true
	}
	var e web.ErrorResponse
	call("POST", "/v1/episodes", web.StartEpisodeRequest{Pool: "tiny"}, 429, &e)
	if e.Error.Code != web.CodePoolFull {
		t.Fatalf("fourth start: %+v", e)
	}

	// A restart of the pool manager (no graceful end) brings the leases back.
	pm.Close()
	pm, err = pool.New(context.Background(), m, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := pm.List(); len(got) != 3 {
		t.Fatalf("after restart: %d episodes, want 3: %+v", len(got), got)
	}
	if vms, _ := m.List(context.Background()); len(vms) != 3 {
		t.Fatalf("after restart: %d vms, want 3", len(vms))
	}
	srv.Config.Handler = web.NewServer(m, web.Options{Desks: desks, Pools: pm})

	// A killed QEMU: the next call fails clearly, the pool replaces the VM.
	dead := eps[0]
	if out, err := exec.Command("virsh", "-c", "qemu:///system", "destroy", vmm.DomainPrefix+dead.VM).CombinedOutput(); err != nil {
		t.Fatalf("virsh destroy: %v: %s", err, out)
	}
	call("POST", "/v1/episodes/"+dead.ID+"/exec", web.ExecRequest{Argv: []string{"true"}}, 410, &e)
	if e.Error.Code != web.CodeVMDead {
		t.Fatalf("call on dead vm: %+v", e)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got web.EpisodeResponse
		call("GET", "/v1/episodes/"+dead.ID, nil, 200, &got)
		if got.State == string(pool.EpisodeEnded) {
			if got.EndReason != pool.ReasonVMDied || !got.VMReplaced {
				t.Fatalf("dead episode: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead episode never ended: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := m.Get(context.Background(), dead.VM); err == nil {
		t.Fatal("dead vm not destroyed")
	}

	// TTL expiry: end the others, lease one for 1 s and watch it come back.
	call("DELETE", "/v1/episodes/"+eps[1].ID, nil, 200, nil)
	call("DELETE", "/v1/episodes/"+eps[2].ID, nil, 200, nil)
	waitWarm(2)
	var short web.EpisodeResponse
	call("POST", "/v1/episodes", web.StartEpisodeRequest{Pool: "tiny", TTLS: 1}, 201, &short)
	call("PUT", "/v1/episodes/"+short.ID+"/files?path=/tmp/ttl-mark", nil, 204, nil)
	time.Sleep(2 * time.Second)
	var got web.EpisodeResponse
	call("GET", "/v1/episodes/"+short.ID, nil, 200, &got)
	if got.State != string(pool.EpisodeEnded) || got.EndReason != pool.ReasonExpired {
		t.Fatalf("after ttl: %+v", got)
	}
	res, err := m.Exec(context.Background(), short.VM, vmm.ExecRequest{Argv: []string{"test", "-e", "/tmp/ttl-mark"}})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("expired episode's file still there (exit %d, %v)", res.ExitCode, err)
	}
	if p := pm.Pools()[0]; p.Leased != 0 {
		t.Fatalf("pool after expiry: %+v", p)
	}
	var pools web.PoolList
	call("GET", "/v1/pools", nil, 200, &pools)
	call("GET", "/metrics", nil, 200, nil)
}
