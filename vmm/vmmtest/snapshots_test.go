package vmmtest

import (
	"context"
	"errors"
	"testing"

	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/vmm"
)

func TestSnapshotsRevertFiles(t *testing.T) {
	ctx := context.Background()
	f := New()
	f.MaxSnapshots = 2
	v, err := f.Create(ctx, vmm.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	evs := f.Subscribe(ctx, "test")
	f.WriteFile(ctx, v.ID, "/before", []byte("b"), 0)
	if _, err := f.SaveSnapshot(ctx, v.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SaveSnapshot(ctx, v.ID, "s1"); !errors.Is(err, vmm.ErrSnapshotExists) {
		t.Fatalf("second s1: %v, want ErrSnapshotExists", err)
	}
	if _, err := f.SaveSnapshot(ctx, v.ID, "deskfarm-ready"); fielderr.Field(err) != "name" {
		t.Fatalf("reserved name: %v, want a fielderr on name", err)
	}
	f.WriteFile(ctx, v.ID, "/after", []byte("a"), 0)
	if _, err := f.RevertSnapshot(ctx, v.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.File(v.ID, "/after"); ok {
		t.Error("/after is there after the revert")
	}
	if string(f.FileOrNil(v.ID, "/before")) != "b" {
		t.Error("/before is gone after the revert")
	}
	if ev := <-evs; ev.Kind != vmm.EventReset || ev.Reason != "snapshot s1" {
		t.Errorf("event %v %q, want reset \"snapshot s1\"", ev.Kind, ev.Reason)
	}
	f.SaveSnapshot(ctx, v.ID, "s2")
	_, err = f.SaveSnapshot(ctx, v.ID, "s3")
	var le *vmm.LimitError
	if !errors.As(err, &le) || le.Limit != "snapshots_per_vm" || !errors.Is(err, vmm.ErrSnapshotLimit) {
		t.Fatalf("third save: %v, want the snapshots_per_vm limit", err)
	}
	if err := f.DeleteSnapshot(ctx, v.ID, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := f.DeleteSnapshot(ctx, v.ID, "s1"); !errors.Is(err, vmm.ErrSnapshotNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	f.DropSnapshots(ctx, v.ID)
	if l, _ := f.Snapshots(ctx, v.ID); len(l) != 0 {
		t.Errorf("after DropSnapshots: %v", l)
	}
}

func TestForkCopiesFilesAndAdmits(t *testing.T) {
	ctx := context.Background()
	f := New()
	f.MemoryLimitMiB = 4096
	v, _ := f.Create(ctx, vmm.CreateOptions{Image: "tiny"})
	f.WriteFile(ctx, v.ID, "/x", []byte("x"), 0)
	f.SaveSnapshot(ctx, v.ID, "s1")
	_, err := f.Fork(ctx, v.ID, vmm.ForkOptions{Count: 4})
	var le *vmm.LimitError
	if !errors.As(err, &le) || le.Limit != "memory" || le.Fits != 3 || !errors.Is(err, vmm.ErrInsufficientResources) {
		t.Fatalf("fork of 4 in 3 GiB free: %v, want memory limit with 3 fitting", err)
	}
	vms, err := f.Fork(ctx, v.ID, vmm.ForkOptions{Count: 2, Labels: map[string]string{"pool": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range vms {
		if c.Labels["pool"] != "p" || c.Start != vmm.StartFork || c.State != vmm.StateReady {
			t.Errorf("fork %+v", c)
		}
		if string(f.FileOrNil(c.ID, "/x")) != "x" {
			t.Errorf("fork %s lacks the source's file", c.ID)
		}
		if l, _ := f.Snapshots(ctx, c.ID); len(l) != 0 {
			t.Errorf("fork %s holds snapshots %v", c.ID, l)
		}
	}
}
