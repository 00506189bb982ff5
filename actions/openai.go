package actions

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// OpenAIScrollPixelsPerClick converts OpenAI CUA scroll offsets, which are
// pixels (the sample app passes them to window.scrollBy), to wheel clicks:
// one click per 100 px, rounded, at least one for a non-zero offset.
const OpenAIScrollPixelsPerClick = 100

// OpenAIWait is how long a CUA wait action waits (the sample app's default).
const OpenAIWait = time.Second

var openAIActions = []string{"click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type", "wait"}

var openAIButtons = []string{"left", "right", "wheel", "back", "forward"}

var openAIFields = map[string][]string{
	"click":        {"x", "y", "button"},
	"double_click": {"x", "y"},
	"drag":         {"path"},
	"keypress":     {"keys"},
	"move":         {"x", "y"},
	"screenshot":   {},
	"scroll":       {"x", "y", "scroll_x", "scroll_y"},
	"type":         {"text"},
	"wait":         {},
}

// TranslateOpenAI turns one OpenAI computer-use (CUA) action, the "action"
// object of a computer_call such as {"type":"click","x":10,"y":20,
// "button":"left"}, into neutral actions (openai/openai-cua-sample-app,
// computers/):
//   - click: button left, right, wheel (middle); back and forward become
//     alt+Left / alt+Right, the history navigation the sample app performs
//     for them (the display cannot send mouse buttons 8 and 9).
//   - double_click, move, type, screenshot as named.
//   - scroll: scroll_x/scroll_y are pixels, positive right/down, turned into
//     wheel clicks (OpenAIScrollPixelsPerClick) at x, y.
//   - keypress: keys pressed together and released in reverse ("CTRL", "C";
//     names as ParseKey, single letters taken as lower case keys).
//   - drag: path of at least two {x, y}; pressed at the first point, moved
//     through the others, released at the last.
//   - wait: OpenAIWait.
func TranslateOpenAI(action []byte) ([]Action, error) {
	acts, err := translateOpenAI(action)
	if err == nil {
		err = validateAll(acts)
	}
	if err != nil {
		return nil, fmt.Errorf("openai computer action: %w", err)
	}
	return acts, nil
}

func translateOpenAI(action []byte) ([]Action, error) {
	in, err := decodeClaudeInput(action)
	if err != nil {
		return nil, renamed(err, "action")
	}
	var typ string
	if err := json.Unmarshal(in["type"], &typ); err != nil {
		return nil, oneOfErr("type", ErrUnsupportedAction, openAIActions, "must be one of "+strings.Join(openAIActions, ", "))
	}
	fields, ok := openAIFields[typ]
	if !ok {
		return nil, oneOfErr("type", ErrUnsupportedAction, openAIActions, fmt.Sprintf("unknown action %q; accepted are %s", typ, strings.Join(openAIActions, ", ")))
	}
	for _, f := range sortedKeys(in) {
		if f != "type" && !slices.Contains(fields, f) {
			return nil, fieldErr(f, nil, fmt.Sprintf("not used by %s (%s takes %s)", typ, typ, takesList(fields)))
		}
	}
	xy := func() (*Point, error) {
		for _, f := range []string{"x", "y"} {
			if _, ok := in[f]; !ok {
				return nil, fieldErr(f, nil, fmt.Sprintf("required for %s", typ))
			}
		}
		x, err := nonNegInt("x", in["x"])
		if err != nil {
			return nil, err
		}
		y, err := nonNegInt("y", in["y"])
		if err != nil {
			return nil, err
		}
		return &Point{X: x, Y: y}, nil
	}
	switch typ {
	case "click":
		at, err := xy()
		if err != nil {
			return nil, err
		}
		b := "left"
		if raw, ok := in["button"]; ok {
			if err := json.Unmarshal(raw, &b); err != nil {
				return nil, oneOfErr("button", nil, openAIButtons, "must be a string: left, right, wheel, back or forward")
			}
		}
		switch b {
		case "left":
			return []Action{Click{At: at, Button: ButtonLeft, Count: 1}}, nil
		case "right":
			return []Action{Click{At: at, Button: ButtonRight, Count: 1}}, nil
		case "wheel", "middle":
			return []Action{Click{At: at, Button: ButtonMiddle, Count: 1}}, nil
		case "back":
			return []Action{Move{To: *at}, KeyPress{Keys: MustKeys("Alt_L", "Left")}}, nil
		case "forward":
			return []Action{Move{To: *at}, KeyPress{Keys: MustKeys("Alt_L", "Right")}}, nil
		}
		return nil, oneOfErr("button", nil, openAIButtons, fmt.Sprintf("must be left, right, wheel, back or forward, got %q", b))
	case "double_click":
		at, err := xy()
		if err != nil {
			return nil, err
		}
		return []Action{Click{At: at, Button: ButtonLeft, Count: 2}}, nil
	case "move":
		at, err := xy()
		if err != nil {
			return nil, err
		}
		return []Action{Move{To: *at}}, nil
	case "screenshot":
		return []Action{Screenshot{}}, nil
	case "wait":
		return []Action{Wait{Duration: OpenAIWait}}, nil
	case "type":
		text, err := claudeText(in, "text")
		if err != nil {
			return nil, err
		}
		a := TypeText{Text: text}
		if err := a.Validate(); err != nil {
			return nil, err
		}
		return []Action{a}, nil
	case "keypress":
		var names []string
		if err := json.Unmarshal(in["keys"], &names); err != nil || len(names) == 0 {
			return nil, fieldErr("keys", ErrUnknownKey, "must be a non-empty array of key names such as [\"CTRL\", \"C\"]")
		}
		var keys []Key
		for _, n := range names {
			if len(n) == 1 && n[0] >= 'A' && n[0] <= 'Z' {
				n = strings.ToLower(n)
			}
			k, err := ParseKey(n)
			if err != nil {
				return nil, withPrefix("keys", err)
			}
			keys = append(keys, k)
		}
		a := KeyPress{Keys: keys}
		if err := a.Validate(); err != nil {
			return nil, err
		}
		return []Action{a}, nil
	case "scroll":
		at, err := xy()
		if err != nil {
			return nil, err
		}
		var sx, sy int
		if raw, ok := in["scroll_x"]; ok {
			if sx, err = claudeInt("scroll_x", raw); err != nil {
				return nil, err
			}
		}
		if raw, ok := in["scroll_y"]; ok {
			if sy, err = claudeInt("scroll_y", raw); err != nil {
				return nil, err
			}
		}
		acts := []Action{Move{To: *at}}
		if a, ok := pixelScroll(at, sy, ScrollDown, ScrollUp); ok {
			acts = append(acts, a)
		}
		if a, ok := pixelScroll(at, sx, ScrollRight, ScrollLeft); ok {
			acts = append(acts, a)
		}
		if len(acts) == 1 {
			return nil, fieldErr("scroll_y", nil, "scroll_x and scroll_y are both 0: nothing to scroll")
		}
		return acts, nil
	case "drag":
		var path []map[string]json.RawMessage
		if err := json.Unmarshal(in["path"], &path); err != nil || len(path) < 2 {
			return nil, fieldErr("path", nil, "must be an array of at least two {\"x\":..,\"y\":..} points")
		}
		if len(path) > MaxDragVia+2 {
			return nil, fieldErr("path", nil, fmt.Sprintf("at most %d points, got %d", MaxDragVia+2, len(path)))
		}
		pts := make([]Point, len(path))
		for i, p := range path {
			f := fmt.Sprintf("path[%d]", i)
			x, err := nonNegInt(f+".x", p["x"])
			if err != nil {
				return nil, err
			}
			y, err := nonNegInt(f+".y", p["y"])
			if err != nil {
				return nil, err
			}
			pts[i] = Point{X: x, Y: y}
		}
		last := pts[len(pts)-1]
		var via []Point
		if len(pts) > 2 {
			via = pts[1 : len(pts)-1]
		}
		return []Action{Drag{From: &pts[0], Via: via, To: last, Button: ButtonLeft}}, nil
	}
	return nil, fieldErr("type", ErrUnsupportedAction, fmt.Sprintf("action %q is not implemented", typ))
}

// pixelScroll turns a pixel offset into a scroll action; pos/neg are the
// directions of positive and negative offsets.
func pixelScroll(at *Point, px int, pos, neg Direction) (Action, bool) {
	if px == 0 {
		return nil, false
	}
	dir := pos
	if px < 0 {
		dir = neg
	}
	n := int(math.Round(math.Abs(float64(px)) / OpenAIScrollPixelsPerClick))
	n = min(max(n, 1), MaxScrollAmount)
	return Scroll{At: at, Direction: dir, Amount: n}, true
}

// nonNegInt reads a required non-negative integer.
func nonNegInt(field string, raw json.RawMessage) (int, error) {
	if raw == nil {
		return 0, fieldErr(field, nil, "required")
	}
	v, err := claudeInt(field, raw)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, fieldErr(field, ErrOutOfBounds, fmt.Sprintf("must be non-negative, got %d", v))
	}
	return v, nil
}
