package vmm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

func snapshotNames(t *testing.T, m *vmm.Manager, id string) []string {
	t.Helper()
	l, err := m.Snapshots(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range l {
		names = append(names, s.Name)
	}
	return names
}

// rawSnapshots is QEMU's own list of a VM's snapshots, reserved ones included.
func rawSnapshots(t *testing.T, m *vmm.Manager, id string) string {
	t.Helper()
	out, err := vmm.MonitorForTest(context.Background(), m, id, "info snapshots")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A named snapshot keeps RAM and disk as they were: after its revert a file
// written before it is there and one written after is gone; a revert is a
// reset to the desks above (EventReset); the ready snapshot stays out of
// reach; limits refuse by name; snapshots outlive a deskfarm restart.
func TestE2ENamedSnapshots(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := m.Subscribe(ctx, "test")
	if err := m.WriteFile(ctx, vm.ID, "/tmp/before", []byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, vm.ID, "sh", "-c", "echo ram-before > /dev/shm/value")
	s1, err := m.SaveSnapshot(ctx, vm.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %+v", s1)
	if s1.Name != "s1" || s1.Bytes <= 0 || s1.Took <= 0 || time.Since(s1.Created) > time.Minute {
		t.Fatalf("snapshot %+v", s1)
	}
	// The VM runs on after a save.
	mustExec(t, m, vm.ID, "true")
	if _, err := m.SaveSnapshot(ctx, vm.ID, "s1"); !errors.Is(err, vmm.ErrSnapshotExists) {
		t.Fatalf("second save of s1: %v, want ErrSnapshotExists", err)
	}
	for _, name := range []string{"deskfarm-ready", "bad name"} {
		if _, err := m.SaveSnapshot(ctx, vm.ID, name); fielderr.Field(err) != "name" {
			t.Fatalf("save %q: %v, want refused on name", name, err)
		}
	}

	if err := m.WriteFile(ctx, vm.ID, "/tmp/after", []byte("after"), 0); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, vm.ID, "sh", "-c", "echo ram-after > /dev/shm/value")
	rr, err := m.RevertSnapshot(ctx, vm.ID, "s1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("revert took %s", rr.Duration.Round(time.Millisecond))
	if ev := waitEvent(t, evs, vm.ID, vmm.EventReset, 30*time.Second); ev.Reason != "snapshot s1" {
		t.Errorf("reset event reason %q, want \"snapshot s1\"", ev.Reason)
	}
	if _, err := m.ReadFile(ctx, vm.ID, "/tmp/after"); err == nil {
		t.Error("a file written after the snapshot is there after its revert")
	}
	if b, err := m.ReadFile(ctx, vm.ID, "/tmp/before"); err != nil || string(b) != "before" {
		t.Errorf("a file written before the snapshot after its revert: %q, %v", b, err)
	}
	if res := mustExec(t, m, vm.ID, "cat", "/dev/shm/value"); strings.TrimSpace(string(res.Stdout)) != "ram-before" {
		t.Errorf("RAM-only file after revert: %q, want ram-before", res.Stdout)
	}
	// Reverting again goes back again: the snapshot stays.
	if _, err := m.RevertSnapshot(ctx, vm.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RevertSnapshot(ctx, vm.ID, "deskfarm-ready"); !errors.Is(err, vmm.ErrInvalid) {
		t.Errorf("revert to the ready snapshot: %v, want refused", err)
	}
	if _, err := m.RevertSnapshot(ctx, vm.ID, "nope"); !errors.Is(err, vmm.ErrSnapshotNotFound) {
		t.Errorf("revert to a missing snapshot: %v", err)
	}
	if err := m.DeleteSnapshot(ctx, vm.ID, "deskfarm-ready"); !errors.Is(err, vmm.ErrInvalid) {
		t.Errorf("delete the ready snapshot: %v, want refused", err)
	}
	// Neither refusal broke the VM.
	if got, _ := m.Get(ctx, vm.ID); got.State != vmm.StateReady {
		t.Fatalf("vm %s after refused calls", got.State)
	}
	if got := snapshotNames(t, m, vm.ID); len(got) != 1 || got[0] != "s1" {
		t.Errorf("list %v, want [s1]", got)
	}

	// A reset still goes to the ready snapshot, which no save touched.
	if _, err := m.Reset(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadFile(ctx, vm.ID, "/tmp/before"); err == nil {
		t.Error("reset kept a file written after the ready snapshot")
	}

	// Limits, each refusal naming its own.
	vmm.SetSnapshotLimitsForTest(m, 2, vmm.DefaultMaxSnapshotBytes)
	if _, err := m.SaveSnapshot(ctx, vm.ID, "s2"); err != nil {
		t.Fatal(err)
	}
	_, err = m.SaveSnapshot(ctx, vm.ID, "s3")
	var le *vmm.LimitError
	if !errors.As(err, &le) || le.Limit != "snapshots_per_vm" || !errors.Is(err, vmm.ErrSnapshotLimit) || !strings.Contains(err.Error(), "snapshots_per_vm") {
		t.Errorf("third snapshot under a limit of 2: %v", err)
	}
	vmm.SetSnapshotLimitsForTest(m, 16, 2*s1.Bytes)
	_, err = m.SaveSnapshot(ctx, vm.ID, "s3")
	if !errors.As(err, &le) || le.Limit != "snapshot_bytes_per_vm" || !strings.Contains(err.Error(), "snapshot_bytes_per_vm") {
		t.Errorf("snapshot over the bytes limit: %v", err)
	}
	vmm.SetSnapshotLimitsForTest(m, 0, 0)

	if err := m.DeleteSnapshot(ctx, vm.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteSnapshot(ctx, vm.ID, "s1"); !errors.Is(err, vmm.ErrSnapshotNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if got := snapshotNames(t, m, vm.ID); len(got) != 1 || got[0] != "s2" {
		t.Errorf("list after delete %v, want [s2]", got)
	}

	// A restarted deskfarm finds s2 in the overlay and reverts to it.
	m.Close()
	m = testenv.Manager(t, "tiny")
	l, err := m.Snapshots(ctx, vm.ID)
	if err != nil || len(l) != 1 || l[0].Name != "s2" || l[0].Took != 0 {
		t.Fatalf("after restart: %+v, %v", l, err)
	}
	if err := m.WriteFile(ctx, vm.ID, "/tmp/after", []byte("after"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.RevertSnapshot(ctx, vm.ID, "s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadFile(ctx, vm.ID, "/tmp/after"); err == nil {
		t.Error("revert after restart kept a later file")
	}
	if err := m.DropSnapshots(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if got := snapshotNames(t, m, vm.ID); len(got) != 0 {
		t.Errorf("after DropSnapshots: %v", got)
	}
	if raw := rawSnapshots(t, m, vm.ID); strings.Count(raw, "\n") != 3 || !strings.Contains(raw, "deskfarm-ready") {
		t.Errorf("QEMU lists after DropSnapshots:\n%s", raw)
	}
	if _, err := m.Reset(ctx, vm.ID); err != nil {
		t.Fatalf("reset after DropSnapshots: %v", err)
	}
	if err := m.Destroy(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t)
}

// A fork's VMs start from the source's RAM and disk as they were at the
// fork (a file, a RAM-only file, a running process) without its named
// snapshots; the source goes on and what it does later is not in them; a
// fork that does not fit is refused whole, saying how many would.
func TestE2EFork(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	src, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	pid := forkSourceState(t, m, src.ID)
	if _, err := m.SaveSnapshot(ctx, src.ID, "named"); err != nil {
		t.Fatal(err)
	}

	used, _ := m.Capacity()
	vmm.SetMemoryLimitForTest(m, used+256+100)
	_, err = m.Fork(ctx, src.ID, vmm.ForkOptions{Count: 2})
	var le *vmm.LimitError
	if !errors.As(err, &le) || le.Limit != "memory" || le.Fits != 1 || !errors.Is(err, vmm.ErrInsufficientResources) {
		t.Fatalf("fork of 2 with room for 1: %v", err)
	}
	vmm.SetMemoryLimitForTest(m, 1<<20)
	if vms, _ := m.List(ctx); len(vms) != 1 {
		t.Fatalf("a refused fork left %d vms", len(vms))
	}

	evs := m.Subscribe(ctx, "test")
	start := time.Now()
	forks, err := m.Fork(ctx, src.ID, vmm.ForkOptions{Count: 2, Labels: map[string]string{"pool": "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork of 2 took %s", time.Since(start).Round(time.Millisecond))
	if len(forks) != 2 {
		t.Fatalf("%d forks", len(forks))
	}
	// The source goes on: what it writes now is its own.
	if err := m.WriteFile(ctx, src.ID, "/tmp/later", []byte("later"), 0); err != nil {
		t.Fatal(err)
	}
	if got := snapshotNames(t, m, src.ID); len(got) != 1 || got[0] != "named" {
		t.Errorf("source's snapshots after the fork: %v", got)
	}
	if raw := rawSnapshots(t, m, src.ID); strings.Contains(raw, "deskfarm-fork") {
		t.Errorf("transfer snapshot left on the source:\n%s", raw)
	}
	for _, f := range forks {
		checkFork(t, m, evs, f, pid)
	}
	// The forks are apart: one's write is not in the other.
	if err := m.WriteFile(ctx, forks[0].ID, "/tmp/mine", []byte("0"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadFile(ctx, forks[1].ID, "/tmp/mine"); err == nil {
		t.Error("one fork sees the other's file")
	}
	// A fork resets to the ready snapshot, as any VM does.
	if _, err := m.Reset(ctx, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadFile(ctx, forks[0].ID, "/tmp/src"); err == nil {
		t.Error("a fork's reset kept the source's later file")
	}
	if entries, _ := os.ReadDir(vmm.ForksDir(m)); len(entries) != 0 {
		t.Errorf("fork templates left: %v", entries)
	}
	for _, id := range []string{src.ID, forks[0].ID, forks[1].ID} {
		if err := m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	assertNoLeftovers(t)
}

// With standbys on, the first new VM of a fork is the standby of VMs like
// the source: its QEMU, started and loaded ahead, gets the source's state
// by a disk pivot and a loadvm. It holds the source's disk, RAM and
// processes as any fork does, resets to the ready state, and the next
// standby is made.
func TestE2EForkStandby(t *testing.T) {
	m, src := withStandby(t, vmm.Config{})
	ctx := context.Background()
	pid := forkSourceState(t, m, src.ID)
	sb := awaitStandby(t, m, standbyOpts)
	evs := m.Subscribe(ctx, "test")
	start := time.Now()
	forks, err := m.Fork(ctx, src.ID, vmm.ForkOptions{Count: 2, Labels: map[string]string{"pool": "p1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fork of 2, one from the standby, took %s", time.Since(start).Round(time.Millisecond))
	if len(forks) != 2 || forks[0].ID != sb {
		t.Fatalf("forks %+v: the first is not the standby %s", forks, sb)
	}
	if err := m.WriteFile(ctx, src.ID, "/tmp/later", []byte("later"), 0); err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		checkFork(t, m, evs, f, pid)
	}
	if _, err := m.Reset(ctx, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadFile(ctx, forks[0].ID, "/tmp/src"); err == nil {
		t.Error("the standby fork's reset kept the source's file")
	}
	mustExec(t, m, forks[0].ID, "true")
	if next := awaitStandby(t, m, standbyOpts); next == sb {
		t.Fatal("the standby taken by the fork is still the standby")
	}
	for _, id := range []string{src.ID, forks[0].ID, forks[1].ID} {
		if err := m.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	m.Close()
	assertNoLeftovers(t)
}

// forkSourceState gives the source of a fork a file on disk (/tmp/src), a
// file in RAM only (/dev/shm/value) and a process, whose pid it returns:
// a fork must have all three.
func forkSourceState(t *testing.T, m *vmm.Manager, id string) string {
	t.Helper()
	if err := m.WriteFile(context.Background(), id, "/tmp/src", []byte("source"), 0); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, id, "sh", "-c", "echo ram > /dev/shm/value")
	// A process started now runs on in the forks with the same pid.
	return strings.TrimSpace(string(mustExec(t, m, id, "sh", "-c", "setsid sleep 100000 >/dev/null 2>&1 < /dev/null & echo $!").Stdout))
}

// checkFork checks that fork f is ready with the source's state as
// forkSourceState left it and not what the source wrote after
// (/tmp/later), holds none of its snapshots, and left no file of its
// making in its directory.
func checkFork(t *testing.T, m *vmm.Manager, evs <-chan vmm.Event, f vmm.VM, pid string) {
	t.Helper()
	ctx := context.Background()
	waitEvent(t, evs, f.ID, vmm.EventReady, 30*time.Second)
	if f.State != vmm.StateReady || f.Start != vmm.StartFork || f.Labels["pool"] != "p1" || f.Image != "tiny" || f.MemoryMiB != 256 {
		t.Errorf("fork %+v", f)
	}
	if b, err := m.ReadFile(ctx, f.ID, "/tmp/src"); err != nil || string(b) != "source" {
		t.Errorf("fork %s: source's file %q, %v", f.ID, b, err)
	}
	if res := mustExec(t, m, f.ID, "cat", "/dev/shm/value"); strings.TrimSpace(string(res.Stdout)) != "ram" {
		t.Errorf("fork %s: RAM-only file %q", f.ID, res.Stdout)
	}
	if res := mustExec(t, m, f.ID, "sh", "-c", "cat /proc/"+pid+"/comm"); strings.TrimSpace(string(res.Stdout)) != "sleep" {
		t.Errorf("fork %s: process %s of the source is not running: %q %q", f.ID, pid, res.Stdout, res.Stderr)
	}
	if _, err := m.ReadFile(ctx, f.ID, "/tmp/later"); err == nil {
		t.Errorf("fork %s sees a file the source wrote after the fork", f.ID)
	}
	if got := snapshotNames(t, m, f.ID); len(got) != 0 {
		t.Errorf("fork %s holds snapshots %v", f.ID, got)
	}
	if raw := rawSnapshots(t, m, f.ID); strings.Contains(raw, "deskfarm-fork") || !strings.Contains(raw, "deskfarm-ready") {
		t.Errorf("fork %s: QEMU lists\n%s", f.ID, raw)
	}
	entries, _ := os.ReadDir(filepath.Join(testenv.StateDir, "vms", f.ID))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "disk.") && e.Name() != "disk.qcow2" {
			t.Errorf("fork %s: %s left in its directory", f.ID, e.Name())
		}
	}
}
