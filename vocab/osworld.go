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

var osworldParams = map[string][]string{
	"MOVE_TO":      {"x", "y"},
	"CLICK":        {"button", "x", "y", "num_clicks"},
	"MOUSE_DOWN":   {"button"},
	"MOUSE_UP":     {"button"},
	"RIGHT_CLICK":  {"x", "y"},
	"DOUBLE_CLICK": {"x", "y"},
	"DRAG_TO":      {"x", "y"},
	"SCROLL":       {"dx", "dy"},
	"TYPING":       {"text"},
	"PRESS":        {"key"},
	"KEY_DOWN":     {"key"},
	"KEY_UP":       {"key"},
	"HOTKEY":       {"keys"},
	"WAIT":         {},
	"FAIL":         {},
	"DONE":         {},
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
	action = bytes.TrimSpace(action)
	var typ string
	params := claudeInput{}
	if len(action) > 0 && action[0] == '"' {
		if err := json.Unmarshal(action, &typ); err != nil {
			return nil, "", actions.Invalid("action_type", nil, "malformed JSON string")
		}
		if typ != "WAIT" && typ != "FAIL" && typ != "DONE" {
			return nil, "", actions.Invalid("action_type", actions.ErrUnsupportedAction,
				fmt.Sprintf("only WAIT, FAIL and DONE may be given as a bare string, got %q", typ))
		}
	} else {
		in, err := decodeClaudeInput(action)
		if err != nil {
			return nil, "", actions.Renamed(err, "action")
		}
		for _, f := range sortedKeys(in) {
			if f != "action_type" && f != "parameters" {
				return nil, "", actions.Invalid(f, nil, "unknown field; an action has action_type and parameters")
			}
		}
		if err := json.Unmarshal(in["action_type"], &typ); err != nil {
			return nil, "", actions.OneOf("action_type", actions.ErrUnsupportedAction, osworldActions, "must be a string: one of "+strings.Join(osworldActions, ", "))
		}
		if raw, ok := in["parameters"]; ok {
			p, err := decodeClaudeInput(raw)
			if err != nil {
				return nil, "", actions.Renamed(err, "parameters")
			}
			params = p
		}
	}
	allowed, ok := osworldParams[typ]
	if !ok {
		return nil, "", actions.OneOf("action_type", actions.ErrUnsupportedAction, osworldActions,
			fmt.Sprintf("unknown action %q; computer_13 has %s", typ, strings.Join(osworldActions, ", ")))
	}
	for _, f := range sortedKeys(params) {
		if !slices.Contains(allowed, f) {
			return nil, "", actions.InvalidAt(osworldParam(f), nil, fmt.Sprintf("not used by %s (%s takes %s)", typ, typ, actions.TakesList(allowed)))
		}
	}
	// optXY reads x and y, both or neither.
	optXY := func(required bool) (*actions.Point, error) {
		_, hx := params["x"]
		_, hy := params["y"]
		if !hx && !hy && !required {
			return nil, nil
		}
		if !hx || !hy {
			f := "x"
			if hx {
				f = "y"
			}
			return nil, actions.InvalidAt(osworldParam(f), nil, "x and y go together: give both"+map[bool]string{true: "", false: " or neither"}[required])
		}
		x, err := screenCoord("parameters.x", params["x"])
		if err != nil {
			return nil, err
		}
		y, err := screenCoord("parameters.y", params["y"])
		if err != nil {
			return nil, err
		}
		return &actions.Point{X: x, Y: y}, nil
	}
	button := func() (actions.Button, error) {
		raw, ok := params["button"]
		if !ok {
			return actions.ButtonLeft, nil
		}
		var b string
		if err := json.Unmarshal(raw, &b); err != nil {
			return "", actions.InvalidAt(osworldParam("button"), nil, "must be a string: left, right or middle")
		}
		switch actions.Button(b) {
		case actions.ButtonLeft, actions.ButtonRight, actions.ButtonMiddle:
			return actions.Button(b), nil
		}
		return "", actions.InvalidAt(osworldParam("button"), nil, fmt.Sprintf("must be left, right or middle, got %q", b))
	}
	key := func(field string, raw json.RawMessage) (actions.Key, error) {
		var n string
		if err := json.Unmarshal(raw, &n); err != nil {
			return actions.Key{}, actions.Invalid(field, actions.ErrUnknownKey, "must be a key name string such as \"enter\" or \"a\"")
		}
		k, err := actions.ParseKey(n)
		if err != nil {
			return actions.Key{}, actions.WithPrefix(fielderr.Name(field), err)
		}
		return k, nil
	}
	need := func(fs ...string) error {
		for _, f := range fs {
			if _, ok := params[f]; !ok {
				return actions.InvalidAt(osworldParam(f), nil, fmt.Sprintf("required for %s", typ))
			}
		}
		return nil
	}

	switch typ {
	case "DONE", "FAIL":
		return nil, typ, nil
	case "WAIT":
		return []actions.Action{actions.Wait{Duration: OSWorldWait}}, "", nil
	case "MOVE_TO":
		at, err := optXY(true)
		if err != nil {
			return nil, "", err
		}
		return []actions.Action{actions.Move{To: *at}}, "", nil
	case "CLICK", "RIGHT_CLICK", "DOUBLE_CLICK":
		at, err := optXY(false)
		if err != nil {
			return nil, "", err
		}
		b, n := actions.ButtonLeft, 1
		switch typ {
		case "RIGHT_CLICK":
			b = actions.ButtonRight
		case "DOUBLE_CLICK":
			n = 2
		default:
			if b, err = button(); err != nil {
				return nil, "", err
			}
			if raw, ok := params["num_clicks"]; ok {
				if n, err = claudeInt("parameters.num_clicks", raw); err != nil {
					return nil, "", err
				}
				if n < 1 || n > actions.MaxClickCount {
					return nil, "", actions.InvalidAt(osworldParam("num_clicks"), nil, fmt.Sprintf("must be 1, 2 or 3, got %d", n))
				}
			}
		}
		return []actions.Action{actions.Click{At: at, Button: b, Count: n}}, "", nil
	case "MOUSE_DOWN", "MOUSE_UP":
		b, err := button()
		if err != nil {
			return nil, "", err
		}
		if typ == "MOUSE_UP" {
			return []actions.Action{actions.ButtonUp{Button: b}}, "", nil
		}
		return []actions.Action{actions.ButtonDown{Button: b}}, "", nil
	case "DRAG_TO":
		at, err := optXY(true)
		if err != nil {
			return nil, "", err
		}
		return []actions.Action{actions.Drag{To: *at, Button: actions.ButtonLeft}}, "", nil
	case "SCROLL":
		if err := need("dx", "dy"); err != nil {
			return nil, "", err
		}
		dx, err := claudeInt("parameters.dx", params["dx"])
		if err != nil {
			return nil, "", err
		}
		dy, err := claudeInt("parameters.dy", params["dy"])
		if err != nil {
			return nil, "", err
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
				return nil, "", actions.InvalidAt(osworldParam(s.field), nil, fmt.Sprintf("at most %d wheel clicks either way, got %d", actions.MaxScrollAmount, s.v))
			}
			d := s.pos
			if s.v < 0 {
				d = s.neg
			}
			acts = append(acts, actions.Scroll{Direction: d, Amount: int(math.Abs(float64(s.v)))})
		}
		if len(acts) == 0 {
			return nil, "", actions.InvalidAt(osworldParam("dy"), nil, "dx and dy are both 0: nothing to scroll")
		}
		return acts, "", nil
	case "TYPING":
		if err := need("text"); err != nil {
			return nil, "", err
		}
		text, err := claudeText(params, "text")
		if err != nil {
			return nil, "", actions.Renamed(err, "parameters.text")
		}
		a := actions.TypeText{Text: text}
		if err := a.Validate(); err != nil {
			return nil, "", actions.WithPrefix(fielderr.Name("parameters"), err)
		}
		return []actions.Action{a}, "", nil
	case "PRESS", "KEY_DOWN", "KEY_UP":
		if err := need("key"); err != nil {
			return nil, "", err
		}
		n, err := key("parameters.key", params["key"])
		if err != nil {
			return nil, "", err
		}
		switch keys := []actions.Key{n}; typ {
		case "KEY_DOWN":
			return []actions.Action{actions.KeyDown{Keys: keys}}, "", nil
		case "KEY_UP":
			return []actions.Action{actions.KeyUp{Keys: keys}}, "", nil
		default:
			return []actions.Action{actions.KeyPress{Keys: keys}}, "", nil
		}
	case "HOTKEY":
		if err := need("keys"); err != nil {
			return nil, "", err
		}
		var raws []json.RawMessage
		if err := json.Unmarshal(params["keys"], &raws); err != nil || len(raws) == 0 {
			return nil, "", actions.InvalidAt(osworldParam("keys"), actions.ErrUnknownKey, "must be a non-empty list of key names such as [\"ctrl\", \"c\"]")
		}
		var keys []actions.Key
		for i, raw := range raws {
			k, err := key(fmt.Sprintf("parameters.keys[%d]", i), raw)
			if err != nil {
				return nil, "", err
			}
			keys = append(keys, k)
		}
		a := actions.KeyPress{Keys: keys}
		if err := a.Validate(); err != nil {
			return nil, "", actions.WithPrefix(fielderr.Name("parameters"), err)
		}
		return []actions.Action{a}, "", nil
	}
	return nil, "", actions.Invalid("action_type", actions.ErrUnsupportedAction, fmt.Sprintf("action %q is not implemented", typ))
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
