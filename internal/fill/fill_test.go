package fill

import (
	"slices"
	"testing"
	"time"
)

type inner struct {
	Port int
	Name string
}

type sample struct {
	A     string
	B     int
	C     bool
	D     float64
	T     time.Time
	P     *time.Time
	S     []inner
	M     map[string]string
	I     inner
	hid   int
	Inner *inner
}

func TestAllLeavesNoZero(t *testing.T) {
	var s sample
	All(&s)
	if z := Zeros(s); len(z) != 0 {
		t.Fatalf("zero after All: %v", z)
	}
	if s.hid != 0 {
		t.Fatal("All set an unexported field")
	}
	if s.S[0].Port == s.I.Port || s.A == s.I.Name {
		t.Fatalf("fields share values: %+v", s)
	}
}

func TestZerosNamesDroppedFields(t *testing.T) {
	var s sample
	All(&s)
	s.B, s.S[0].Port, s.P, s.M = 0, 0, nil, nil
	got := Zeros(s)
	want := []string{"B", "P", "S[0].Port", "M"}
	if !slices.Equal(got, want) {
		t.Fatalf("Zeros = %v, want %v", got, want)
	}
	if got := Zeros(s, "B", "P", "S[0].Port", "M"); len(got) != 0 {
		t.Fatalf("Zeros with exceptions = %v", got)
	}
}

func TestMismatches(t *testing.T) {
	type state string
	type other struct {
		A     state
		B     int
		S     []inner
		Extra string
	}
	var s sample
	All(&s)
	o := other{A: state(s.A), B: s.B, S: []inner{s.S[0]}}
	if m := Mismatches(s, o); len(m) != 0 {
		t.Fatalf("Mismatches = %v", m)
	}
	o.S[0].Port++
	if m := Mismatches(s, o); !slices.Equal(m, []string{"S[0].Port"}) {
		t.Fatalf("Mismatches = %v, want S[0].Port", m)
	}
}

func TestMissing(t *testing.T) {
	type base struct{ Name, Kept string }
	type core struct {
		base
		Port  int
		Items []inner
		Lost  bool
	}
	type item struct{ Port int }
	type wire struct {
		Name, Kept string
		PortNo     int
		Items      []item
	}
	got := Missing(core{}, wire{}, "Port")
	if !slices.Equal(got, []string{"Items.Name", "Lost"}) {
		t.Fatalf("Missing = %v, want Items.Name, Lost", got)
	}
}
