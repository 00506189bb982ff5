package actions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"
)

// The neutral JSON form: an object with a "kind" and the fields that kind
// uses. Each kind has one wire struct below; it is the only place its field
// list is written, and it serves decoding (strict: a field the kind does not
// use is an error) and encoding alike.
//
//	{"kind":"move","x":10,"y":20}
//	{"kind":"move_by","dx":-5,"dy":20}                       (from where the pointer is)
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
//	{"kind":"clipboard_get"}                                  (needs the guest input path)
//	{"kind":"clipboard_set","text":"Grüße"}                   (needs the guest input path)
//
// x, y (and from, via, region) are non-negative screenshot pixels; button is
// left (default), middle, right, back or forward; count is 1-3 (default 1);
// direction is up, down, left or right; amount is wheel clicks, 1-100. Keys
// and modifiers take ParseKey names, each entry may itself be a "+" chord;
// modifiers must be shift, ctrl, alt, super or meta keys. duration_ms is
// 1-100000.

// wireForm is the JSON form of one kind.
type wireForm interface {
	// action builds the typed action (parsing key names); the caller
	// validates it.
	action() (Action, error)
}

// wireForms makes an empty wire struct per kind.
var wireForms = map[Kind]func() wireForm{
	KindMove:           func() wireForm { return new(moveJSON) },
	KindMoveBy:         func() wireForm { return new(moveByJSON) },
	KindButtonDown:     func() wireForm { return new(buttonJSON) },
	KindButtonUp:       func() wireForm { return new(buttonJSON) },
	KindClick:          func() wireForm { return new(clickJSON) },
	KindDrag:           func() wireForm { return new(dragJSON) },
	KindScroll:         func() wireForm { return new(scrollJSON) },
	KindKey:            func() wireForm { return new(keysJSON) },
	KindKeyDown:        func() wireForm { return new(keysJSON) },
	KindKeyUp:          func() wireForm { return new(keysJSON) },
	KindHoldKey:        func() wireForm { return new(holdJSON) },
	KindType:           func() wireForm { return new(typeJSON) },
	KindWait:           func() wireForm { return new(waitJSON) },
	KindScreenshot:     func() wireForm { return new(bareJSON) },
	KindZoom:           func() wireForm { return new(zoomJSON) },
	KindCursorPosition: func() wireForm { return new(bareJSON) },
	KindClipboardGet:   func() wireForm { return new(bareJSON) },
	KindClipboardSet:   func() wireForm { return new(clipboardJSON) },
}

// xyJSON is an optional position flattened into x and y.
type xyJSON struct {
	X *int `json:"x,omitempty"`
	Y *int `json:"y,omitempty"`
}

func xyOf(p *Point) xyJSON {
	if p == nil {
		return xyJSON{}
	}
	x, y := p.X, p.Y
	return xyJSON{X: &x, Y: &y}
}

// point returns the position, nil if absent; need names the kind that
// requires it ("" when it is optional).
func (w xyJSON) point(need string) (*Point, error) {
	switch {
	case w.X == nil && w.Y == nil && need == "":
		return nil, nil
	case w.X == nil && w.Y == nil:
		return nil, Invalid("x", nil, need+" needs x and y")
	case w.X == nil:
		return nil, Invalid("x", nil, "x and y go together: give both or neither")
	case w.Y == nil:
		return nil, Invalid("y", nil, "x and y go together: give both or neither")
	}
	return &Point{X: *w.X, Y: *w.Y}, nil
}

type kindJSON struct {
	Kind Kind `json:"kind"`
}

type moveJSON struct {
	kindJSON
	xyJSON
}

func (w *moveJSON) action() (Action, error) {
	p, err := w.point("move")
	if err != nil {
		return nil, err
	}
	return Move{To: *p}, nil
}

type moveByJSON struct {
	kindJSON
	DX int `json:"dx"`
	DY int `json:"dy"`
}

func (w *moveByJSON) action() (Action, error) { return MoveBy{DX: w.DX, DY: w.DY}, nil }

type buttonJSON struct {
	kindJSON
	xyJSON
	Button Button `json:"button,omitempty"`
}

func (w *buttonJSON) action() (Action, error) {
	p, err := w.point("")
	if err != nil {
		return nil, err
	}
	if w.Kind == KindButtonUp {
		return ButtonUp{At: p, Button: w.Button}, nil
	}
	return ButtonDown{At: p, Button: w.Button}, nil
}

type clickJSON struct {
	kindJSON
	xyJSON
	Button    Button   `json:"button,omitempty"`
	Count     int      `json:"count,omitempty"`
	Modifiers []string `json:"modifiers,omitempty"`
}

func (w *clickJSON) action() (Action, error) {
	p, err := w.point("")
	if err != nil {
		return nil, err
	}
	mods, err := parseKeyList("modifiers", w.Modifiers)
	if err != nil {
		return nil, err
	}
	return Click{At: p, Button: w.Button, Count: w.Count, Modifiers: mods}, nil
}

type dragJSON struct {
	kindJSON
	xyJSON
	From      *Point   `json:"from,omitempty"`
	Via       []Point  `json:"via,omitempty"`
	Button    Button   `json:"button,omitempty"`
	Modifiers []string `json:"modifiers,omitempty"`
}

func (w *dragJSON) action() (Action, error) {
	p, err := w.point("drag (where it ends)")
	if err != nil {
		return nil, err
	}
	mods, err := parseKeyList("modifiers", w.Modifiers)
	if err != nil {
		return nil, err
	}
	return Drag{From: w.From, Via: w.Via, To: *p, Button: w.Button, Modifiers: mods}, nil
}

type scrollJSON struct {
	kindJSON
	xyJSON
	Modifiers []string  `json:"modifiers,omitempty"`
	Direction Direction `json:"direction,omitempty"`
	Amount    int       `json:"amount,omitempty"`
}

func (w *scrollJSON) action() (Action, error) {
	p, err := w.point("")
	if err != nil {
		return nil, err
	}
	mods, err := parseKeyList("modifiers", w.Modifiers)
	if err != nil {
		return nil, err
	}
	return Scroll{At: p, Direction: w.Direction, Amount: w.Amount, Modifiers: mods}, nil
}

type keysJSON struct {
	kindJSON
	Keys []string `json:"keys,omitempty"`
}

func (w *keysJSON) action() (Action, error) {
	keys, err := parseKeyList("keys", w.Keys)
	if err != nil {
		return nil, err
	}
	switch w.Kind {
	case KindKeyDown:
		return KeyDown{Keys: keys}, nil
	case KindKeyUp:
		return KeyUp{Keys: keys}, nil
	}
	return KeyPress{Keys: keys}, nil
}

type holdJSON struct {
	kindJSON
	Keys       []string `json:"keys,omitempty"`
	DurationMS int      `json:"duration_ms,omitempty"`
}

func (w *holdJSON) action() (Action, error) {
	keys, err := parseKeyList("keys", w.Keys)
	if err != nil {
		return nil, err
	}
	return HoldKey{Keys: keys, Duration: msDuration(w.DurationMS)}, nil
}

type typeJSON struct {
	kindJSON
	Text string `json:"text,omitempty"`
}

func (w *typeJSON) action() (Action, error) { return TypeText{Text: w.Text}, nil }

type waitJSON struct {
	kindJSON
	DurationMS int `json:"duration_ms,omitempty"`
}

func (w *waitJSON) action() (Action, error) { return Wait{Duration: msDuration(w.DurationMS)}, nil }

type zoomJSON struct {
	kindJSON
	Region []int `json:"region,omitempty"`
	Width  int   `json:"width,omitempty"`
	Height int   `json:"height,omitempty"`
}

func (w *zoomJSON) action() (Action, error) {
	if len(w.Region) != 4 {
		return nil, Invalid("region", nil, fmt.Sprintf("must be [x0, y0, x1, y1] (4 integers), got %d values", len(w.Region)))
	}
	return Zoom{Region: [4]int(w.Region), Width: w.Width, Height: w.Height}, nil
}

type bareJSON struct{ kindJSON }

func (w *bareJSON) action() (Action, error) {
	switch w.Kind {
	case KindCursorPosition:
		return CursorPosition{}, nil
	case KindClipboardGet:
		return ClipboardGet{}, nil
	}
	return Screenshot{}, nil
}

type clipboardJSON struct {
	kindJSON
	Text string `json:"text"`
}

func (w *clipboardJSON) action() (Action, error) { return ClipboardSet{Text: w.Text}, nil }

func msDuration(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

// MarshalJSON writes the neutral JSON form.
func (a Move) MarshalJSON() ([]byte, error) {
	return json.Marshal(moveJSON{kindJSON{KindMove}, xyOf(&a.To)})
}

// MarshalJSON writes the neutral JSON form.
func (a MoveBy) MarshalJSON() ([]byte, error) {
	return json.Marshal(moveByJSON{kindJSON{KindMoveBy}, a.DX, a.DY})
}

// MarshalJSON writes the neutral JSON form.
func (a ButtonDown) MarshalJSON() ([]byte, error) {
	return json.Marshal(buttonJSON{kindJSON{KindButtonDown}, xyOf(a.At), a.Button})
}

// MarshalJSON writes the neutral JSON form.
func (a ButtonUp) MarshalJSON() ([]byte, error) {
	return json.Marshal(buttonJSON{kindJSON{KindButtonUp}, xyOf(a.At), a.Button})
}

// MarshalJSON writes the neutral JSON form.
func (a Click) MarshalJSON() ([]byte, error) {
	return json.Marshal(clickJSON{kindJSON{KindClick}, xyOf(a.At), a.Button, a.Count, KeyNames(a.Modifiers)})
}

// MarshalJSON writes the neutral JSON form.
func (a Drag) MarshalJSON() ([]byte, error) {
	return json.Marshal(dragJSON{kindJSON{KindDrag}, xyOf(&a.To), a.From, a.Via, a.Button, KeyNames(a.Modifiers)})
}

// MarshalJSON writes the neutral JSON form.
func (a Scroll) MarshalJSON() ([]byte, error) {
	return json.Marshal(scrollJSON{kindJSON{KindScroll}, xyOf(a.At), KeyNames(a.Modifiers), a.Direction, a.Amount})
}

// MarshalJSON writes the neutral JSON form.
func (a KeyPress) MarshalJSON() ([]byte, error) {
	return json.Marshal(keysJSON{kindJSON{KindKey}, KeyNames(a.Keys)})
}

// MarshalJSON writes the neutral JSON form.
func (a KeyDown) MarshalJSON() ([]byte, error) {
	return json.Marshal(keysJSON{kindJSON{KindKeyDown}, KeyNames(a.Keys)})
}

// MarshalJSON writes the neutral JSON form.
func (a KeyUp) MarshalJSON() ([]byte, error) {
	return json.Marshal(keysJSON{kindJSON{KindKeyUp}, KeyNames(a.Keys)})
}

// MarshalJSON writes the neutral JSON form.
func (a HoldKey) MarshalJSON() ([]byte, error) {
	return json.Marshal(holdJSON{kindJSON{KindHoldKey}, KeyNames(a.Keys), int(a.Duration.Milliseconds())})
}

// MarshalJSON writes the neutral JSON form.
func (a TypeText) MarshalJSON() ([]byte, error) {
	return json.Marshal(typeJSON{kindJSON{KindType}, a.Text})
}

// MarshalJSON writes the neutral JSON form.
func (a Wait) MarshalJSON() ([]byte, error) {
	return json.Marshal(waitJSON{kindJSON{KindWait}, int(a.Duration.Milliseconds())})
}

// MarshalJSON writes the neutral JSON form.
func (a Screenshot) MarshalJSON() ([]byte, error) {
	return json.Marshal(bareJSON{kindJSON{KindScreenshot}})
}

// MarshalJSON writes the neutral JSON form.
func (a Zoom) MarshalJSON() ([]byte, error) {
	return json.Marshal(zoomJSON{kindJSON{KindZoom}, a.Region[:], a.Width, a.Height})
}

// MarshalJSON writes the neutral JSON form.
func (a CursorPosition) MarshalJSON() ([]byte, error) {
	return json.Marshal(bareJSON{kindJSON{KindCursorPosition}})
}

// MarshalJSON writes the neutral JSON form.
func (a ClipboardGet) MarshalJSON() ([]byte, error) {
	return json.Marshal(bareJSON{kindJSON{KindClipboardGet}})
}

// MarshalJSON writes the neutral JSON form.
func (a ClipboardSet) MarshalJSON() ([]byte, error) {
	return json.Marshal(clipboardJSON{kindJSON{KindClipboardSet}, a.Text})
}

// DecodeActions reads a JSON array of neutral actions (or a single action
// object), parses each into its kind's type and validates it: the one entry
// for the neutral JSON form. Errors are *FieldError naming the field as
// "actions[i].field"; more than MaxActions actions is refused.
func DecodeActions(data []byte) ([]Action, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		a, err := DecodeAction(data)
		if err != nil {
			return nil, WithPrefix(Elem("actions", 0), err)
		}
		return []Action{a}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, Invalid("actions", nil, "must be a JSON array of action objects: "+err.Error())
	}
	if err := CheckCount(len(raws)); err != nil {
		return nil, err
	}
	acts := make([]Action, len(raws))
	for i, raw := range raws {
		a, err := DecodeAction(raw)
		if err != nil {
			return nil, WithPrefix(Elem("actions", i), err)
		}
		acts[i] = a
	}
	return acts, nil
}

// CheckCount refuses more than MaxActions actions.
func CheckCount(n int) error {
	if n > MaxActions {
		return TooLarge("actions", MaxActions, fmt.Sprintf("at most %d actions per request, got %d; split them over several requests", MaxActions, n))
	}
	return nil
}

// DecodeAction reads one neutral action object strictly (unknown fields,
// fields its kind does not use and values of the wrong type are errors naming
// the field) and validates it.
func DecodeAction(data []byte) (Action, error) {
	var head struct {
		Kind *Kind `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, jsonFieldError(err, nil)
	}
	if head.Kind == nil {
		return nil, OneOf("kind", ErrUnsupportedAction, kindNames(), "missing; kinds are "+strings.Join(kindNames(), ", "))
	}
	mk, ok := wireForms[*head.Kind]
	if !ok {
		return nil, OneOf("kind", ErrUnsupportedAction, kindNames(),
			fmt.Sprintf("unknown kind %q; kinds are %s", *head.Kind, strings.Join(kindNames(), ", ")))
	}
	w := mk()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(w); err != nil {
		return nil, jsonFieldError(err, w)
	}
	a, err := w.action()
	if err != nil {
		return nil, err
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// jsonFieldError turns encoding/json's decode errors into *FieldError; w is
// the wire struct being decoded, for the list of fields its kind takes.
func jsonFieldError(err error, w wireForm) error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		// Fields of the embedded structs are the object's own.
		field := strings.NewReplacer("xyJSON.", "", "kindJSON.", "").Replace(te.Field)
		return Invalid(field, nil, fmt.Sprintf("must be %s, got JSON %s", jsonTypeName(te.Type.Kind()), te.Value))
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		f = strings.Trim(f, `"`)
		if w == nil {
			return Invalid(f, nil, "unknown field")
		}
		takes := jsonFields(w)
		k := w.(interface{ kind() Kind }).kind()
		if slices.Contains(allNeutralFields(), f) {
			return Invalid(f, nil, fmt.Sprintf("not used by %s (%s takes %s)", k, k, TakesList(takes)))
		}
		return Invalid(f, nil, fmt.Sprintf("unknown field; %s takes %s", k, TakesList(takes)))
	}
	if errors.Is(err, io.EOF) {
		return Invalid("", nil, "empty input; want a JSON object")
	}
	return Invalid("", nil, "malformed JSON: "+err.Error())
}

func (k kindJSON) kind() Kind { return k.Kind }

func jsonTypeName(k reflect.Kind) string {
	switch k {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return "an object"
	}
	return "a " + k.String()
}

// jsonFields lists the JSON fields of a wire struct other than kind, read
// from its tags so the list is never written twice.
func jsonFields(w any) []string {
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "kind" {
				out = append(out, name)
			}
		}
	}
	walk(reflect.TypeOf(w).Elem())
	return out
}

// allNeutralFields is every field of any kind.
func allNeutralFields() []string {
	var all []string
	for _, mk := range wireForms {
		for _, f := range jsonFields(mk()) {
			if !slices.Contains(all, f) {
				all = append(all, f)
			}
		}
	}
	return all
}

// TakesList renders a kind's field list for an error message ("x, y" or
// "no other fields").
func TakesList(fs []string) string {
	if len(fs) == 0 {
		return "no other fields"
	}
	return strings.Join(fs, ", ")
}
