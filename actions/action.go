package actions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Kind names what an Action does.
type Kind string

// The action kinds. Positions are in screenshot coordinates (see Scaler).
const (
	// KindMove moves the pointer to at. Held buttons stay held (a manual drag).
	KindMove Kind = "move"
	// KindButtonDown presses button (default left) at at, or where the pointer
	// is. The button stays pressed across Run calls until KindButtonUp.
	KindButtonDown Kind = "button_down"
	// KindButtonUp releases button (default left) at at, or where the pointer is.
	KindButtonUp Kind = "button_up"
	// KindClick clicks button (default left) count times (1-3) at at, or where
	// the pointer is, with modifiers held.
	KindClick Kind = "click"
	// KindDrag presses button (default left) at from (or where the pointer is),
	// moves through via to at in small steps, and releases it there, with
	// modifiers held.
	KindDrag Kind = "drag"
	// KindScroll turns the wheel amount clicks (1-100) in direction at at, or
	// where the pointer is, with modifiers held.
	KindScroll Kind = "scroll"
	// KindKey presses keys in order and releases them in reverse (a chord).
	KindKey Kind = "key"
	// KindKeyDown presses keys in order; they stay pressed across Run calls
	// until KindKeyUp.
	KindKeyDown Kind = "key_down"
	// KindKeyUp releases keys in reverse order (so key_down X then key_up X is
	// key X). Releasing a key that is not held is harmless.
	KindKeyUp Kind = "key_up"
	// KindHoldKey presses keys, waits duration_ms and releases them.
	KindHoldKey Kind = "hold_key"
	// KindType types text as key events, one key per character on a US
	// layout (see KeyForRune): printable ASCII exactly as given, \n (and
	// \r\n, and a lone \r) as Return, \t as Tab, however long the text.
	// Shift_L is pressed around each run of characters that need it and
	// released before the next character that does not, because QEMU takes
	// Shift from the modifier state rather than from the keysym. Other
	// characters are refused before anything is typed (ErrUntypable). The
	// guest must use a US layout with Caps Lock off; a Shift the agent holds
	// with key_down makes lower-case letters upper-case.
	KindType Kind = "type"
	// KindWait waits duration_ms.
	KindWait Kind = "wait"
	// KindScreenshot captures the screen at the session's screenshot size.
	KindScreenshot Kind = "screenshot"
	// KindZoom captures region (screenshot coordinates) from the native
	// framebuffer, scaled to width x height (default: fit the screenshot size).
	KindZoom Kind = "zoom"
	// KindCursorPosition reports the pointer position as "X=x,Y=y" in
	// screenshot coordinates.
	KindCursorPosition Kind = "cursor_position"
)

// Kinds lists every action kind.
var Kinds = []Kind{
	KindMove, KindButtonDown, KindButtonUp, KindClick, KindDrag, KindScroll,
	KindKey, KindKeyDown, KindKeyUp, KindHoldKey, KindType, KindWait,
	KindScreenshot, KindZoom, KindCursorPosition,
}

// Button is a mouse button.
type Button string

// Mouse buttons. Back and forward (X buttons 8 and 9) are part of the model,
// but Display carries only RFB buttons 1-7, so the executor refuses them with
// ErrUnsupportedButton.
const (
	ButtonLeft    Button = "left"
	ButtonMiddle  Button = "middle"
	ButtonRight   Button = "right"
	ButtonBack    Button = "back"
	ButtonForward Button = "forward"
)

// Direction is a scroll direction.
type Direction string

// Scroll directions.
const (
	ScrollUp    Direction = "up"
	ScrollDown  Direction = "down"
	ScrollLeft  Direction = "left"
	ScrollRight Direction = "right"
)

// Point is a position in screenshot coordinates.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// Limits on action fields.
const (
	// MaxClickCount is the most clicks one click action makes (triple click).
	MaxClickCount = 3
	// MaxScrollAmount is the most wheel clicks one scroll action makes.
	MaxScrollAmount = 100
	// MaxDuration bounds wait and hold_key (the reference demo's limit).
	MaxDuration = 100 * time.Second
	// MaxTextLen bounds type text (bytes); at the default pacing this is
	// several minutes of typing.
	MaxTextLen = 64 << 10
	// MaxDragVia bounds the intermediate points of a drag.
	MaxDragVia = 256
	// MaxZoomSide bounds a zoom's requested output width and height.
	MaxZoomSide = 4096
	// MaxChordKeys bounds the keys of one chord.
	MaxChordKeys = 8
)

// Action is one step of the neutral action model: the vocabulary every
// translator produces and the executor plays. In JSON (the neutral API) it
// is an object with a "kind" and the fields that kind uses:
//
//	{"kind":"move","x":10,"y":20}
//	{"kind":"click","x":10,"y":20,"button":"left","count":2,"modifiers":["ctrl"]}
//	{"kind":"button_down","button":"left"}                  (x, y optional)
//	{"kind":"button_up","button":"left","x":30,"y":40}
//	{"kind":"drag","from":{"x":10,"y":20},"via":[{"x":50,"y":20}],"x":90,"y":60,"button":"left","modifiers":["shift"]}
//	{"kind":"scroll","x":500,"y":400,"direction":"down","amount":3,"modifiers":["ctrl"]}
//	{"kind":"key","keys":["ctrl","shift","t"]}               (also ["ctrl+shift+t"])
//	{"kind":"key_down","keys":["shift"]}
//	{"kind":"key_up","keys":["shift"]}
//	{"kind":"hold_key","keys":["shift"],"duration_ms":1500}
//	{"kind":"type","text":"Hello, World!\n"}
//	{"kind":"wait","duration_ms":500}
//	{"kind":"screenshot"}
//	{"kind":"zoom","region":[0,0,400,300],"width":800}       (width/height optional)
//	{"kind":"cursor_position"}
//
// x, y (and from, via, region) are non-negative screenshot pixels; the
// executor checks them against the session's screenshot size. button is
// left (default), middle, right, back or forward; count is 1-3 (default 1);
// direction is up, down, left or right; amount is wheel clicks, 1-100. Keys
// and modifiers take ParseKey names, each entry may itself be a "+" chord;
// modifiers must be shift, ctrl, alt, super or meta keys. duration_ms is
// 1-100000. A field the kind does not use is an error, as is an unknown
// field.
type Action struct {
	Kind Kind `json:"kind"`
	// At is the target position (x, y in JSON): where to move, click, scroll,
	// press or release a button, or where a drag ends. Optional for click,
	// scroll, button_down and button_up (the pointer's position is used).
	At *Point `json:"-"`
	// From is where a drag starts; nil means where the pointer is.
	From *Point `json:"from,omitempty"`
	// Via are intermediate points a drag passes through, in order.
	Via []Point `json:"via,omitempty"`
	// Button is the mouse button; empty means left.
	Button Button `json:"button,omitempty"`
	// Count is the number of clicks; 0 means 1.
	Count int `json:"count,omitempty"`
	// Modifiers are keys held during a click, drag or scroll.
	Modifiers []string `json:"modifiers,omitempty"`
	// Direction is the scroll direction.
	Direction Direction `json:"direction,omitempty"`
	// Amount is the number of wheel clicks.
	Amount int `json:"amount,omitempty"`
	// Keys are the keys of key, key_down, key_up and hold_key, in press order.
	Keys []string `json:"keys,omitempty"`
	// Text is what type types.
	Text string `json:"text,omitempty"`
	// DurationMS is how long wait waits or hold_key holds, in milliseconds.
	DurationMS int `json:"duration_ms,omitempty"`
	// Region is a zoom's [x0, y0, x1, y1] in screenshot coordinates, x1 and
	// y1 exclusive.
	Region []int `json:"region,omitempty"`
	// Width and Height are a zoom's output size; zero means derived (see
	// Scaler.ZoomSize).
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
}

// wireAction is Action's JSON form: At flattened into x and y.
type wireAction struct {
	Kind       Kind      `json:"kind"`
	X          *int      `json:"x,omitempty"`
	Y          *int      `json:"y,omitempty"`
	From       *Point    `json:"from,omitempty"`
	Via        []Point   `json:"via,omitempty"`
	Button     Button    `json:"button,omitempty"`
	Count      int       `json:"count,omitempty"`
	Modifiers  []string  `json:"modifiers,omitempty"`
	Direction  Direction `json:"direction,omitempty"`
	Amount     int       `json:"amount,omitempty"`
	Keys       []string  `json:"keys,omitempty"`
	Text       string    `json:"text,omitempty"`
	DurationMS int       `json:"duration_ms,omitempty"`
	Region     []int     `json:"region,omitempty"`
	Width      int       `json:"width,omitempty"`
	Height     int       `json:"height,omitempty"`
}

// MarshalJSON writes the neutral JSON form.
func (a Action) MarshalJSON() ([]byte, error) {
	w := wireAction{
		Kind: a.Kind, From: a.From, Via: a.Via, Button: a.Button, Count: a.Count,
		Modifiers: a.Modifiers, Direction: a.Direction, Amount: a.Amount, Keys: a.Keys,
		Text: a.Text, DurationMS: a.DurationMS, Region: a.Region, Width: a.Width, Height: a.Height,
	}
	if a.At != nil {
		x, y := a.At.X, a.At.Y
		w.X, w.Y = &x, &y
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the neutral JSON form strictly: unknown fields and
// values of the wrong type are errors naming the field. It does not Validate.
func (a *Action) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireAction
	if err := dec.Decode(&w); err != nil {
		return jsonFieldError(err)
	}
	if (w.X == nil) != (w.Y == nil) {
		f := "y"
		if w.X == nil {
			f = "x"
		}
		return fieldErr(f, nil, "x and y go together: give both or neither")
	}
	*a = Action{
		Kind: w.Kind, From: w.From, Via: w.Via, Button: w.Button, Count: w.Count,
		Modifiers: w.Modifiers, Direction: w.Direction, Amount: w.Amount, Keys: w.Keys,
		Text: w.Text, DurationMS: w.DurationMS, Region: w.Region, Width: w.Width, Height: w.Height,
	}
	if w.X != nil {
		a.At = &Point{X: *w.X, Y: *w.Y}
	}
	return nil
}

// jsonFieldError turns encoding/json's decode errors into *FieldError.
func jsonFieldError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fieldErr(te.Field, nil, fmt.Sprintf("must be %s, got JSON %s", jsonTypeName(te.Type.Kind().String()), te.Value))
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fieldErr(strings.Trim(f, `"`), nil, "unknown field; "+neutralFieldsHelp)
	}
	if errors.Is(err, io.EOF) {
		return fieldErr("", nil, "empty input; want a JSON object")
	}
	return fieldErr("", nil, "malformed JSON: "+msg)
}

func jsonTypeName(kind string) string {
	switch kind {
	case "int", "int64", "int32", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "ptr", "map":
		return "an object"
	}
	return "a " + kind
}

const neutralFieldsHelp = "an action has kind and, as its kind needs, x, y, from, via, button, count, " +
	"modifiers, direction, amount, keys, text, duration_ms, region, width, height"

// DecodeActions reads a JSON array of neutral actions (or a single action
// object) and validates each. Errors name the field as "actions[i].field".
func DecodeActions(data []byte) ([]Action, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var a Action
		if err := json.Unmarshal(data, &a); err != nil {
			return nil, withPrefix("actions[0].", unwrapJSON(err))
		}
		if err := a.Validate(); err != nil {
			return nil, withPrefix("actions[0].", err)
		}
		return []Action{a}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, fieldErr("actions", nil, "must be a JSON array of action objects: "+err.Error())
	}
	acts := make([]Action, len(raws))
	for i, raw := range raws {
		prefix := fmt.Sprintf("actions[%d].", i)
		if err := json.Unmarshal(raw, &acts[i]); err != nil {
			return nil, withPrefix(prefix, unwrapJSON(err))
		}
		if err := acts[i].Validate(); err != nil {
			return nil, withPrefix(prefix, err)
		}
	}
	return acts, nil
}

// unwrapJSON digs our *FieldError out of encoding/json's wrapping.
func unwrapJSON(err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return jsonFieldError(err)
}

// kindFields lists, per kind, the fields it uses (JSON names); required
// ones are checked in Validate.
var kindFields = map[Kind][]string{
	KindMove:           {"x", "y"},
	KindButtonDown:     {"x", "y", "button"},
	KindButtonUp:       {"x", "y", "button"},
	KindClick:          {"x", "y", "button", "count", "modifiers"},
	KindDrag:           {"x", "y", "from", "via", "button", "modifiers"},
	KindScroll:         {"x", "y", "direction", "amount", "modifiers"},
	KindKey:            {"keys"},
	KindKeyDown:        {"keys"},
	KindKeyUp:          {"keys"},
	KindHoldKey:        {"keys", "duration_ms"},
	KindType:           {"text"},
	KindWait:           {"duration_ms"},
	KindScreenshot:     {},
	KindZoom:           {"region", "width", "height"},
	KindCursorPosition: {},
}

// setFields returns the JSON names of the fields a sets.
func (a *Action) setFields() []string {
	var f []string
	add := func(set bool, names ...string) {
		if set {
			f = append(f, names...)
		}
	}
	add(a.At != nil, "x", "y")
	add(a.From != nil, "from")
	add(a.Via != nil, "via")
	add(a.Button != "", "button")
	add(a.Count != 0, "count")
	add(a.Modifiers != nil, "modifiers")
	add(a.Direction != "", "direction")
	add(a.Amount != 0, "amount")
	add(a.Keys != nil, "keys")
	add(a.Text != "", "text")
	add(a.DurationMS != 0, "duration_ms")
	add(a.Region != nil, "region")
	add(a.Width != 0, "width")
	add(a.Height != 0, "height")
	return f
}

// Validate checks the action on its own: kind, required and forbidden
// fields, ranges, key names and typable text. Coordinates are checked
// against the screenshot size when the executor plays the action.
func (a *Action) Validate() error {
	allowed, ok := kindFields[a.Kind]
	if !ok {
		names := make([]string, len(Kinds))
		for i, k := range Kinds {
			names[i] = string(k)
		}
		return &FieldError{Field: "kind", Kind: ErrUnsupportedAction,
			Msg: fmt.Sprintf("unknown kind %q; kinds are %s", a.Kind, strings.Join(names, ", "))}
	}
	for _, f := range a.setFields() {
		if !slices.Contains(allowed, f) {
			return fieldErr(f, nil, fmt.Sprintf("not used by %s (%s takes %s)", a.Kind, a.Kind, fieldList(allowed)))
		}
	}
	if a.At != nil {
		if err := checkPoint("", *a.At); err != nil {
			return err
		}
	}
	switch a.Kind {
	case KindMove:
		if a.At == nil {
			return fieldErr("x", nil, "move needs x and y")
		}
	case KindButtonDown, KindButtonUp:
		return checkButton(a.Button)
	case KindClick:
		if a.Count < 0 || a.Count > MaxClickCount {
			return fieldErr("count", nil, fmt.Sprintf("must be 1 to %d (0 or absent means 1), got %d", MaxClickCount, a.Count))
		}
		if err := checkButton(a.Button); err != nil {
			return err
		}
		return checkModifiers(a.Modifiers)
	case KindDrag:
		if a.At == nil {
			return fieldErr("x", nil, "drag needs x and y (where it ends)")
		}
		if a.From != nil {
			if err := checkPoint("from.", *a.From); err != nil {
				return err
			}
		}
		if len(a.Via) > MaxDragVia {
			return fieldErr("via", nil, fmt.Sprintf("at most %d points, got %d", MaxDragVia, len(a.Via)))
		}
		for i, p := range a.Via {
			if err := checkPoint(fmt.Sprintf("via[%d].", i), p); err != nil {
				return err
			}
		}
		if err := checkButton(a.Button); err != nil {
			return err
		}
		return checkModifiers(a.Modifiers)
	case KindScroll:
		switch a.Direction {
		case ScrollUp, ScrollDown, ScrollLeft, ScrollRight:
		case "":
			return fieldErr("direction", nil, "scroll needs a direction: up, down, left or right")
		default:
			return fieldErr("direction", nil, fmt.Sprintf("must be up, down, left or right, got %q", a.Direction))
		}
		if a.Amount < 1 || a.Amount > MaxScrollAmount {
			return fieldErr("amount", nil, fmt.Sprintf("must be 1 to %d wheel clicks, got %d", MaxScrollAmount, a.Amount))
		}
		return checkModifiers(a.Modifiers)
	case KindKey, KindKeyDown, KindKeyUp, KindHoldKey:
		if _, err := parseKeyList(a.Keys); err != nil {
			return withPrefix("keys", err)
		}
		if a.Kind == KindHoldKey {
			return checkDurationMS(a.DurationMS)
		}
	case KindType:
		if a.Text == "" {
			return fieldErr("text", nil, "type needs non-empty text")
		}
		if len(a.Text) > MaxTextLen {
			return fieldErr("text", nil, fmt.Sprintf("at most %d bytes, got %d", MaxTextLen, len(a.Text)))
		}
		if err := checkTypable(a.Text); err != nil {
			return withPrefix("text", err)
		}
	case KindWait:
		return checkDurationMS(a.DurationMS)
	case KindZoom:
		if _, err := checkRegion(a.Region); err != nil {
			return err
		}
		if a.Width < 0 || a.Width > MaxZoomSide {
			return fieldErr("width", nil, fmt.Sprintf("must be 1 to %d, got %d", MaxZoomSide, a.Width))
		}
		if a.Height < 0 || a.Height > MaxZoomSide {
			return fieldErr("height", nil, fmt.Sprintf("must be 1 to %d, got %d", MaxZoomSide, a.Height))
		}
	}
	return nil
}

func fieldList(fs []string) string {
	if len(fs) == 0 {
		return "no other fields"
	}
	return strings.Join(fs, ", ")
}

func checkPoint(prefix string, p Point) error {
	if p.X < 0 {
		return fieldErr(prefix+"x", ErrOutOfBounds, fmt.Sprintf("must be non-negative, got %d", p.X))
	}
	if p.Y < 0 {
		return fieldErr(prefix+"y", ErrOutOfBounds, fmt.Sprintf("must be non-negative, got %d", p.Y))
	}
	return nil
}

func checkButton(b Button) error {
	switch b {
	case "", ButtonLeft, ButtonMiddle, ButtonRight, ButtonBack, ButtonForward:
		return nil
	}
	return fieldErr("button", nil, fmt.Sprintf("must be left, middle, right, back or forward, got %q", b))
}

func checkModifiers(mods []string) error {
	if _, err := parseModifiers(mods); err != nil {
		return withPrefix("modifiers", err)
	}
	return nil
}

func checkDurationMS(ms int) error {
	if ms < 1 || time.Duration(ms)*time.Millisecond > MaxDuration {
		return fieldErr("duration_ms", nil, fmt.Sprintf("must be 1 to %d, got %d", MaxDuration.Milliseconds(), ms))
	}
	return nil
}

// checkRegion validates a zoom region [x0, y0, x1, y1]: non-negative, x0 < x1
// and y0 < y1.
func checkRegion(r []int) ([4]int, error) {
	var out [4]int
	if len(r) != 4 {
		return out, fieldErr("region", nil, fmt.Sprintf("must be [x0, y0, x1, y1] (4 integers), got %d values", len(r)))
	}
	copy(out[:], r)
	for i, v := range out {
		if v < 0 {
			return out, fieldErr("region", ErrOutOfBounds, fmt.Sprintf("value %d is %d; coordinates must be non-negative", i, v))
		}
	}
	if out[0] >= out[2] || out[1] >= out[3] {
		return out, fieldErr("region", nil, fmt.Sprintf("[%d, %d, %d, %d] must have x0 < x1 and y0 < y1", out[0], out[1], out[2], out[3]))
	}
	return out, nil
}

// parseKeyList resolves a list of key names, each of which may be a chord.
func parseKeyList(names []string) ([]Key, error) {
	if len(names) == 0 {
		return nil, &FieldError{Msg: "needs at least one key", Kind: ErrUnknownKey}
	}
	var keys []Key
	for _, n := range names {
		ks, err := ParseChord(n)
		if err != nil {
			return nil, err
		}
		keys = append(keys, ks...)
	}
	if len(keys) > MaxChordKeys {
		return nil, &FieldError{Msg: fmt.Sprintf("at most %d keys at once, got %d", MaxChordKeys, len(keys))}
	}
	return keys, nil
}

// Constructors for the common actions, for Go callers and translators.

// MoveTo returns a move to (x, y).
func MoveTo(x, y int) Action { return Action{Kind: KindMove, At: &Point{x, y}} }

// ClickAt returns a click of b, n times, at p (nil: where the pointer is),
// with modifiers held.
func ClickAt(p *Point, b Button, n int, modifiers ...string) Action {
	return Action{Kind: KindClick, At: p, Button: b, Count: n, Modifiers: modifiers}
}

// KeyChord returns a key action pressing keys together.
func KeyChord(keys ...string) Action { return Action{Kind: KindKey, Keys: keys} }

// TypeText returns a type action.
func TypeText(s string) Action { return Action{Kind: KindType, Text: s} }

// Wait returns a wait action of d, rounded up to a millisecond.
func Wait(d time.Duration) Action {
	return Action{Kind: KindWait, DurationMS: int((d + time.Millisecond - 1) / time.Millisecond)}
}

// Screenshot returns a screenshot action.
func Screenshot() Action { return Action{Kind: KindScreenshot} }

func pt(x, y int) *Point { return &Point{X: x, Y: y} }
