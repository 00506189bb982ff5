package vocab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/responses"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/player"
)

// OpenAIScrollPixelsPerClick converts OpenAI computer-use scroll offsets,
// which are pixels (OpenAI's sample app passes scroll_x/scroll_y to
// window.scrollBy), to wheel clicks: one click per 100 px, rounded to the
// nearest, at least one for a non-zero offset, at most MaxScrollAmount. A
// wheel click scrolls about three lines (~50-60 px) in Firefox, Chromium and
// GTK on X11, so an offset scrolls up to twice as far as the model asked;
// erring on the long side keeps the model from creeping, and it sees the
// result in the next screenshot either way.
const OpenAIScrollPixelsPerClick = 100

// OpenAIWait is how long a computer-use wait action waits (the sample app's
// wait(ms=1000); the SDK's wait has no duration).
const OpenAIWait = time.Second

var openAIActions = []string{"click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type", "wait"}

var openAIButtons = []string{"left", "right", "wheel", "back", "forward"}

// openAIFields are the fields of each action type besides type.
var openAIFields = map[string][]string{
	"click":        {"button", "x", "y", "keys"},
	"double_click": {"x", "y", "keys"},
	"drag":         {"path", "keys"},
	"keypress":     {"keys"},
	"move":         {"x", "y", "keys"},
	"screenshot":   {},
	"scroll":       {"x", "y", "scroll_x", "scroll_y", "keys"},
	"type":         {"text"},
	"wait":         {},
}

// openAIKeyHelp is the part of an unknown-key error that says what is
// accepted, in OpenAI's spelling.
const openAIKeyHelp = "accepted are OpenAI computer-use key names, any case: CTRL, SHIFT, ALT, CMD, SUPER, WIN, " +
	"META, OPTION, ENTER, RETURN, ESC, TAB, SPACE, BACKSPACE, DELETE, INSERT, HOME, END, PAGEUP, PAGEDOWN, " +
	"ARROWLEFT, ARROWUP, ARROWRIGHT, ARROWDOWN, CAPSLOCK, F1-F24, single characters (A, 1, /, \\), and X keysym names"

// OpenAICall is an OpenAI computer_call item translated into neutral
// actions.
type OpenAICall struct {
	// Item is the decoded item; its call_id and pending_safety_checks
	// shape the output (OpenAIOutput).
	Item *responses.ResponseComputerToolCall
	// Actions are the neutral actions of its action or actions, in order.
	Actions []actions.Action

	fields []func(fielderr.Path) fielderr.Path
	labels []string
}

// TranslateOpenAICall decodes a Responses-API computer_call item, as the
// model emitted it, with openai-go's responses.ResponseComputerToolCall and
// translates its actions. Both shapes are accepted, whichever tool the agent
// declared (computer_use_preview or computer): a single "action" (the
// preview tool) or the batched "actions" list (the GA tool). Errors name the
// item's fields: "action.x", "actions[2].keys[0]", "call_id".
func TranslateOpenAICall(item []byte) (*OpenAICall, error) {
	oc, err := translateOpenAICall(item)
	if err != nil {
		return nil, fmt.Errorf("openai computer_call: %w", err)
	}
	return oc, nil
}

func translateOpenAICall(item []byte) (*OpenAICall, error) {
	top, err := decodeClaudeInput(item)
	if err != nil {
		return nil, actions.Renamed(err, "input")
	}
	var typ string
	if err := json.Unmarshal(top["type"], &typ); err != nil || typ != "computer_call" {
		msg := `must be "computer_call": give the computer_call item the model emitted`
		if slices.Contains(openAIActions, typ) {
			msg += fmt.Sprintf(" (this is a bare %s action; wrap it as {\"type\":\"computer_call\",\"call_id\":...,\"action\":{...}})", typ)
		}
		return nil, actions.Invalid("type", nil, msg)
	}
	call := new(responses.ResponseComputerToolCall)
	if err := json.Unmarshal(item, call); err != nil {
		return nil, actions.Invalid("input", nil, "malformed computer_call item: "+err.Error())
	}
	if call.CallID == "" {
		return nil, actions.Invalid("call_id", nil, "required: the computer_call_output answers it")
	}
	_, hasOne := top["action"]
	_, hasMany := top["actions"]
	oc := &OpenAICall{Item: call}
	switch {
	case hasOne && hasMany:
		return nil, actions.Invalid("actions", nil, "give action or actions, not both")
	case hasOne:
		a, err := openAIActionOf(call.Action.AsAny(), call.Action.Type)
		if err != nil {
			return nil, actions.WithPrefix(fielderr.Name("action"), err)
		}
		if err := oc.add(fielderr.Name("action"), a); err != nil {
			return nil, err
		}
	case hasMany:
		if len(call.Actions) == 0 {
			return nil, actions.Invalid("actions", nil, "must be a non-empty list of actions")
		}
		if err := actions.CheckCount(len(call.Actions)); err != nil {
			return nil, err
		}
		for i, u := range call.Actions {
			a, err := openAIActionOf(u.AsAny(), u.Type)
			if err != nil {
				return nil, actions.WithPrefix(actions.Elem("actions", i), err)
			}
			if err := oc.add(actions.Elem("actions", i), a); err != nil {
				return nil, err
			}
		}
	default:
		return nil, actions.Invalid("action", nil, "a computer_call needs action (computer_use_preview) or actions (computer)")
	}
	if err := actions.CheckCount(len(oc.Actions)); err != nil {
		return nil, actions.Renamed(err, "actions")
	}
	return oc, nil
}

// add translates one action whose fields are named with prefix.
func (oc *OpenAICall) add(prefix fielderr.Path, a openAIAction) error {
	acts, err := a.translate()
	if err == nil {
		err = actions.ValidateAll(acts)
	}
	if err != nil {
		return actions.WithPrefix(prefix, err)
	}
	for _, n := range acts {
		oc.fields = append(oc.fields, func(f fielderr.Path) fielderr.Path { return prefix.Join(a.agentField(n, f)) })
		oc.labels = append(oc.labels, fmt.Sprintf("%s (%s)", prefix, a.typ))
	}
	oc.Actions = append(oc.Actions, acts...)
	return nil
}

// TranslateOpenAI turns one bare OpenAI computer-use action object, such as
// {"type":"click","x":10,"y":20,"button":"left"}, into neutral actions; it is
// the action of a computer_call item (see TranslateOpenAICall):
//   - click: button left, right, wheel (middle), back or forward (X buttons
//     8 and 9, which the executor clicks through GuestInput); keys are
//     modifiers held during the click, as for double_click, scroll and drag;
//   - double_click, type, screenshot as named; move holds keys around the
//     move;
//   - scroll: scroll_x/scroll_y are pixels, positive right/down, turned into
//     wheel clicks (OpenAIScrollPixelsPerClick) at x, y, vertical first;
//   - keypress: keys pressed together and released in reverse ("CTRL",
//     "C"); names any case (openAIKeyHelp), single letters as lower-case keys;
//   - drag: path of at least two {x, y}; pressed at the first point, moved
//     through the others, released at the last;
//   - wait: OpenAIWait.
//
// A field of another action type is an error; fields no action type has are
// ignored, so a newer API's additions do not break a call.
func TranslateOpenAI(action []byte) ([]actions.Action, error) {
	acts, err := translateOpenAI(action)
	if err != nil {
		return nil, fmt.Errorf("openai computer action: %w", err)
	}
	return acts, nil
}

func translateOpenAI(action []byte) ([]actions.Action, error) {
	action = bytes.TrimSpace(action)
	if len(action) == 0 || action[0] != '{' {
		return nil, actions.Invalid("action", nil, "must be a JSON object such as {\"type\":\"screenshot\"}")
	}
	var u responses.ComputerActionUnion
	if err := json.Unmarshal(action, &u); err != nil {
		return nil, actions.Invalid("action", nil, "malformed action: "+err.Error())
	}
	a, err := openAIActionOf(u.AsAny(), u.Type)
	if err != nil {
		return nil, err
	}
	acts, err := a.translate()
	if err == nil {
		err = actions.ValidateAll(acts)
	}
	return acts, err
}

// openAIAction is one computer-use action, from either of the SDK's unions
// (the preview's ResponseComputerToolCallActionUnion or the GA's
// ComputerActionUnion, whose variants have the same fields).
// Numbers are kept as the SDK's raw fields and read by intField, which
// refuses what the SDK's decoder would silently truncate or zero.
type openAIAction struct {
	typ     string
	button  string
	x, y    respjson.Field
	keys    []string
	path    []openAIPoint
	scroll  [2]respjson.Field // scroll_x, scroll_y
	text    string
	hasText bool
	hasPath bool
	hasKeys bool
}

type openAIPoint struct{ x, y respjson.Field }

// openAIActionOf converts a variant of either union (AsAny) of type typ.
func openAIActionOf(v any, typ string) (openAIAction, error) {
	a := openAIAction{typ: typ}
	var extra map[string]respjson.Field
	switch v := v.(type) {
	case responses.ResponseComputerToolCallActionClick:
		a.button, a.x, a.y, a.keys, extra = v.Button, v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
	case responses.ComputerActionClick:
		a.button, a.x, a.y, a.keys, extra = v.Button, v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
	case responses.ResponseComputerToolCallActionDoubleClick:
		a.x, a.y, a.keys, extra = v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
	case responses.ComputerActionDoubleClick:
		a.x, a.y, a.keys, extra = v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
	case responses.ResponseComputerToolCallActionDrag:
		a.keys, extra, a.hasPath = v.Keys, v.JSON.ExtraFields, v.JSON.Path.Valid()
		for _, p := range v.Path {
			a.path = append(a.path, openAIPoint{p.JSON.X, p.JSON.Y})
		}
	case responses.ComputerActionDrag:
		a.keys, extra, a.hasPath = v.Keys, v.JSON.ExtraFields, v.JSON.Path.Valid()
		for _, p := range v.Path {
			a.path = append(a.path, openAIPoint{p.JSON.X, p.JSON.Y})
		}
	case responses.ResponseComputerToolCallActionKeypress:
		a.keys, a.hasKeys, extra = v.Keys, v.JSON.Keys.Valid(), v.JSON.ExtraFields
	case responses.ComputerActionKeypress:
		a.keys, a.hasKeys, extra = v.Keys, v.JSON.Keys.Valid(), v.JSON.ExtraFields
	case responses.ResponseComputerToolCallActionMove:
		a.x, a.y, a.keys, extra = v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
	case responses.ComputerActionMove:
		a.x, a.y, a.keys, extra = v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
	case responses.ResponseComputerToolCallActionScroll:
		a.x, a.y, a.keys, extra = v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
		a.scroll = [2]respjson.Field{v.JSON.ScrollX, v.JSON.ScrollY}
	case responses.ComputerActionScroll:
		a.x, a.y, a.keys, extra = v.JSON.X, v.JSON.Y, v.Keys, v.JSON.ExtraFields
		a.scroll = [2]respjson.Field{v.JSON.ScrollX, v.JSON.ScrollY}
	case responses.ResponseComputerToolCallActionType:
		a.text, a.hasText, extra = v.Text, v.JSON.Text.Valid(), v.JSON.ExtraFields
	case responses.ComputerActionType:
		a.text, a.hasText, extra = v.Text, v.JSON.Text.Valid(), v.JSON.ExtraFields
	case responses.ResponseComputerToolCallActionScreenshot:
		extra = v.JSON.ExtraFields
	case responses.ComputerActionScreenshot:
		extra = v.JSON.ExtraFields
	case responses.ResponseComputerToolCallActionWait:
		extra = v.JSON.ExtraFields
	case responses.ComputerActionWait:
		extra = v.JSON.ExtraFields
	default:
		msg := "must be one of " + strings.Join(openAIActions, ", ")
		if typ != "" {
			msg = fmt.Sprintf("unknown action %q; accepted are %s", typ, strings.Join(openAIActions, ", "))
		}
		return a, actions.OneOf("type", actions.ErrUnsupportedAction, openAIActions, msg)
	}
	// A field that belongs to another action type is a mistake worth
	// naming; a field no action has is a newer API's and is ignored.
	for _, f := range sortedFieldNames(extra) {
		if f == "type" || strings.HasPrefix(f, "_") || extra[f].Raw() == "null" {
			continue
		}
		for _, fs := range openAIFields {
			if slices.Contains(fs, f) {
				return a, actions.Invalid(f, nil, fmt.Sprintf("not used by %s (%s takes %s)", typ, typ, actions.TakesList(openAIFields[typ])))
			}
		}
	}
	return a, nil
}

func sortedFieldNames(m map[string]respjson.Field) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// intField checks a decoded integer field: present, an integer (10.0 is
// one, 10.5 and "10" are not; the SDK's decoder would truncate or zero
// them), and (if nonNeg) not negative.
func intField(name string, f respjson.Field, nonNeg bool) (int, error) {
	raw := f.Raw()
	if raw == "" || raw == "null" {
		return 0, actions.Invalid(name, nil, "required")
	}
	v, err := claudeInt(name, json.RawMessage(raw))
	if err != nil {
		return 0, err
	}
	if nonNeg && v < 0 {
		return 0, actions.Invalid(name, actions.ErrOutOfBounds, fmt.Sprintf("must be non-negative, got %d", v))
	}
	return v, nil
}

func (a openAIAction) point() (*actions.Point, error) {
	x, err := intField("x", a.x, true)
	if err != nil {
		return nil, err
	}
	y, err := intField("y", a.y, true)
	if err != nil {
		return nil, err
	}
	return &actions.Point{X: x, Y: y}, nil
}

// parseOpenAIKey resolves one of OpenAI's key names: any case, single
// letters as their lower-case key (the model writes "C" for the c key).
func parseOpenAIKey(name string) (actions.Key, error) {
	if len(name) == 1 && name[0] >= 'A' && name[0] <= 'Z' {
		name = strings.ToLower(name)
	}
	k, err := actions.ParseKey(name)
	if err != nil {
		return actions.Key{}, &actions.FieldError{Msg: fmt.Sprintf("unknown key %q; %s", name, openAIKeyHelp), Errs: []error{actions.ErrInvalid, actions.ErrUnknownKey}}
	}
	return k, nil
}

// heldKeys parses the keys held during a pointer action; they must be
// modifiers.
func (a openAIAction) heldKeys() ([]actions.Key, error) {
	var keys []actions.Key
	for i, n := range a.keys {
		k, err := parseOpenAIKey(n)
		if err == nil && !k.IsModifier() {
			err = actions.Invalid("", actions.ErrUnknownKey, fmt.Sprintf("%q is not a modifier; keys held during a pointer action are "+
				"CTRL, SHIFT, ALT, CMD/SUPER/WIN or META", n))
		}
		if err != nil {
			return nil, actions.WithPrefix(actions.Elem("keys", i), err)
		}
		keys = append(keys, k)
	}
	if len(keys) > actions.MaxChordKeys {
		return nil, actions.TooLarge("keys", actions.MaxChordKeys, fmt.Sprintf("at most %d keys at once, got %d", actions.MaxChordKeys, len(keys)))
	}
	return keys, nil
}

// openAITranslators map each action type onto neutral actions.
var openAITranslators = map[string]func(openAIAction) ([]actions.Action, error){
	"click":        openAIAction.click,
	"double_click": openAIAction.click,
	"move":         openAIAction.move,
	"screenshot":   constant[openAIAction](actions.Screenshot{}),
	"wait":         constant[openAIAction](actions.Wait{Duration: OpenAIWait}),
	"type":         openAIAction.typeText,
	"keypress":     openAIAction.keypress,
	"scroll":       openAIAction.wheel,
	"drag":         openAIAction.drag,
}

func (a openAIAction) translate() ([]actions.Action, error) {
	if t, ok := openAITranslators[a.typ]; ok {
		return t(a)
	}
	return nil, actions.OneOf("type", actions.ErrUnsupportedAction, openAIActions, fmt.Sprintf("action %q is not implemented", a.typ))
}

// click is click (any button) and double_click (left).
func (a openAIAction) click() ([]actions.Action, error) {
	at, err := a.point()
	if err != nil {
		return nil, err
	}
	mods, err := a.heldKeys()
	if err != nil {
		return nil, err
	}
	if a.typ == "double_click" {
		return []actions.Action{actions.Click{At: at, Button: actions.ButtonLeft, Count: 2, Modifiers: mods}}, nil
	}
	b := map[string]actions.Button{"": actions.ButtonLeft, "left": actions.ButtonLeft, "right": actions.ButtonRight, "wheel": actions.ButtonMiddle,
		"middle": actions.ButtonMiddle, "back": actions.ButtonBack, "forward": actions.ButtonForward}
	button, ok := b[strings.ToLower(a.button)]
	if !ok {
		return nil, actions.OneOf("button", nil, openAIButtons, fmt.Sprintf("must be left, right, wheel, back or forward, got %q", a.button))
	}
	return []actions.Action{actions.Click{At: at, Button: button, Count: 1, Modifiers: mods}}, nil
}

// move holds keys around the move.
func (a openAIAction) move() ([]actions.Action, error) {
	at, err := a.point()
	if err != nil {
		return nil, err
	}
	mods, err := a.heldKeys()
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return []actions.Action{actions.Move{To: *at}}, nil
	}
	return []actions.Action{actions.KeyDown{Keys: mods}, actions.Move{To: *at}, actions.KeyUp{Keys: mods}}, nil
}

func (a openAIAction) typeText() ([]actions.Action, error) {
	if !a.hasText {
		return nil, actions.Invalid("text", nil, "required for type")
	}
	return []actions.Action{actions.TypeText{Text: a.text}}, nil
}

func (a openAIAction) keypress() ([]actions.Action, error) {
	if !a.hasKeys || len(a.keys) == 0 {
		return nil, actions.Invalid("keys", actions.ErrUnknownKey, "must be a non-empty array of key names such as [\"CTRL\", \"C\"]")
	}
	var keys []actions.Key
	for i, n := range a.keys {
		k, err := parseOpenAIKey(n)
		if err != nil {
			return nil, actions.WithPrefix(actions.Elem("keys", i), err)
		}
		keys = append(keys, k)
	}
	kp := actions.KeyPress{Keys: keys}
	if err := kp.Validate(); err != nil {
		return nil, err
	}
	return []actions.Action{kp}, nil
}

// wheel turns scroll_x/scroll_y pixels into wheel clicks, vertical first.
func (a openAIAction) wheel() ([]actions.Action, error) {
	at, err := a.point()
	if err != nil {
		return nil, err
	}
	sx, err := intField("scroll_x", a.scroll[0], false)
	if err != nil && a.scroll[0].Raw() != "" {
		return nil, err
	}
	sy, err := intField("scroll_y", a.scroll[1], false)
	if err != nil && a.scroll[1].Raw() != "" {
		return nil, err
	}
	mods, err := a.heldKeys()
	if err != nil {
		return nil, err
	}
	var acts []actions.Action
	if s, ok := pixelScroll(at, sy, actions.ScrollDown, actions.ScrollUp, mods); ok {
		acts = append(acts, s)
	}
	if s, ok := pixelScroll(at, sx, actions.ScrollRight, actions.ScrollLeft, mods); ok {
		acts = append(acts, s)
	}
	if len(acts) == 0 {
		return nil, actions.Invalid("scroll_y", nil, "scroll_x and scroll_y are both 0 or absent: nothing to scroll")
	}
	return acts, nil
}

// drag presses at the path's first point, moves through the others and
// releases at the last.
func (a openAIAction) drag() ([]actions.Action, error) {
	if !a.hasPath || len(a.path) < 2 {
		return nil, actions.Invalid("path", nil, "must be an array of at least two {\"x\":..,\"y\":..} points")
	}
	if len(a.path) > actions.MaxDragVia+2 {
		return nil, actions.TooLarge("path", actions.MaxDragVia+2, fmt.Sprintf("at most %d points, got %d", actions.MaxDragVia+2, len(a.path)))
	}
	pts := make([]actions.Point, len(a.path))
	for i, p := range a.path {
		x, err := intField("x", p.x, true)
		if err != nil {
			return nil, actions.WithPrefix(actions.Elem("path", i), err)
		}
		y, err := intField("y", p.y, true)
		if err != nil {
			return nil, actions.WithPrefix(actions.Elem("path", i), err)
		}
		pts[i] = actions.Point{X: x, Y: y}
	}
	mods, err := a.heldKeys()
	if err != nil {
		return nil, err
	}
	var via []actions.Point
	if len(pts) > 2 {
		via = pts[1 : len(pts)-1]
	}
	return []actions.Action{actions.Drag{From: &pts[0], Via: via, To: pts[len(pts)-1], Button: actions.ButtonLeft, Modifiers: mods}}, nil
}

// agentField names an executor field of n (one of the neutral actions a
// translated to) in a's own fields.
func (a openAIAction) agentField(n actions.Action, f fielderr.Path) fielderr.Path {
	switch f.Base() {
	case "modifiers", "keys":
		return fielderr.Name("keys")
	case "kind", "count", "":
		return fielderr.Name("type")
	case "amount", "direction":
		if s, ok := n.(actions.Scroll); ok && (s.Direction == actions.ScrollLeft || s.Direction == actions.ScrollRight) {
			return fielderr.Name("scroll_x")
		}
		return fielderr.Name("scroll_y")
	}
	if a.typ != "drag" {
		return f
	}
	// A drag's path: from is path[0], via[k] is path[k+1], the end (x, y)
	// is the last point.
	path := fielderr.Name("path")
	_, rest, _ := f.Head()
	switch f.Base() {
	case "x", "y":
		return path.Index(len(a.path) - 1).Join(f)
	case "from":
		return path.Index(0).Join(rest)
	case "via":
		if k, rest, ok := rest.Head(); ok && k.Name == "" {
			return path.Index(k.Index + 1).Join(rest)
		}
	}
	return f
}

// pixelScroll turns a pixel offset into a scroll action; pos/neg are the
// directions of positive and negative offsets.
func pixelScroll(at *actions.Point, px int, pos, neg actions.Direction, mods []actions.Key) (actions.Action, bool) {
	if px == 0 {
		return nil, false
	}
	dir := pos
	if px < 0 {
		dir = neg
	}
	n := int(math.Round(math.Abs(float64(px)) / OpenAIScrollPixelsPerClick))
	n = min(max(n, 1), actions.MaxScrollAmount)
	return actions.Scroll{At: at, Direction: dir, Amount: n, Modifiers: mods}, true
}

// OpenAIOutput returns the computer_call_output input item answering call
// with the result's screenshot, for the agent loop to send back unchanged:
// the same call_id and output {"type":"computer_screenshot","image_url":
// "data:image/png;base64,..."}. With ackSafety the call's pending safety
// checks are copied into acknowledged_safety_checks; otherwise there are
// none (see ReplyOptions.AcknowledgeSafetyChecks).
func OpenAIOutput(call *responses.ResponseComputerToolCall, res player.Result, ackSafety bool) (responses.ResponseInputItemComputerCallOutputParam, error) {
	out := responses.ResponseInputItemComputerCallOutputParam{CallID: call.CallID}
	if res.Image == nil {
		return out, fmt.Errorf("computer_call_output for %s: %w: the run took no screenshot", call.CallID, actions.ErrInvalid)
	}
	out.Output = responses.ResponseComputerToolCallOutputScreenshotParam{
		ImageURL: openai.String("data:" + res.Image.MediaType + ";base64," + res.Image.Data),
	}
	if ackSafety {
		for _, c := range call.PendingSafetyChecks {
			ack := responses.ResponseInputItemComputerCallOutputAcknowledgedSafetyCheckParam{ID: c.ID}
			if c.Code != "" {
				ack.Code = openai.String(c.Code)
			}
			if c.Message != "" {
				ack.Message = openai.String(c.Message)
			}
			out.AcknowledgedSafetyChecks = append(out.AcknowledgedSafetyChecks, ack)
		}
	}
	return out, nil
}
