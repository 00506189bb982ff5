package fielderr

import (
	"errors"
	"fmt"
	"testing"
)

var errA, errB = errors.New("a"), errors.New("b")

func TestErrorWrapsAndNames(t *testing.T) {
	err := fmt.Errorf("create vm: %w", New("memory_mib", "64 is below the minimum of 128", errA, errB))
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Fatalf("%v does not match its sentinels", err)
	}
	if got := Field(err); got != "memory_mib" {
		t.Fatalf("Field = %q, want memory_mib", got)
	}
	if got := err.Error(); got != "create vm: field memory_mib: 64 is below the minimum of 128" {
		t.Fatalf("message %q", got)
	}
	if Field(errA) != "" {
		t.Fatal("a plain error has a field")
	}
}

func TestPrefixAndRename(t *testing.T) {
	err := Prefix("actions[2].", Newf("x", errA, "out of bounds"))
	if Field(err) != "actions[2].x" || !errors.Is(err, errA) {
		t.Fatalf("prefix: %v (%q)", err, Field(err))
	}
	if got := Field(Prefix("actions[1].", New("", "bad", errA))); got != "actions[1]" {
		t.Fatalf("prefix of a whole-request error = %q", got)
	}
	err = Rename(err, func(string) string { return "coordinate" })
	if Field(err) != "coordinate" || !errors.Is(err, errA) {
		t.Fatalf("rename: %v", err)
	}
	if Prefix("x.", errB) != errB {
		t.Fatal("prefix changed an error without a field")
	}
}
