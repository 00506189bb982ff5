package actions

import "errors"

// Sentinel errors. Every error this package returns for a bad request wraps
// ErrInvalid and, where one applies, one of the more specific sentinels below,
// so callers can test either with errors.Is. Errors from the Display are
// wrapped with the action that was being played.
var (
	// ErrInvalid means an action or a translator input is malformed or out of
	// range. An HTTP layer answers it with 400.
	ErrInvalid = errors.New("invalid action")
	// ErrUnsupportedAction means the action name is not part of the requested
	// vocabulary or tool version.
	ErrUnsupportedAction = errors.New("unsupported action")
	// ErrUnknownKey means a key name is not one ParseKey accepts.
	ErrUnknownKey = errors.New("unknown key")
	// ErrUntypable means text holds a character that cannot be typed as key
	// events on a US layout.
	ErrUntypable = errors.New("character cannot be typed")
	// ErrOutOfBounds means a coordinate or region lies outside the screenshot
	// the agent sees.
	ErrOutOfBounds = errors.New("coordinate out of bounds")
	// ErrUnsupportedButton means the Display cannot deliver the mouse button
	// (back and forward need RFB buttons 8 and 9, which Display does not carry).
	ErrUnsupportedButton = errors.New("mouse button not supported by the display")
	// ErrDisplay means the Display failed while actions were being played.
	ErrDisplay = errors.New("display error")
	// ErrPointerUnknown means an action needs the pointer's position (a click
	// or scroll without a coordinate, cursor_position) before any pointer
	// event was sent in the session: the guest's pointer is somewhere the
	// VNC client cannot know.
	ErrPointerUnknown = errors.New("pointer position unknown")
)

// FieldError is an invalid request that names the field at fault, in the
// spelling of the input it came from ("coordinate", "scroll_amount",
// "actions[2].x"). It wraps ErrInvalid and, if set, Kind.
type FieldError struct {
	Field string // field as the caller spelled it
	Msg   string // what is wrong and what is accepted
	Kind  error  // a more specific sentinel (ErrOutOfBounds, ErrUnknownKey, ...) or nil
}

// Error returns "field NAME: message".
func (e *FieldError) Error() string { return "field " + e.Field + ": " + e.Msg }

// Unwrap returns ErrInvalid and Kind, so errors.Is matches either.
func (e *FieldError) Unwrap() []error {
	if e.Kind != nil && e.Kind != ErrInvalid {
		return []error{ErrInvalid, e.Kind}
	}
	return []error{ErrInvalid}
}

// InvalidField names the field at fault; the web layer reports it as
// ErrorBody.Field.
func (e *FieldError) InvalidField() string { return e.Field }

// withPrefix returns a copy of err with prefix put in front of its field name
// ("actions[2]." + "x"); other errors are returned unchanged.
func withPrefix(prefix string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		c := *fe
		if c.Field == "" {
			c.Field = trimDot(prefix)
		} else {
			c.Field = prefix + c.Field
		}
		return &c
	}
	return err
}

func trimDot(s string) string {
	if len(s) > 0 && s[len(s)-1] == '.' {
		return s[:len(s)-1]
	}
	return s
}

func fieldErr(field string, kind error, msg string) *FieldError {
	return &FieldError{Field: field, Msg: msg, Kind: kind}
}
