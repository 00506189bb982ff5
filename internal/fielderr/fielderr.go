// Package fielderr owns deskfarm's one error type for bad input: an error
// that names the request field at fault, in the spelling of the input it
// came from ("memory_mib", "coordinate", "actions[2].x"), says what is wrong
// and what is accepted, and wraps the sentinels it stands for. The layer
// where the input is checked (vmm, actions, vocab, pool, web) creates it;
// web reads the field with errors.As instead of parsing error text.
//
// The field is a Path (names and list indices), not a string, so a layer
// that relabels a field in its caller's terms (vocab naming "actions[2].x"
// as Claude's "coordinate") reads the steps instead of parsing text. A Path
// is rendered ("actions[2].x") only where it leaves the process: the HTTP
// error body and the error's message.
package fielderr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Step is one step of a Path: a field's name, or an element of a list.
type Step struct {
	// Name is the field's name as the input spells it; "" for a list
	// element.
	Name string
	// Index is the element's index when Name is "".
	Index int
}

// Path names a field inside a request, outermost first: "actions[2].x" is
// Name("actions").Index(2).Name("x"). The zero Path is the whole request.
type Path []Step

// Name returns the path of one field.
func Name(name string) Path {
	if name == "" {
		return nil
	}
	return Path{{Name: name}}
}

// Name returns p followed by the field name.
func (p Path) Name(name string) Path { return append(p[:len(p):len(p)], Step{Name: name}) }

// Index returns p followed by list element i.
func (p Path) Index(i int) Path { return append(p[:len(p):len(p)], Step{Index: i}) }

// Join returns p followed by q.
func (p Path) Join(q Path) Path { return append(p[:len(p):len(p)], q...) }

// Head returns p's first step and the rest; ok is false for the zero Path.
func (p Path) Head() (first Step, rest Path, ok bool) {
	if len(p) == 0 {
		return Step{}, nil, false
	}
	return p[0], p[1:], true
}

// Base returns the name of p's first step ("via" for via[1].x), or "".
func (p Path) Base() string {
	if len(p) == 0 {
		return ""
	}
	return p[0].Name
}

// String renders p as the input spells it: "actions[2].x", "parameters.dy".
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.Name == "":
			b.WriteString("[" + strconv.Itoa(s.Index) + "]")
		case i > 0:
			b.WriteString("." + s.Name)
		default:
			b.WriteString(s.Name)
		}
	}
	return b.String()
}

// Error is an invalid input that names its field.
type Error struct {
	// Path is the field as the caller spelled it; nil when the whole
	// request is at fault.
	Path Path
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

// New returns an Error for the field named field (one name, as the input
// spells it; "" for the whole request) wrapping the sentinels errs.
func New(field string, msg string, errs ...error) *Error {
	return &Error{Path: Name(field), Msg: msg, Errs: errs}
}

// Newf is New with a formatted message; the sentinel comes first.
func Newf(field string, sentinel error, format string, args ...any) *Error {
	return &Error{Path: Name(field), Msg: fmt.Sprintf(format, args...), Errs: []error{sentinel}}
}

// At is New for a field deeper in the request.
func At(p Path, msg string, errs ...error) *Error {
	return &Error{Path: p, Msg: msg, Errs: errs}
}

// Error returns "field NAME: message".
func (e *Error) Error() string {
	if len(e.Path) == 0 {
		return e.Msg
	}
	return "field " + e.Path.String() + ": " + e.Msg
}

// Unwrap returns the sentinels, so errors.Is matches any of them.
func (e *Error) Unwrap() []error { return e.Errs }

// PathOf returns the path named by the first *Error in err's chain, or nil.
func PathOf(err error) Path {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Path
	}
	return nil
}

// Field returns the rendered path of the first *Error in err's chain, or "".
func Field(err error) string { return PathOf(err).String() }

// Prefix returns err with prefix put before the path of the first *Error
// in its chain (Name("actions").Index(2) before "x"); an err without one is
// returned unchanged.
func Prefix(prefix Path, err error) error {
	return Rename(err, func(p Path) Path { return prefix.Join(p) })
}

// Rename returns err with its path replaced by f's (e.g. "actions[0].x" by
// "coordinate", the name the agent used); an err without an *Error is
// returned unchanged.
func Rename(err error, f func(Path) Path) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	c := *fe
	c.Path = f(c.Path)
	return &c
}

// InvalidField returns the rendered path; web fills the error body's
// "field" from it.
func (e *Error) InvalidField() string { return e.Path.String() }
