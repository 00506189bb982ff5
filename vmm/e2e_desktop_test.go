package vmm_test

import (
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// asUser runs a command in the desktop session of user `user`.
func asUser(cmd string) []string {
	return []string{"runuser", "-u", "user", "--", "env", "DISPLAY=:0", "HOME=/home/user", "XAUTHORITY=/home/user/.Xauthority", "sh", "-c", cmd}
}

func terminalWindows(t *testing.T, m *vmm.Manager, id string) string {
	t.Helper()
	res, err := m.Exec(context.Background(), id, vmm.ExecRequest{Argv: asUser("xdotool search --onlyvisible --class lxterminal"), Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func TestE2EDesktop(t *testing.T) {
	m := testenv.Manager(t, "desktop")
	ctx := context.Background()
	start := time.Now()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "desktop", MemoryMiB: 1024, VCPUs: 2, Boot: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("desktop ready in %s (boot %.1fs, accel %s)", time.Since(start).Round(time.Millisecond), vm.BootSeconds, vm.Accel)

	if res := mustExec(t, m, vm.ID, "cat", "/etc/debian_version"); !strings.HasPrefix(string(res.Stdout), "12.") {
		t.Fatalf("not Debian 12: %q", res.Stdout)
	}
	ready, err := m.Screenshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b := ready.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Fatalf("screen is %v, want 1280x800", b)
	}
	if w := terminalWindows(t, m, vm.ID); w != "" {
		t.Fatalf("a terminal is open at ready: %q", w)
	}

	// Dirty the episode: a file, and a terminal opened with keys alone.
	if err := m.WriteFile(ctx, vm.ID, "/home/user/episode.txt", []byte("dirty"), 0o644); err != nil {
		t.Fatal(err)
	}
	virsh(t, "send-key", vm.Domain, "KEY_LEFTCTRL", "KEY_LEFTALT", "KEY_T")
	deadline := time.Now().Add(60 * time.Second)
	for terminalWindows(t, m, vm.ID) == "" {
		if time.Now().After(deadline) {
			t.Fatal("ctrl+alt+t opened no terminal")
		}
		time.Sleep(500 * time.Millisecond)
	}
	dirty, err := m.Screenshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := diffFraction(ready, dirty); d < 0.01 {
		t.Fatalf("an open terminal changed only %.3f%% of the screen", d*100)
	}

	rr, err := m.Reset(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("desktop reset took %s", rr.Duration.Round(time.Millisecond))
	if _, err := m.ReadFile(ctx, vm.ID, "/home/user/episode.txt"); err == nil {
		t.Fatal("file from the episode survived the reset")
	}
	if w := terminalWindows(t, m, vm.ID); w != "" {
		t.Fatalf("terminal window survived the reset: %q", w)
	}
	after, err := m.Screenshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Only the panel clock may differ from the ready screen.
	if d := diffFraction(ready, after); d > 0.005 {
		t.Fatalf("screen after reset differs from ready in %.3f%% of pixels", d*100)
	}

	// A deskfarm restart finds the VM again, without duplicating it.
	before := deskfarmDomains(t)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m2, err := vmm.New(ctx, vmm.Config{StateDir: testenv.StateDir, Images: vmm.StoreImages{Store: testenv.RequireVM(t, "desktop")}, LockWait: testenv.LockWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Cleanup(t, m2) })
	vms, _ := m2.List(ctx)
	if len(vms) != 1 || vms[0].ID != vm.ID || vms[0].State != vmm.StateReady {
		t.Fatalf("after restart: %+v", vms)
	}
	if after := deskfarmDomains(t); after != before {
		t.Fatalf("deskfarm domains before restart %q, after %q", before, after)
	}
	if res := mustExec(t, m2, vm.ID, "true"); res.ExitCode != 0 {
		t.Fatal("exec after restart failed")
	}
	if _, err := m2.Reset(ctx, vm.ID); err != nil {
		t.Fatalf("reset after restart: %v", err)
	}
	if err := m2.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(vm.VNCSocket); !os.IsNotExist(err) {
		t.Fatalf("vnc socket left: %v", err)
	}
}

// deskfarmDomains lists the test farm's domains, sorted.
func deskfarmDomains(t *testing.T) string {
	var names []string
	for _, d := range strings.Fields(virsh(t, "list", "--all", "--name")) {
		if strings.HasPrefix(d, vmm.DomainPrefix) && strings.Contains(virsh(t, "dumpxml", d), testenv.StateDir+"/vms/") {
			names = append(names, d)
		}
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}
