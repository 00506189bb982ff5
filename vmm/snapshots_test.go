package vmm

import (
	"errors"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

func TestCheckSnapshotName(t *testing.T) {
	for _, ok := range []string{"a", "step-3", "A.b_c-9", "9lives", strings.Repeat("x", MaxSnapshotNameLen)} {
		if err := CheckSnapshotName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "a b", "a;quit", "a\nb", "é", strings.Repeat("x", MaxSnapshotNameLen+1),
		"deskfarm-ready", "deskfarm-mine"} {
		err := CheckSnapshotName(bad)
		if !errors.Is(err, ErrInvalid) || fielderr.Field(err) != "name" {
			t.Errorf("%q: %v, want ErrInvalid on name", bad, err)
		}
	}
}

func TestCheckSnapshotLimits(t *testing.T) {
	held := []Snapshot{{Name: "a", Bytes: 100}, {Name: "b", Bytes: 200}}
	if err := CheckSnapshotLimits(held, 100, 3, 400); err != nil {
		t.Errorf("within both limits: %v", err)
	}
	var le *LimitError
	err := CheckSnapshotLimits(held, 100, 2, 1000)
	if !errors.As(err, &le) || le.Limit != "snapshots_per_vm" || le.Max != 2 || !errors.Is(err, ErrSnapshotLimit) {
		t.Errorf("count: %v", err)
	}
	err = CheckSnapshotLimits(held, 101, 3, 400)
	if !errors.As(err, &le) || le.Limit != "snapshot_bytes_per_vm" || le.Have != 300 || !strings.Contains(err.Error(), "snapshot_bytes_per_vm") {
		t.Errorf("bytes: %v", err)
	}
}

func TestCheckFork(t *testing.T) {
	if err := CheckFork(4, 1024, 0, 0); err != nil {
		t.Errorf("no limit: %v", err)
	}
	if err := CheckFork(2, 1024, 1024, 3072); err != nil {
		t.Errorf("fits exactly: %v", err)
	}
	var le *LimitError
	err := CheckFork(4, 1024, 1024, 4000)
	if !errors.As(err, &le) || le.Limit != "memory" || le.Fits != 2 || !errors.Is(err, ErrInsufficientResources) {
		t.Errorf("4 in 2976 MiB: %v", err)
	}
	if !strings.Contains(err.Error(), "2 would") {
		t.Errorf("message %q does not say how many fit", err)
	}
}
