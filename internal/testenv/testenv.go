// Package testenv gates and sets up tests that need a real libvirtd, QEMU and
// built guest images. Such a test skips with its reason on a bare developer
// machine, and fails instead when DESKFARM_REQUIRE_VM or CI is set: in CI a
// skipped VM test is a failure.
package testenv

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/images"
	"github.com/deskfarm/deskfarm/vmm"
)

// StateDir is where test VMs live; apart from a serving farm's /var/lib/deskfarm
// so tests never adopt or remove a user's VMs.
const StateDir = "/var/lib/deskfarm-test"

// LockWait is how long a test waits for another test process (another
// package's tests, run concurrently by hand) to release StateDir.
const LockWait = 20 * time.Minute

// Required reports whether VM tests must run rather than skip.
func Required() bool {
	return os.Getenv("DESKFARM_REQUIRE_VM") != "" || os.Getenv("CI") != ""
}

// Unavailable skips or fails t with why.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("VM test cannot run: %s (DESKFARM_REQUIRE_VM/CI set, so this is a failure; run `make test`)", why)
	}
	t.Skipf("VM test skipped: %s (run `make test`)", why)
}

// RequireVM checks libvirtd and the named images are there.
func RequireVM(t testing.TB, imageNames ...string) *images.Store {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root")
	}
	if _, err := os.Stat(vmm.DefaultLibvirtSocket); err != nil {
		Unavailable(t, "libvirtd socket: "+err.Error())
	}
	st := &images.Store{}
	for _, n := range imageNames {
		if _, err := st.Get(n); err != nil {
			Unavailable(t, "image "+n+": "+err.Error())
		}
	}
	return st
}

// Manager returns a real vmm.Manager on StateDir. On cleanup it destroys
// every VM still there, so a failing test leaves nothing behind.
func Manager(t testing.TB, imageNames ...string) *vmm.Manager {
	t.Helper()
	return ManagerConfig(t, vmm.Config{}, imageNames...)
}

// ManagerConfig is Manager with cfg's other settings (StateDir, Images,
// LockWait and Log are the test's).
func ManagerConfig(t testing.TB, cfg vmm.Config, imageNames ...string) *vmm.Manager {
	t.Helper()
	st := RequireVM(t, imageNames...)
	cfg.StateDir, cfg.Images, cfg.LockWait = StateDir, vmm.StoreImages{Store: st}, LockWait
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := vmm.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("vmm.New: %v", err)
	}
	t.Cleanup(func() { Cleanup(t, m) })
	return m
}

// Cleanup destroys every VM m knows and closes it.
func Cleanup(t testing.TB, m *vmm.Manager) {
	t.Helper()
	vms, _ := m.List(context.Background())
	for _, v := range vms {
		if err := m.Destroy(context.Background(), v.ID); err != nil {
			t.Errorf("cleanup: destroy %s: %v", v.ID, err)
		}
	}
	m.Close()
}

// KillQEMU kills VM vm's QEMU with SIGKILL, as a crash or the OOM killer
// would; libvirt writes the pid to /run/libvirt/qemu/<domain>.pid.
func KillQEMU(t testing.TB, vm string) {
	t.Helper()
	pidFile := filepath.Join("/run/libvirt/qemu", vmm.DomainPrefix+vm+".pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("qemu pid of vm %s: %v", vm, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("qemu pid file %s: %q: %v", pidFile, b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (qemu of vm %s): %v", pid, vm, err)
	}
}
