// Package fielderr owns the one error type for a request refused because of
// one of its fields. Every package that checks input (actions for agent
// actions, web for API bodies, vmm for VM specs) returns *Error, so the HTTP
// layer reads the field, the accepted values and the limit from the error
// itself instead of from its text.
package fielderr

import "strings"

// Error is an invalid request that names the field at fault, in the spelling
// of the input it came from ("coordinate", "scroll_amount", "actions[2].x",
// "memory_mib").
type Error struct {
	// Field is the field as the caller spelled it; "" when the whole input
	// is at fault (malformed JSON).
	Field string
	// Msg says what is wrong and what is accepted.
	Msg string
	// Accepted lists the values the field takes when it takes one of a
	// fixed set (action kinds, buttons, directions); nil otherwise.
	Accepted []string
	// Limit is the bound a value or a count exceeded (100 actions, 4096
	// runes); 0 when the refusal is not about a limit.
	Limit int
	// Err is the sentinel the error stands for (errors.Is matches it and
	// whatever it wraps), e.g. actions.ErrOutOfBounds or vmm.ErrInvalid.
	Err error
}

// Error returns "field NAME: message".
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return "field " + e.Field + ": " + e.Msg
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// InvalidField names the field at fault (web reports it as ErrorBody.Field).
func (e *Error) InvalidField() string { return e.Field }

// WithPrefix returns a copy of e with prefix put in front of its field name
// ("actions[2]." + "x"); an empty field becomes the prefix without its
// trailing dot.
func (e *Error) WithPrefix(prefix string) *Error {
	c := *e
	if c.Field == "" {
		c.Field = strings.TrimSuffix(prefix, ".")
	} else {
		c.Field = prefix + c.Field
	}
	return &c
}

// Renamed returns a copy of e naming field instead.
func (e *Error) Renamed(field string) *Error {
	c := *e
	c.Field = field
	return &c
}
