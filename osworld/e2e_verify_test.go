package osworld_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// /execute_with_verification and /setup/download_file on an osworld VM
// with user networking: the checks poll the real window list (wmctrl) and
// shell, and the guest downloads from a server on the host's loopback
// (10.0.2.2 in the guest).
func TestE2EOSWorldVerifyAndDownload(t *testing.T) {
	m := testenv.Manager(t, "osworld")
	pool := desk.NewPool(m, nil)
	t.Cleanup(pool.Close)
	vm, err := m.Create(context.Background(), vmm.CreateOptions{Image: "osworld", MemoryMiB: 2048, VCPUs: 2, Network: vmm.NetworkUser})
	if err != nil {
		t.Fatal(err)
	}
	c := serveVM(t, m, pool, vm)

	type verifyOut struct {
		Status       string  `json:"status"`
		Output       string  `json:"output"`
		ReturnCode   int     `json:"returncode"`
		Verification string  `json:"verification"`
		WaitTime     float64 `json:"wait_time"`
	}
	verify := func(t *testing.T, body map[string]any) (int, verifyOut) {
		t.Helper()
		code, b := c.json("/setup/execute_with_verification", body)
		var v verifyOut
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%d %s: %v", code, b, err)
		}
		return code, v
	}

	t.Run("verification waits for the window", func(t *testing.T) {
		// sleep, not a shell: bash's prompt would retitle the window.
		code, v := verify(t, map[string]any{"command": "xterm -title deskfarm-verify-e2e -e sleep 600 >/dev/null 2>&1 &", "shell": true,
			"verification": map[string]any{"window_exists": "DESKFARM-Verify-E2E"}, "max_wait_time": 120})
		if code != 200 || v.Status != "success" || v.Verification != "passed" {
			t.Fatalf("%d %+v; windows: %q", code, v, c.exec("wmctrl", "-l").Output)
		}
		if out := c.exec("wmctrl", "-l"); !strings.Contains(out.Output, "deskfarm-verify-e2e") {
			t.Fatalf("window gone after a pass: %q", out.Output)
		}
	})

	t.Run("verification waits for a command to succeed", func(t *testing.T) {
		code, v := verify(t, map[string]any{"command": "(sleep 3; touch /tmp/deskfarm-verify-flag) >/dev/null 2>&1 &", "shell": true,
			"verification": map[string]any{"command_success": "test -e /tmp/deskfarm-verify-flag"}, "max_wait_time": 60, "check_interval": 0.5})
		if code != 200 || v.Verification != "passed" || v.WaitTime < 1 {
			t.Fatalf("%d %+v", code, v)
		}
	})

	t.Run("verification that never holds is a 500", func(t *testing.T) {
		code, v := verify(t, map[string]any{"command": []string{"echo", "ran"},
			"verification": map[string]any{"command_success": "test -e /nonexistent"}, "max_wait_time": 3})
		if code != 500 || v.Status != "verification_failed" || v.Verification != "failed" || v.WaitTime != 3 || v.Output != "ran\n" {
			t.Fatalf("%d %+v", code, v)
		}
	})

	t.Run("the guest downloads from the host", func(t *testing.T) {
		data := make([]byte, 150<<10)
		rand.Read(data)
		var missing atomic.Int32
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/data.bin" {
				w.Write(data)
				return
			}
			missing.Add(1)
			http.NotFound(w, r)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		base := fmt.Sprintf("http://10.0.2.2:%d", ln.Addr().(*net.TCPAddr).Port)

		code, b := c.json("/setup/download_file", map[string]any{"url": base + "/data.bin", "path": "~/Downloads/e2e/data.bin"})
		if code != 200 || string(b) != fmt.Sprintf("File downloaded successfully: %d bytes", len(data)) {
			t.Fatalf("download: %d %s", code, b)
		}
		form := url.Values{"file_path": {"/home/user/Downloads/e2e/data.bin"}}
		if code, got := c.do("POST", "/file", "application/x-www-form-urlencoded", []byte(form.Encode())); code != 200 || !bytes.Equal(got, data) {
			t.Fatalf("/file: %d, %d bytes", code, len(got))
		}
		if out := c.exec("stat", "-c", "%U", "/home/user/Downloads/e2e/data.bin", "/home/user/Downloads/e2e"); out.Output != "user\nuser\n" {
			t.Fatalf("owners: %+v", out)
		}
		code, b = c.json("/setup/download_file", map[string]any{"url": base + "/missing", "path": "~/Downloads/missing"})
		want := "Failed to download " + base + "/missing. No retries left. Error: 404 Client Error: Not Found for url: " + base + "/missing"
		if code != 500 || string(b) != want || missing.Load() != 3 {
			t.Fatalf("404: %d %q (%d fetches), want %q after 3", code, b, missing.Load(), want)
		}
	})
}
