package actions

import (
	"errors"
	"fmt"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// Sentinel errors. Every error this package returns for a bad request is a
// *FieldError that wraps ErrInvalid and, where one applies, one of the more
// specific sentinels below, so callers can test either with errors.Is.
// Errors from the Display are wrapped with the action that was being played.
var (
	// ErrInvalid means an action or a translator input is malformed or out of
	// range. An HTTP layer answers it with 400.
	ErrInvalid = errors.New("invalid action")
	// ErrUnsupportedAction means the action name is not part of the requested
	// vocabulary or tool version.
	ErrUnsupportedAction = errors.New("unsupported action")
	// ErrUnknownKey means a key name is not one ParseKey accepts.
	ErrUnknownKey = errors.New("unknown key")
	// ErrUntypable means text holds a character that cannot be typed: a
	// control character, invalid UTF-8, or non-ASCII text on an executor
	// without GuestInput.
	ErrUntypable = errors.New("character cannot be typed")
	// ErrOutOfBounds means a coordinate or region lies outside the screenshot
	// the agent sees.
	ErrOutOfBounds = errors.New("coordinate out of bounds")
	// ErrUnsupportedButton means the mouse button or wheel direction cannot
	// be delivered: back, forward and horizontal scroll need GuestInput
	// (QEMU 7.2's VNC drops X buttons 6-9), and back/forward cannot be held.
	ErrUnsupportedButton = errors.New("mouse button not supported by the display")
	// ErrTooLarge means a request exceeds one of the caps that keep one
	// request from wedging a VM (MaxActions, MaxTextRunes, MaxZoomPixels);
	// the *FieldError's Limit says which bound.
	ErrTooLarge = errors.New("request too large")
	// ErrDisplay means the Display failed while actions were being played.
	ErrDisplay = errors.New("display error")
	// ErrGuest means the GuestInput failed while actions were being played.
	ErrGuest = errors.New("guest input error")
	// ErrPointerUnknown means an action needs the pointer's position (a click
	// or scroll without a coordinate, cursor_position) before any pointer
	// event was sent in the session: the guest's pointer is somewhere the
	// VNC client cannot know.
	ErrPointerUnknown = errors.New("pointer position unknown")
)

// FieldError is an invalid request that names the field at fault, in the
// spelling of the input it came from ("coordinate", "scroll_amount",
// "actions[2].x"), with the accepted values or the limit where they apply.
// It is the module's one field error type (internal/fielderr), shared with
// vmm and web.
type FieldError = fielderr.Error

// WithPrefix returns a copy of err with prefix put in front of its field's
// path (actions[2] before x); other errors are returned unchanged.
func WithPrefix(prefix fielderr.Path, err error) error { return fielderr.Prefix(prefix, err) }

// Elem is the path of element i of the list field list ("actions[2]").
func Elem(list string, i int) fielderr.Path { return fielderr.Name(list).Index(i) }

// Renamed returns err naming field instead, if it is a *FieldError.
func Renamed(err error, field string) error {
	return fielderr.Rename(err, func(fielderr.Path) fielderr.Path { return fielderr.Name(field) })
}

// Invalid returns a *FieldError for the field named field wrapping
// ErrInvalid and kind (if not nil).
func Invalid(field string, kind error, msg string) *FieldError {
	return InvalidAt(fielderr.Name(field), kind, msg)
}

// InvalidAt is Invalid for a field deeper in the input.
func InvalidAt(p fielderr.Path, kind error, msg string) *FieldError {
	if kind == nil || kind == ErrInvalid {
		return fielderr.At(p, msg, ErrInvalid)
	}
	return fielderr.At(p, msg, ErrInvalid, kind)
}

// TooLarge returns a refusal of a value over a cap.
func TooLarge(field string, limit int, msg string) *FieldError {
	fe := Invalid(field, ErrTooLarge, msg)
	fe.Limit = limit
	return fe
}

// OneOf returns a refusal of a value outside a fixed set.
func OneOf(field string, kind error, accepted []string, msg string) *FieldError {
	fe := Invalid(field, kind, msg)
	fe.Accepted = accepted
	return fe
}

// StepError is a failure while playing one action of a Run (a display or
// guest error, a cancellation), as opposed to a refusal before anything was
// sent (*FieldError). vocab.Call.AgentError relabels it in the agent's terms.
type StepError struct {
	// Index is the action's place in the Run's list.
	Index int
	// Kind is the action's kind.
	Kind Kind
	// Label, when set, names the action in the agent's vocabulary
	// ("actions[2] (drag)", "computer_20251124 left_click") instead.
	Label string
	// Err is what failed.
	Err error
}

// Error returns "actions[i] (kind): err", or "label: err".
func (e *StepError) Error() string {
	if e.Label != "" {
		return e.Label + ": " + e.Err.Error()
	}
	return fmt.Sprintf("actions[%d] (%s): %v", e.Index, e.Kind, e.Err)
}

// Unwrap returns Err.
func (e *StepError) Unwrap() error { return e.Err }
