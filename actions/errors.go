package actions

import (
	"errors"

	"github.com/deskfarm/deskfarm/fielderr"
)

// Sentinel errors. Every error this package returns for a bad request is a
// *FieldError whose sentinel is ErrInvalid or one of the more specific
// sentinels below, which wrap ErrInvalid, so callers can test either with
// errors.Is. Errors from the Display are wrapped with the action that was
// being played.
var (
	// ErrInvalid means an action or a translator input is malformed or out of
	// range. An HTTP layer answers it with 400.
	ErrInvalid = errors.New("invalid action")
	// ErrUnsupportedAction means the action name is not part of the requested
	// vocabulary or tool version.
	ErrUnsupportedAction = invalid("unsupported action")
	// ErrUnknownKey means a key name is not one ParseKey accepts.
	ErrUnknownKey = invalid("unknown key")
	// ErrUntypable means text holds a character that cannot be typed as key
	// events on a US layout.
	ErrUntypable = invalid("character cannot be typed")
	// ErrOutOfBounds means a coordinate or region lies outside the screenshot
	// the agent sees.
	ErrOutOfBounds = invalid("coordinate out of bounds")
	// ErrUnsupportedButton means the Display cannot deliver the mouse button
	// (back and forward need RFB buttons 8 and 9, which Display does not carry).
	ErrUnsupportedButton = invalid("mouse button not supported by the display")
	// ErrTooLarge means a request exceeds one of the caps that keep one
	// request from wedging a VM (MaxActions, MaxTextRunes, MaxZoomPixels).
	ErrTooLarge = invalid("request too large")
	// ErrDisplay means the Display failed while actions were being played.
	ErrDisplay = errors.New("display error")
	// ErrPointerUnknown means an action needs the pointer's position (a click
	// or scroll without a coordinate, cursor_position) before any pointer
	// event was sent in the session: the guest's pointer is somewhere the
	// VNC client cannot know.
	ErrPointerUnknown = errors.New("pointer position unknown")
)

// invalidError is a specific sentinel that is also an ErrInvalid.
type invalidError struct{ msg string }

func invalid(msg string) error        { return &invalidError{msg} }
func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

// FieldError is an invalid request that names the field at fault, in the
// spelling of the input it came from ("coordinate", "scroll_amount",
// "actions[2].x"). Its Err is ErrInvalid or a sentinel wrapping it. It is
// the module's one field error type (fielderr.Error), shared with web and
// vmm.
type FieldError = fielderr.Error

// withPrefix returns a copy of err with prefix put in front of its field name
// ("actions[2]." + "x"); other errors are returned unchanged.
func withPrefix(prefix string, err error) error {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return fe.WithPrefix(prefix)
	}
	return err
}

// renamed returns err naming field instead, if it is a *FieldError.
func renamed(err error, field string) error {
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return fe.Renamed(field)
	}
	return err
}

// fieldErr returns a *FieldError; kind nil means ErrInvalid.
func fieldErr(field string, kind error, msg string) *FieldError {
	if kind == nil {
		kind = ErrInvalid
	}
	return &FieldError{Field: field, Msg: msg, Err: kind}
}

// limitErr is a refusal of a value over a cap.
func limitErr(field string, limit int, msg string) *FieldError {
	return &FieldError{Field: field, Msg: msg, Limit: limit, Err: ErrTooLarge}
}

// oneOfErr is a refusal of a value outside a fixed set.
func oneOfErr(field string, kind error, accepted []string, msg string) *FieldError {
	fe := fieldErr(field, kind, msg)
	fe.Accepted = accepted
	return fe
}
