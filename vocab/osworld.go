package vocab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// OSWorldWait is how long an OSWorld WAIT waits: DesktopEnv.step's default
// pause.
const OSWorldWait = 2 * time.Second

var osworldActions = []string{
	"MOVE_TO", "CLICK", "MOUSE_DOWN", "MOUSE_UP", "RIGHT_CLICK", "DOUBLE_CLICK", "DRAG_TO",
	"SCROLL", "TYPING", "PRESS", "KEY_DOWN", "KEY_UP", "HOTKEY", "WAIT", "FAIL", "DONE",
}

// osworldSpec is one computer_13 action: the parameters it takes and how it
// translates.
type osworldSpec struct {
	params []string
	// translate maps the checked parameters onto neutral actions; its
	// errors name the parameters without the "parameters." prefix.
	translate func(c osworldCall) ([]actions.Action, error)
}

var osworldSpecs = map[string]osworldSpec{
	"MOVE_TO":      {[]string{"x", "y"}, osworldMove},
	"CLICK":        {[]string{"button", "x", "y", "num_clicks"}, osworldClick},
	"MOUSE_DOWN":   {[]string{"button"}, osworldButton(true)},
	"MOUSE_UP":     {[]string{"button"}, osworldButton(false)},
	"RIGHT_CLICK":  {[]string{"x", "y"}, osworldClick},
	"DOUBLE_CLICK": {[]string{"x", "y"}, osworldClick},
	"DRAG_TO":      {[]string{"x", "y"}, osworldDrag},
	"SCROLL":       {[]string{"dx", "dy"}, osworldScroll},
	"TYPING":       {[]string{"text"}, osworldTyping},
	"PRESS":        {[]string{"key"}, osworldKey},
	"KEY_DOWN":     {[]string{"key"}, osworldKey},
	"KEY_UP":       {[]string{"key"}, osworldKey},
	"HOTKEY":       {[]string{"keys"}, osworldHotkey},
	"WAIT":         {nil, constant[osworldCall](actions.Wait{Duration: OSWorldWait})},
	"FAIL":         {nil, nil},
	"DONE":         {nil, nil},
}

// TranslateOSWorld turns one OSWorld computer_13 action into neutral actions
// (xlang-ai/OSWorld desktop_env/actions.py, executed there with pyautogui).
// The action is {"action_type": "CLICK", "parameters": {...}} or, for WAIT,
// FAIL and DONE, also the bare JSON string. terminal is "DONE" or "FAIL" for
// those episode signals (no actions); the caller ends the episode.
//
//   - x, y are screen pixels (floats are accepted and floored, as pyautogui
//     truncates); CLICK/RIGHT_CLICK/DOUBLE_CLICK without them click where the
//     pointer is; num_clicks is 1-3; button is left, right or middle.
//   - DRAG_TO drags with the left button from where the pointer is.
//   - SCROLL: dx wheel clicks right (negative: left), dy up (negative: down),
//     as pyautogui.hscroll/vscroll on X11.
//   - PRESS, KEY_DOWN, KEY_UP take a pyautogui key name, HOTKEY a list
//     pressed together (ParseKey accepts pyautogui's names).
//   - WAIT waits OSWorldWait.
func TranslateOSWorld(action []byte) (acts []actions.Action, terminal string, err error) {
	acts, terminal, err = translateOSWorld(action)
	if err == nil {
		err = actions.ValidateAll(acts)
	}
	if err != nil {
		return nil, "", fmt.Errorf("osworld computer_13 action: %w", err)
	}
	return acts, terminal, nil
}

func translateOSWorld(action []byte) ([]actions.Action, string, error) {
	typ, params, err := decodeOSWorld(action)
	if err != nil {
		return nil, "", err
	}
	spec, ok := osworldSpecs[typ]
	if !ok {
		return nil, "", actions.OneOf("action_type", actions.ErrUnsupportedAction, osworldActions,
			fmt.Sprintf("unknown action %q; computer_13 has %s", typ, strings.Join(osworldActions, ", ")))
	}
	for _, f := range sortedKeys(params) {
		if !slices.Contains(spec.params, f) {
			return nil, "", actions.InvalidAt(osworldParam(f), nil, fmt.Sprintf("not used by %s (%s takes %s)", typ, typ, actions.TakesList(spec.params)))
		}
	}
	if spec.translate == nil { // DONE, FAIL: the episode's signals
		return nil, typ, nil
	}
	acts, err := spec.translate(osworldCall{typ: typ, params: params})
	if err != nil {
		return nil, "", actions.WithPrefix(fielderr.Name("parameters"), err)
	}
	return acts, "", nil
}

// decodeOSWorld reads an action's type and parameters: an object, or for
// WAIT, FAIL and DONE also the bare string.
func decodeOSWorld(action []byte) (typ string, params claudeInput, err error) {
	action = bytes.TrimSpace(action)
	params = claudeInput{}
	if len(action) > 0 && action[0] == '"' {
		if err := json.Unmarshal(action, &typ); err != nil {
			return "", nil, actions.Invalid("action_type", nil, "malformed JSON string")
		}
		if typ != "WAIT" && typ != "FAIL" && typ != "DONE" {
			return "", nil, actions.Invalid("action_type", actions.ErrUnsupportedAction,
				fmt.Sprintf("only WAIT, FAIL and DONE may be given as a bare string, got %q", typ))
		}
		return typ, params, nil
	}
	in, err := decodeClaudeInput(action)
	if err != nil {
		return "", nil, actions.Renamed(err, "action")
	}
	for _, f := range sortedKeys(in) {
		if f != "action_type" && f != "parameters" {
			return "", nil, actions.Invalid(f, nil, "unknown field; an action has action_type and parameters")
		}
	}
	if err := json.Unmarshal(in["action_type"], &typ); err != nil {
		return "", nil, actions.OneOf("action_type", actions.ErrUnsupportedAction, osworldActions, "must be a string: one of "+strings.Join(osworldActions, ", "))
	}
	if raw, ok := in["parameters"]; ok {
		if params, err = decodeClaudeInput(raw); err != nil {
			return "", nil, actions.Renamed(err, "parameters")
		}
	}
	return typ, params, nil
}

// osworldCall is one checked computer_13 action, as the translate functions
// of osworldSpecs read it. Its errors name parameters without their prefix.
type osworldCall struct {
	typ    string
	params claudeInput
}

// xy reads x and y, both or neither (unless required).
func (c osworldCall) xy(required bool) (*actions.Point, error) {
	_, hx := c.params["x"]
	_, hy := c.params["y"]
	if !hx && !hy && !required {
		return nil, nil
	}
	if !hx || !hy {
		f := "x"
		if hx {
			f = "y"
		}
		return nil, actions.Invalid(f, nil, "x and y go together: give both"+map[bool]string{true: "", false: " or neither"}[required])
	}
	x, err := screenCoord("x", c.params["x"])
	if err != nil {
		return nil, err
	}
	y, err := screenCoord("y", c.params["y"])
	if err != nil {
		return nil, err
	}
	return &actions.Point{X: x, Y: y}, nil
}

// button reads button: left (the default), right or middle.
func (c osworldCall) button() (actions.Button, error) {
	raw, ok := c.params["button"]
	if !ok {
		return actions.ButtonLeft, nil
	}
	var b string
	if err := json.Unmarshal(raw, &b); err != nil {
		return "", actions.Invalid("button", nil, "must be a string: left, right or middle")
	}
	switch actions.Button(b) {
	case actions.ButtonLeft, actions.ButtonRight, actions.ButtonMiddle:
		return actions.Button(b), nil
	}
	return "", actions.Invalid("button", nil, fmt.Sprintf("must be left, right or middle, got %q", b))
}

// osworldKeyOf reads a pyautogui key name.
func osworldKeyOf(field fielderr.Path, raw json.RawMessage) (actions.Key, error) {
	var n string
	if err := json.Unmarshal(raw, &n); err != nil {
		return actions.Key{}, actions.InvalidAt(field, actions.ErrUnknownKey, "must be a key name string such as \"enter\" or \"a\"")
	}
	k, err := actions.ParseKey(n)
	if err != nil {
		return actions.Key{}, actions.WithPrefix(field, err)
	}
	return k, nil
}

// need refuses a missing parameter.
func (c osworldCall) need(fs ...string) error {
	for _, f := range fs {
		if _, ok := c.params[f]; !ok {
			return actions.Invalid(f, nil, fmt.Sprintf("required for %s", c.typ))
		}
	}
	return nil
}

func osworldMove(c osworldCall) ([]actions.Action, error) {
	at, err := c.xy(true)
	if err != nil {
		return nil, err
	}
	return []actions.Action{actions.Move{To: *at}}, nil
}

// osworldClick is CLICK (button, num_clicks), RIGHT_CLICK and DOUBLE_CLICK.
func osworldClick(c osworldCall) ([]actions.Action, error) {
	at, err := c.xy(false)
	if err != nil {
		return nil, err
	}
	b, n := actions.ButtonLeft, 1
	switch c.typ {
	case "RIGHT_CLICK":
		b = actions.ButtonRight
	case "DOUBLE_CLICK":
		n = 2
	default:
		if b, err = c.button(); err != nil {
			return nil, err
		}
		if raw, ok := c.params["num_clicks"]; ok {
			if n, err = claudeInt("num_clicks", raw); err != nil {
				return nil, err
			}
			if n < 1 || n > actions.MaxClickCount {
				return nil, actions.Invalid("num_clicks", nil, fmt.Sprintf("must be 1, 2 or 3, got %d", n))
			}
		}
	}
	return []actions.Action{actions.Click{At: at, Button: b, Count: n}}, nil
}

// osworldButton is MOUSE_DOWN (down) or MOUSE_UP.
func osworldButton(down bool) func(osworldCall) ([]actions.Action, error) {
	return func(c osworldCall) ([]actions.Action, error) {
		b, err := c.button()
		if err != nil {
			return nil, err
		}
		if down {
			return []actions.Action{actions.ButtonDown{Button: b}}, nil
		}
		return []actions.Action{actions.ButtonUp{Button: b}}, nil
	}
}

func osworldDrag(c osworldCall) ([]actions.Action, error) {
	at, err := c.xy(true)
	if err != nil {
		return nil, err
	}
	return []actions.Action{actions.Drag{To: *at, Button: actions.ButtonLeft}}, nil
}

func osworldScroll(c osworldCall) ([]actions.Action, error) {
	if err := c.need("dx", "dy"); err != nil {
		return nil, err
	}
	dx, err := claudeInt("dx", c.params["dx"])
	if err != nil {
		return nil, err
	}
	dy, err := claudeInt("dy", c.params["dy"])
	if err != nil {
		return nil, err
	}
	var acts []actions.Action
	for _, s := range []struct {
		v        int
		pos, neg actions.Direction
		field    string
	}{{dy, actions.ScrollUp, actions.ScrollDown, "dy"}, {dx, actions.ScrollRight, actions.ScrollLeft, "dx"}} {
		if s.v == 0 {
			continue
		}
		if abs := int(math.Abs(float64(s.v))); abs > actions.MaxScrollAmount {
			return nil, actions.Invalid(s.field, nil, fmt.Sprintf("at most %d wheel clicks either way, got %d", actions.MaxScrollAmount, s.v))
		}
		d := s.pos
		if s.v < 0 {
			d = s.neg
		}
		acts = append(acts, actions.Scroll{Direction: d, Amount: int(math.Abs(float64(s.v)))})
	}
	if len(acts) == 0 {
		return nil, actions.Invalid("dy", nil, "dx and dy are both 0: nothing to scroll")
	}
	return acts, nil
}

func osworldTyping(c osworldCall) ([]actions.Action, error) {
	if err := c.need("text"); err != nil {
		return nil, err
	}
	text, err := claudeText(c.params, "text")
	if err != nil {
		return nil, actions.Renamed(err, "text")
	}
	a := actions.TypeText{Text: text}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return []actions.Action{a}, nil
}

// osworldKey is PRESS, KEY_DOWN and KEY_UP.
func osworldKey(c osworldCall) ([]actions.Action, error) {
	if err := c.need("key"); err != nil {
		return nil, err
	}
	n, err := osworldKeyOf(fielderr.Name("key"), c.params["key"])
	if err != nil {
		return nil, err
	}
	switch keys := []actions.Key{n}; c.typ {
	case "KEY_DOWN":
		return []actions.Action{actions.KeyDown{Keys: keys}}, nil
	case "KEY_UP":
		return []actions.Action{actions.KeyUp{Keys: keys}}, nil
	default:
		return []actions.Action{actions.KeyPress{Keys: keys}}, nil
	}
}

func osworldHotkey(c osworldCall) ([]actions.Action, error) {
	if err := c.need("keys"); err != nil {
		return nil, err
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(c.params["keys"], &raws); err != nil || len(raws) == 0 {
		return nil, actions.Invalid("keys", actions.ErrUnknownKey, "must be a non-empty list of key names such as [\"ctrl\", \"c\"]")
	}
	var keys []actions.Key
	for i, raw := range raws {
		k, err := osworldKeyOf(actions.Elem("keys", i), raw)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	a := actions.KeyPress{Keys: keys}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return []actions.Action{a}, nil
}

// screenCoord reads an OSWorld coordinate: a non-negative number, floored.
func screenCoord(field string, raw json.RawMessage) (int, error) {
	f, err := claudeNumber(field, raw)
	if err != nil {
		return 0, err
	}
	if f < 0 || f > 1e6 {
		return 0, actions.Invalid(field, actions.ErrOutOfBounds, fmt.Sprintf("must be a non-negative screen coordinate, got %s", clip(raw)))
	}
	return int(math.Floor(f)), nil
}
