package actions

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// Kind names what an Action does; it is the "kind" of the neutral JSON form.
type Kind string

// The action kinds, one per concrete Action type.
const (
	KindMove           Kind = "move"
	KindMoveBy         Kind = "move_by"
	KindButtonDown     Kind = "button_down"
	KindButtonUp       Kind = "button_up"
	KindClick          Kind = "click"
	KindDrag           Kind = "drag"
	KindScroll         Kind = "scroll"
	KindKey            Kind = "key"
	KindKeyDown        Kind = "key_down"
	KindKeyUp          Kind = "key_up"
	KindHoldKey        Kind = "hold_key"
	KindType           Kind = "type"
	KindWait           Kind = "wait"
	KindScreenshot     Kind = "screenshot"
	KindZoom           Kind = "zoom"
	KindCursorPosition Kind = "cursor_position"
	KindClipboardGet   Kind = "clipboard_get"
	KindClipboardSet   Kind = "clipboard_set"
)

// Kinds lists every action kind.
var Kinds = []Kind{
	KindMove, KindMoveBy, KindButtonDown, KindButtonUp, KindClick, KindDrag, KindScroll,
	KindKey, KindKeyDown, KindKeyUp, KindHoldKey, KindType, KindWait,
	KindScreenshot, KindZoom, KindCursorPosition, KindClipboardGet, KindClipboardSet,
}

func kindNames() []string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return names
}

// Button is a mouse button.
type Button string

// Mouse buttons. Back and forward (X buttons 8 and 9) are part of the model,
// but QEMU 7.2's VNC server drops them (ui/vnc.c pointer_event maps only
// buttons 1-5), so the executor clicks them through GuestInput and refuses
// them with ErrUnsupportedButton when it has none.
const (
	ButtonLeft    Button = "left"
	ButtonMiddle  Button = "middle"
	ButtonRight   Button = "right"
	ButtonBack    Button = "back"
	ButtonForward Button = "forward"
)

// ButtonNames are the buttons by name, for error messages and Accepted lists.
var ButtonNames = []string{"left", "middle", "right", "back", "forward"}

// Direction is a scroll direction.
type Direction string

// Scroll directions.
const (
	ScrollUp    Direction = "up"
	ScrollDown  Direction = "down"
	ScrollLeft  Direction = "left"
	ScrollRight Direction = "right"
)

// DirectionNames are the scroll directions by name.
var DirectionNames = []string{"up", "down", "left", "right"}

// Point is a position in screenshot coordinates.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Limits on actions. The caps (MaxActions, MaxTextRunes, MaxZoomPixels) keep
// one request from occupying a VM's input for minutes or the host's memory
// for gigabytes; a refusal is a *FieldError with Limit set and ErrTooLarge.
const (
	// MaxActions is the most actions one Run plays. At the default pacing a
	// hundred clicks take a few seconds; an agent sends one to a few.
	MaxActions = 100
	// MaxTextRunes bounds the text of type (and the key text of a Claude
	// key action): at the default pacing ~35 s of typing.
	MaxTextRunes = 4096
	// MaxClickCount is the most clicks one click action makes (triple click).
	MaxClickCount = 3
	// MaxScrollAmount is the most wheel clicks one scroll action makes.
	MaxScrollAmount = 100
	// MaxDuration bounds wait and hold_key (the reference demo's limit).
	MaxDuration = 100 * time.Second
	// MaxDragVia bounds the intermediate points of a drag.
	MaxDragVia = 256
	// MaxZoomSide bounds a zoom's requested output width and height.
	MaxZoomSide = 4096
	// MaxZoomPixels bounds a zoom's output area (width x height, also when
	// one side is derived from the region's aspect ratio): 4 Mpx, a little
	// more than a 2560x1600 screen, ~16 MiB of RGBA.
	MaxZoomPixels = 4 << 20
	// MaxChordKeys bounds the keys of one chord.
	MaxChordKeys = 8
	// MaxClipboardBytes bounds the text of clipboard_set: it travels to the
	// guest through its agent, whose messages are bounded too.
	MaxClipboardBytes = 1 << 20
)

// Action is one step of the neutral action model: the vocabulary every
// translator produces and the Executor plays. Each kind is its own type
// (Move, Click, ..., CursorPosition), built by DecodeActions from the neutral
// JSON, by a translator from an agent's vocabulary, or by Go code. Key names
// are parsed into Keys when the action is built, so nothing downstream parses
// names again.
//
// Validate checks an action on its own (ranges, required fields, modifier
// keys, typable text); DecodeActions and the translators call it, and Run
// calls it again for actions built by Go code. Coordinates are checked
// against the screenshot size when the Executor plays them.
type Action interface {
	// Kind is the action's kind.
	Kind() Kind
	// Validate reports the first field at fault as a *FieldError, spelled
	// as in the neutral JSON form.
	Validate() error
	isAction()
}

// Move moves the pointer to To. Held buttons stay held (a manual drag).
type Move struct{ To Point }

// MoveBy moves the pointer by (DX, DY) screenshot pixels from where it is
// (pyautogui's moveRel), clamped to the screen. Held buttons stay held.
type MoveBy struct{ DX, DY int }

// ButtonDown presses Button (default left) at At, or where the pointer is.
// The button stays pressed across Run calls until a ButtonUp.
type ButtonDown struct {
	At     *Point
	Button Button
}

// ButtonUp releases Button (default left) at At, or where the pointer is.
type ButtonUp struct {
	At     *Point
	Button Button
}

// Click clicks Button (default left) Count times (1-3; 0 means 1) at At, or
// where the pointer is, with Modifiers held.
type Click struct {
	At        *Point
	Button    Button
	Count     int
	Modifiers []Key
}

// Drag presses Button (default left) at From (nil: where the pointer is),
// moves through Via to To in small steps, and releases it there, with
// Modifiers held.
type Drag struct {
	From      *Point
	Via       []Point
	To        Point
	Button    Button
	Modifiers []Key
}

// Scroll turns the wheel Amount clicks (1-100) in Direction at At, or where
// the pointer is, with Modifiers held.
type Scroll struct {
	At        *Point
	Direction Direction
	Amount    int
	Modifiers []Key
}

// KeyPress presses Keys in order and releases them in reverse (a chord), the
// neutral kind "key".
type KeyPress struct{ Keys []Key }

// KeyDown presses Keys in order; they stay pressed across Run calls until a
// KeyUp.
type KeyDown struct{ Keys []Key }

// KeyUp releases Keys in reverse order (so key_down X then key_up X is key
// X). Releasing a key that is not held is harmless.
type KeyUp struct{ Keys []Key }

// HoldKey presses Keys, waits Duration and releases them.
type HoldKey struct {
	Keys     []Key
	Duration time.Duration
}

// TypeText types Text, up to MaxTextRunes characters of any script.
//
// Text that is all printable ASCII, \n (and \r\n, and a lone \r) as Return
// and \t as Tab goes over the display as key events, one key per character
// on a US layout (see KeyForRune). Shift_L is pressed around each run of
// characters that need it and released before the next character that does
// not, because QEMU takes Shift from the modifier state rather than from the
// keysym. The guest must use a US layout with Caps Lock off; a Shift the
// agent holds with key_down makes lower-case letters upper-case.
//
// Text with any other character goes whole through the executor's
// GuestInput (QEMU's VNC keysym table cannot type it: it truncates keysyms
// to 16 bits and looks them up in the en-us keymap, ui/vnc.c key_event), so
// the order of its characters is exactly as given. Without GuestInput such
// text is refused before anything is typed (ErrUntypable). Control
// characters other than \n, \r and \t and invalid UTF-8 are always refused.
type TypeText struct{ Text string }

// Wait waits Duration (whole milliseconds, 1 ms to MaxDuration).
type Wait struct{ Duration time.Duration }

// Screenshot captures the screen at the session's screenshot size.
type Screenshot struct{}

// Zoom captures Region [x0, y0, x1, y1) (screenshot coordinates, x1 and y1
// exclusive) from the native framebuffer, scaled to Width x Height; zero
// sides are derived (see Scaler.ZoomSize).
type Zoom struct {
	Region        [4]int
	Width, Height int
}

// CursorPosition reports the pointer position in screenshot coordinates:
// as Result.Cursor, and as "X=x,Y=y" in Result.Text for Claude.
type CursorPosition struct{}

// ClipboardGet reads the guest desktop's clipboard (the CLIPBOARD selection)
// into Result.Clipboard. It needs the executor's GuestInput.
type ClipboardGet struct{}

// ClipboardSet sets the guest desktop's clipboard to Text (any Unicode, up to
// MaxClipboardBytes). It needs the executor's GuestInput.
type ClipboardSet struct{ Text string }

func (Move) Kind() Kind           { return KindMove }
func (MoveBy) Kind() Kind         { return KindMoveBy }
func (ButtonDown) Kind() Kind     { return KindButtonDown }
func (ButtonUp) Kind() Kind       { return KindButtonUp }
func (Click) Kind() Kind          { return KindClick }
func (Drag) Kind() Kind           { return KindDrag }
func (Scroll) Kind() Kind         { return KindScroll }
func (KeyPress) Kind() Kind       { return KindKey }
func (KeyDown) Kind() Kind        { return KindKeyDown }
func (KeyUp) Kind() Kind          { return KindKeyUp }
func (HoldKey) Kind() Kind        { return KindHoldKey }
func (TypeText) Kind() Kind       { return KindType }
func (Wait) Kind() Kind           { return KindWait }
func (Screenshot) Kind() Kind     { return KindScreenshot }
func (Zoom) Kind() Kind           { return KindZoom }
func (CursorPosition) Kind() Kind { return KindCursorPosition }
func (ClipboardGet) Kind() Kind   { return KindClipboardGet }
func (ClipboardSet) Kind() Kind   { return KindClipboardSet }

func (Move) isAction()           {}
func (MoveBy) isAction()         {}
func (ButtonDown) isAction()     {}
func (ButtonUp) isAction()       {}
func (Click) isAction()          {}
func (Drag) isAction()           {}
func (Scroll) isAction()         {}
func (KeyPress) isAction()       {}
func (KeyDown) isAction()        {}
func (KeyUp) isAction()          {}
func (HoldKey) isAction()        {}
func (TypeText) isAction()       {}
func (Wait) isAction()           {}
func (Screenshot) isAction()     {}
func (Zoom) isAction()           {}
func (CursorPosition) isAction() {}
func (ClipboardGet) isAction()   {}
func (ClipboardSet) isAction()   {}

// IsObservation reports whether a only looks at the screen.
func IsObservation(a Action) bool {
	switch a.(type) {
	case Screenshot, Zoom, CursorPosition, ClipboardGet:
		return true
	}
	return false
}

// Validate checks the position.
func (a Move) Validate() error { return checkPoint(nil, &a.To) }

// Validate checks the offset is within a screen's reach.
func (a MoveBy) Validate() error {
	for _, v := range []struct {
		f string
		v int
	}{{"dx", a.DX}, {"dy", a.DY}} {
		if v.v < -1e6 || v.v > 1e6 {
			return Invalid(v.f, ErrOutOfBounds, fmt.Sprintf("%d is off any screen", v.v))
		}
	}
	return nil
}

// Validate checks the position and the button.
func (a ButtonDown) Validate() error { return firstErr(checkPoint(nil, a.At), checkButton(a.Button)) }

// Validate checks the position and the button.
func (a ButtonUp) Validate() error { return firstErr(checkPoint(nil, a.At), checkButton(a.Button)) }

// Validate checks the position, button, count and modifiers.
func (a Click) Validate() error {
	if a.Count < 0 || a.Count > MaxClickCount {
		return Invalid("count", nil, fmt.Sprintf("must be 1 to %d (0 or absent means 1), got %d", MaxClickCount, a.Count))
	}
	return firstErr(checkPoint(nil, a.At), checkButton(a.Button), checkModifiers(a.Modifiers))
}

// Validate checks the points, button and modifiers.
func (a Drag) Validate() error {
	if err := firstErr(checkPoint(nil, &a.To), checkPoint(fielderr.Name("from"), a.From)); err != nil {
		return err
	}
	if len(a.Via) > MaxDragVia {
		return TooLarge("via", MaxDragVia, fmt.Sprintf("at most %d points, got %d", MaxDragVia, len(a.Via)))
	}
	for i := range a.Via {
		if err := checkPoint(Elem("via", i), &a.Via[i]); err != nil {
			return err
		}
	}
	return firstErr(checkButton(a.Button), checkModifiers(a.Modifiers))
}

// Validate checks the position, direction, amount and modifiers.
func (a Scroll) Validate() error {
	if err := checkPoint(nil, a.At); err != nil {
		return err
	}
	switch a.Direction {
	case ScrollUp, ScrollDown, ScrollLeft, ScrollRight:
	case "":
		return OneOf("direction", nil, DirectionNames, "scroll needs a direction: up, down, left or right")
	default:
		return OneOf("direction", nil, DirectionNames, fmt.Sprintf("must be up, down, left or right, got %q", a.Direction))
	}
	if a.Amount < 1 || a.Amount > MaxScrollAmount {
		return Invalid("amount", nil, fmt.Sprintf("must be 1 to %d wheel clicks, got %d", MaxScrollAmount, a.Amount))
	}
	return checkModifiers(a.Modifiers)
}

// Validate checks there are 1 to MaxChordKeys keys.
func (a KeyPress) Validate() error { return checkKeys(a.Keys) }

// Validate checks there are 1 to MaxChordKeys keys.
func (a KeyDown) Validate() error { return checkKeys(a.Keys) }

// Validate checks there are 1 to MaxChordKeys keys.
func (a KeyUp) Validate() error { return checkKeys(a.Keys) }

// Validate checks the keys and the duration.
func (a HoldKey) Validate() error { return firstErr(checkKeys(a.Keys), checkDuration(a.Duration)) }

// Validate checks the text is non-empty, at most MaxTextRunes, valid UTF-8
// and free of control characters other than \n, \r and \t. Whether the
// executor can type it (ASCII over the display, anything else through
// GuestInput) is checked when it plans the action.
func (a TypeText) Validate() error {
	if a.Text == "" {
		return Invalid("text", nil, "type needs non-empty text")
	}
	if n := utf8.RuneCountInString(a.Text); n > MaxTextRunes {
		return TooLarge("text", MaxTextRunes, fmt.Sprintf("at most %d characters, got %d; split the text over several type actions", MaxTextRunes, n))
	}
	if err := checkText(a.Text); err != nil {
		return WithPrefix(fielderr.Name("text"), err)
	}
	return nil
}

// Validate accepts any clipboard_get.
func (ClipboardGet) Validate() error { return nil }

// Validate checks the text is valid UTF-8 and at most MaxClipboardBytes. An
// empty text empties the clipboard.
func (a ClipboardSet) Validate() error {
	if len(a.Text) > MaxClipboardBytes {
		return TooLarge("text", MaxClipboardBytes, fmt.Sprintf("at most %d bytes, got %d", MaxClipboardBytes, len(a.Text)))
	}
	if !utf8.ValidString(a.Text) {
		return Invalid("text", nil, "must be valid UTF-8")
	}
	return nil
}

// Validate checks the duration.
func (a Wait) Validate() error { return checkDuration(a.Duration) }

// Validate accepts any screenshot.
func (Screenshot) Validate() error { return nil }

// Validate checks the region's shape and the output size.
func (a Zoom) Validate() error {
	r := a.Region
	for i, v := range r {
		if v < 0 {
			return Invalid("region", ErrOutOfBounds, fmt.Sprintf("value %d is %d; coordinates must be non-negative", i, v))
		}
	}
	if r[0] >= r[2] || r[1] >= r[3] {
		return Invalid("region", nil, fmt.Sprintf("[%d, %d, %d, %d] must have x0 < x1 and y0 < y1", r[0], r[1], r[2], r[3]))
	}
	for _, s := range []struct {
		field string
		v     int
	}{{"width", a.Width}, {"height", a.Height}} {
		if s.v < 0 || s.v > MaxZoomSide {
			return TooLarge(s.field, MaxZoomSide, fmt.Sprintf("must be 1 to %d (0 or absent means derived), got %d", MaxZoomSide, s.v))
		}
	}
	return CheckZoomArea(a.Width, a.Height)
}

// Validate accepts any cursor_position.
func (CursorPosition) Validate() error { return nil }

// CheckZoomArea refuses a zoom output of more than MaxZoomPixels; the field is "width".
func CheckZoomArea(w, h int) error {
	if w*h > MaxZoomPixels {
		return TooLarge("width", MaxZoomPixels, fmt.Sprintf("a %dx%d zoom is %d pixels; at most %d (%d Mpx)", w, h, w*h, MaxZoomPixels, MaxZoomPixels>>20))
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkPoint checks p (nil is fine) is non-negative; prefix names it.
func checkPoint(prefix fielderr.Path, p *Point) error {
	switch {
	case p == nil:
		return nil
	case p.X < 0:
		return WithPrefix(prefix, Invalid("x", ErrOutOfBounds, fmt.Sprintf("must be non-negative, got %d", p.X)))
	case p.Y < 0:
		return WithPrefix(prefix, Invalid("y", ErrOutOfBounds, fmt.Sprintf("must be non-negative, got %d", p.Y)))
	}
	return nil
}

func checkButton(b Button) error {
	switch b {
	case "", ButtonLeft, ButtonMiddle, ButtonRight, ButtonBack, ButtonForward:
		return nil
	}
	return OneOf("button", nil, ButtonNames, fmt.Sprintf("must be left, middle, right, back or forward, got %q", b))
}

func checkModifiers(mods []Key) error {
	for _, k := range mods {
		if !k.IsModifier() {
			return Invalid("modifiers", ErrUnknownKey, fmt.Sprintf("%q is not a modifier key; modifiers are shift, ctrl, alt, "+
				"super (cmd, win), meta and their _L/_R forms, joined with + (\"ctrl+shift\")", k.Name))
		}
	}
	if len(mods) > MaxChordKeys {
		return TooLarge("modifiers", MaxChordKeys, fmt.Sprintf("at most %d keys at once, got %d", MaxChordKeys, len(mods)))
	}
	return nil
}

func checkKeys(keys []Key) error {
	if len(keys) == 0 {
		return Invalid("keys", ErrUnknownKey, "needs at least one key")
	}
	if len(keys) > MaxChordKeys {
		return TooLarge("keys", MaxChordKeys, fmt.Sprintf("at most %d keys at once, got %d", MaxChordKeys, len(keys)))
	}
	for _, k := range keys {
		if k.Keysym == 0 {
			return Invalid("keys", ErrUnknownKey, fmt.Sprintf("key %q has no keysym; build keys with ParseKey", k.Name))
		}
	}
	return nil
}

func checkDuration(d time.Duration) error {
	if d < time.Millisecond || d > MaxDuration {
		return Invalid("duration_ms", nil, fmt.Sprintf("must be 1 to %d, got %d", MaxDuration.Milliseconds(), d.Milliseconds()))
	}
	return nil
}

// parseKeyList resolves key names, each of which may be a chord, for the
// field named field.
func parseKeyList(field string, names []string) ([]Key, error) {
	var keys []Key
	for _, n := range names {
		ks, err := ParseChord(n)
		if err != nil {
			return nil, WithPrefix(fielderr.Name(field), err)
		}
		keys = append(keys, ks...)
	}
	if len(keys) > MaxChordKeys {
		return nil, TooLarge(field, MaxChordKeys, fmt.Sprintf("at most %d keys at once, got %d", MaxChordKeys, len(keys)))
	}
	return keys, nil
}

// Keys parses key names (ParseKey names, each may be a "+" chord) for Go
// callers: Keys("ctrl+shift", "t").
func Keys(names ...string) ([]Key, error) { return parseKeyList("keys", names) }

// MustKeys is Keys for names known to be valid; it panics otherwise.
func MustKeys(names ...string) []Key {
	k, err := Keys(names...)
	if err != nil {
		panic(err)
	}
	return k
}

// KeyNames returns the canonical names of keys.
func KeyNames(keys []Key) []string {
	if keys == nil {
		return nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	return names
}

// RoundMS rounds d up to a whole millisecond, at least 1 ms.
func RoundMS(d time.Duration) time.Duration {
	return max(time.Millisecond, (d+time.Millisecond-1)/time.Millisecond*time.Millisecond)
}

// ValidateAll validates what a translator built: each translator checks its
// own vocabulary's fields, and this catches a mapping that produced an action
// the neutral model refuses.
func ValidateAll(acts []Action) error {
	for _, a := range acts {
		if err := a.Validate(); err != nil {
			return err
		}
	}
	return nil
}
