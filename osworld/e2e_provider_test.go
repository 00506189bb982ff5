package osworld_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/osworld"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// providerScript makes DesktopEnv's calls in DesktopEnv's order (start, get
// address, revert, start again, stop) with the real provider, checking the
// address and the OSWorld server behind it.
const providerScript = `
import sys, requests
sys.path.insert(0, sys.argv[1])
from deskfarm_osworld import DeskfarmProvider
p = DeskfarmProvider()
p.start_emulator("deskfarm:osworld", True, "Ubuntu")
addr = p.get_ip_address("deskfarm:osworld")
host, server, chromium, vnc, vlc = addr.split(":")
r = requests.post("http://%s:%s/execute" % (host, server), json={"command": ["python", "-c", "import pyautogui; print(pyautogui.size())"], "shell": False}, timeout=120)
assert r.status_code == 200 and r.json()["returncode"] == 0, r.text
print("size", r.json()["output"].strip())
assert p.revert_to_snapshot("deskfarm:osworld", "init_state") is None
p.start_emulator("deskfarm:osworld", True, "Ubuntu")
assert p.get_ip_address("deskfarm:osworld") == addr
p.stop_emulator("deskfarm:osworld")
print("address", addr)
`

func TestE2EOSWorldProviderAgainstFarm(t *testing.T) {
	m := testenv.Manager(t, "osworld")
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Unavailable(t, "no python3")
	}
	if err := exec.Command("python3", "-c", "import requests").Run(); err != nil {
		testenv.Unavailable(t, "no python3-requests (scripts/setup-host.sh)")
	}
	ctx, srv := osworldFarm(t, m)
	_, file, _, _ := runtime.Caller(0)
	pyDir := filepath.Join(filepath.Dir(file), "..", "python")
	cmd := exec.CommandContext(ctx, "python3", "-c", providerScript, pyDir)
	cmd.Env = append(os.Environ(), "DESKFARM_URL="+srv.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("provider: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "size Size(width=1920, height=1080)") || !strings.Contains(string(out), "address 127.0.0.1:") {
		t.Fatalf("provider output:\n%s", out)
	}
	t.Logf("%s", out)
}

// osworldFarm serves deskfarm's API on m, with the default config's pool
// osworld (none warm) and the per-VM OSWorld ports, until the test ends.
func osworldFarm(t *testing.T, m *vmm.Manager) (context.Context, *httptest.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	desks := desk.NewPool(m, log)
	pools, err := pool.New(ctx, m, pool.DefaultConfig("", 0), pool.Options{StateDir: t.TempDir(), Log: log})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ports := &osworld.Ports{Farm: m, Desks: desks, Log: log}
	done := make(chan error, 1)
	go func() { done <- ports.Run(ctx) }()
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Pools: pools, Logger: log, OSWorldAddress: ports.Address}))
	t.Cleanup(func() { srv.Close(); pools.Close(); cancel(); <-done; desks.Close() })
	return ctx, srv
}
