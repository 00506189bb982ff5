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
	err := Prefix(Name("actions").Index(2), Newf("x", errA, "out of bounds"))
	if Field(err) != "actions[2].x" || !errors.Is(err, errA) {
		t.Fatalf("prefix: %v (%q)", err, Field(err))
	}
	if got := Field(Prefix(Name("actions").Index(1), New("", "bad", errA))); got != "actions[1]" {
		t.Fatalf("prefix of a whole-request error = %q", got)
	}
	err = Rename(err, func(Path) Path { return Name("coordinate") })
	if Field(err) != "coordinate" || !errors.Is(err, errA) {
		t.Fatalf("rename: %v", err)
	}
	if Prefix(Name("x"), errB) != errB {
		t.Fatal("prefix changed an error without a field")
	}
}

// TestPathSteps: a path keeps its steps, so a caller reads an index as an
// int rather than parsing "actions[2]".
func TestPathSteps(t *testing.T) {
	p := Name("actions").Index(12).Name("via").Index(3).Name("x")
	if got := p.String(); got != "actions[12].via[3].x" {
		t.Fatalf("String = %q", got)
	}
	first, rest, ok := p.Head()
	if !ok || first.Name != "actions" || rest[0].Name != "" || rest[0].Index != 12 || rest.Base() != "" {
		t.Fatalf("Head = %+v %+v %v", first, rest, ok)
	}
	// Appending to a shared prefix never changes another path.
	base := Name("actions")
	a, b := base.Index(1), base.Index(2)
	if a.String() != "actions[1]" || b.String() != "actions[2]" || base.String() != "actions" {
		t.Fatalf("paths share storage: %s %s %s", a, b, base)
	}
	if Path(nil).String() != "" || Name("") != nil {
		t.Fatal("the zero path is not empty")
	}
}
