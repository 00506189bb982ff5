package fielderr

import (
	"errors"
	"fmt"
	"testing"
)

var errBad = errors.New("bad")

func TestError(t *testing.T) {
	e := &Error{Field: "x", Msg: "must be non-negative", Err: errBad}
	wrapped := fmt.Errorf("run: %w", e.WithPrefix("actions[2]."))
	if !errors.Is(wrapped, errBad) {
		t.Errorf("%v does not match its sentinel", wrapped)
	}
	got, ok := errors.AsType[*Error](wrapped)
	if !ok || got.InvalidField() != "actions[2].x" || got.Error() != "field actions[2].x: must be non-negative" {
		t.Errorf("prefixed: %v", got)
	}
	if e.Field != "x" {
		t.Errorf("WithPrefix changed the original: %q", e.Field)
	}
	if f := (&Error{Msg: "empty"}).WithPrefix("actions[0].").Field; f != "actions[0]" {
		t.Errorf("empty field with prefix = %q", f)
	}
	if f := e.Renamed("coordinate").Field; f != "coordinate" {
		t.Errorf("renamed = %q", f)
	}
	if (&Error{Msg: "malformed JSON"}).Error() != "malformed JSON" {
		t.Error("an error without a field reads as its message")
	}
}
