// Package fielderr owns deskfarm's one error type for bad input: an error
// that names the request field at fault, in the spelling of the input it
// came from ("memory_mib", "coordinate", "actions[2].x"), says what is wrong
// and what is accepted, and wraps the sentinels it stands for. The layer
// where the input is checked (vmm, actions, pool, web) creates it; web reads
// the field with errors.As instead of parsing error text.
package fielderr

import (
	"errors"
	"fmt"
)

// Error is an invalid input that names its field.
type Error struct {
	// Field is the field as the caller spelled it; "" when the whole
	// request is at fault.
	Field string
	// Msg says what is wrong and what is accepted.
	Msg string
	// Errs are the sentinels this error stands for (e.g. vmm.ErrInvalid,
	// actions.ErrOutOfBounds); errors.Is matches any of them.
	Errs []error
	// Accepted lists the values the field takes when it takes one of a
	// fixed set (action kinds, buttons, tool versions); nil otherwise.
	Accepted []string
	// Limit is the cap a value or a count exceeded (100 actions, 4096
	// characters); 0 when the refusal is not about a cap.
	Limit int
}

// New returns an Error for field wrapping the sentinels errs.
func New(field string, msg string, errs ...error) *Error {
	return &Error{Field: field, Msg: msg, Errs: errs}
}

// Newf is New with a formatted message; the sentinel comes first.
func Newf(field string, sentinel error, format string, args ...any) *Error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...), Errs: []error{sentinel}}
}

// Error returns "field NAME: message".
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return "field " + e.Field + ": " + e.Msg
}

// Unwrap returns the sentinels, so errors.Is matches any of them.
func (e *Error) Unwrap() []error { return e.Errs }

// Field returns the field named by the first *Error in err's chain, or "".
func Field(err error) string {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// Prefix returns err with prefix put before the field name of the first
// *Error in its chain (e.g. "actions[2]." + "x"); an err without one is
// returned unchanged.
func Prefix(prefix string, err error) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	c := *fe
	switch {
	case c.Field == "":
		c.Field = trimDot(prefix)
	default:
		c.Field = prefix + c.Field
	}
	return &c
}

// Rename returns err with its field renamed by f (e.g. "actions[0].x" to
// "coordinate", the name the agent used); an err without an *Error is
// returned unchanged.
func Rename(err error, f func(field string) string) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	c := *fe
	c.Field = f(c.Field)
	return &c
}

func trimDot(s string) string {
	if n := len(s); n > 0 && s[n-1] == '.' {
		return s[:n-1]
	}
	return s
}

// InvalidField returns Field; web fills the error body's "field" from it.
func (e *Error) InvalidField() string { return e.Field }
