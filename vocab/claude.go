package vocab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/deskfarm/deskfarm/player"
)

// ClaudeVersion is the type of a Claude computer-use tool, which fixes the
// actions its input may hold.
type ClaudeVersion string

// Claude computer-use tool versions (anthropics/claude-quickstarts,
// computer-use-demo/computer_use_demo/tools/computer.py).
const (
	Computer20241022 ClaudeVersion = "computer_20241022"
	Computer20250124 ClaudeVersion = "computer_20250124"
	Computer20251124 ClaudeVersion = "computer_20251124"
)

// ComputerToolset20260801 is Claude's computer toolset (anthropic-sdk-go/v2
// v2.15.0, ComputerToolset20260801Param): the same 17 actions as
// computer_20251124, each its own tool_use block whose name is the action
// (see RunToolset, TranslateToolset).
const ComputerToolset20260801 ClaudeVersion = "computer_toolset_20260801"

// ClaudeVersions lists the supported single-tool versions, oldest first.
var ClaudeVersions = []ClaudeVersion{Computer20241022, Computer20250124, Computer20251124}

var claudeActions20241022 = []string{
	"key", "type", "mouse_move", "left_click", "left_click_drag", "right_click",
	"middle_click", "double_click", "screenshot", "cursor_position",
}

var claudeActions20250124 = append(slices.Clone(claudeActions20241022),
	"left_mouse_down", "left_mouse_up", "scroll", "hold_key", "wait", "triple_click")

var claudeActions20251124 = append(slices.Clone(claudeActions20250124), "zoom")

// Actions returns the action names the version accepts, or nil for an
// unknown version.
func (v ClaudeVersion) Actions() []string {
	switch v {
	case Computer20241022:
		return slices.Clone(claudeActions20241022)
	case Computer20250124:
		return slices.Clone(claudeActions20250124)
	case Computer20251124, ComputerToolset20260801:
		return slices.Clone(claudeActions20251124)
	}
	return nil
}

// addedIn returns the first version that has action, or "".
func addedIn(action string) ClaudeVersion {
	for _, v := range ClaudeVersions {
		if slices.Contains(v.Actions(), action) {
			return v
		}
	}
	return ""
}

// ClaudeTool is a computer-use tool definition for the Messages API's tools
// list, sized to the session's screenshots.
type ClaudeTool struct {
	Type            ClaudeVersion `json:"type"`
	Name            string        `json:"name"` // always "computer"
	DisplayWidthPx  int           `json:"display_width_px"`
	DisplayHeightPx int           `json:"display_height_px"`
	DisplayNumber   *int          `json:"display_number,omitempty"`
	EnableZoom      bool          `json:"enable_zoom,omitempty"` // computer_20251124
}

// NewClaudeTool returns the tool definition of version for screenshots of
// the scaler's size.
func NewClaudeTool(v ClaudeVersion, s *player.Scaler) ClaudeTool {
	w, h := s.ScreenshotSize()
	return ClaudeTool{Type: v, Name: "computer", DisplayWidthPx: w, DisplayHeightPx: h,
		EnableZoom: v == Computer20251124}
}

// claudeFields are the input fields of the computer tool.
var claudeFields = []string{
	"action", "coordinate", "duration", "region", "scroll_amount", "scroll_direction",
	"start_coordinate", "text",
}

// toolsetFields are the input fields of the toolset's members
// (ComputerToolUseBlockUnionInput): no action, and repeat.
var toolsetFields = []string{
	"coordinate", "duration", "region", "repeat", "scroll_amount", "scroll_direction",
	"start_coordinate", "text",
}

// toolsetExtra are the optional fields the toolset adds to an action: key
// repeats, and a drag holds modifiers in text like the clicks.
var toolsetExtra = map[string][]string{
	"key":             {"repeat"},
	"left_click_drag": {"text"},
}

// MaxKeyRepeat bounds the repeat of a toolset key action.
const MaxKeyRepeat = actions.MaxActions

// claudeSpec says which fields an action takes: required, optional (from
// which version), anything else is refused; and how it translates.
type claudeSpec struct {
	required []string
	optional []string
	// since20250124 are optional fields the 2024-10-22 tool does not take
	// (clicks took neither a coordinate nor modifiers then).
	since20250124 []string
	// translate maps the checked input onto neutral actions.
	translate func(c claudeCall) ([]actions.Action, error)
}

var claudeSpecs = map[string]claudeSpec{
	"key":             {required: []string{"text"}, translate: claudeKey},
	"type":            {required: []string{"text"}, translate: claudeType},
	"mouse_move":      {required: []string{"coordinate"}, translate: claudeMove},
	"left_click":      {since20250124: []string{"coordinate", "text"}, translate: claudeClick(actions.ButtonLeft, 1)},
	"right_click":     {since20250124: []string{"coordinate", "text"}, translate: claudeClick(actions.ButtonRight, 1)},
	"middle_click":    {since20250124: []string{"coordinate", "text"}, translate: claudeClick(actions.ButtonMiddle, 1)},
	"double_click":    {since20250124: []string{"coordinate", "text"}, translate: claudeClick(actions.ButtonLeft, 2)},
	"triple_click":    {since20250124: []string{"coordinate", "text"}, translate: claudeClick(actions.ButtonLeft, 3)},
	"left_click_drag": {required: []string{"coordinate", "start_coordinate"}, translate: claudeDrag},
	"screenshot":      {translate: constant[claudeCall](actions.Screenshot{})},
	"cursor_position": {translate: constant[claudeCall](actions.CursorPosition{})},
	"left_mouse_down": {optional: []string{"coordinate"}, translate: claudeMouseDown},
	"left_mouse_up":   {optional: []string{"coordinate"}, translate: claudeMouseUp},
	"scroll":          {required: []string{"scroll_direction", "scroll_amount"}, optional: []string{"coordinate", "text"}, translate: claudeScroll},
	"hold_key":        {required: []string{"text", "duration"}, translate: claudeHoldKey},
	"wait":            {required: []string{"duration"}, translate: claudeWait},
	"zoom":            {required: []string{"region"}, translate: claudeZoom},
}

// claudeCall is one checked Claude input, as the translate functions of
// claudeSpecs read it.
type claudeCall struct {
	in claudeInput
	// at is the coordinate, if the input has one.
	at *actions.Point
	// toolset is a computer_toolset_20260801 member (durations are whole
	// seconds).
	toolset bool
}

// claudeInput is the decoded tool input: field name to raw JSON, JSON nulls
// dropped (the demo treats None as absent).
type claudeInput map[string]json.RawMessage

// TranslateClaude turns one input of a Claude computer-use tool into neutral
// actions. The input is the tool_use block's "input" object, e.g.
// {"action":"left_click","coordinate":[100,200],"text":"ctrl"}.
//
// Each version accepts only its own actions (zoom only in computer_20251124,
// scroll, hold_key, wait, triple_click and left_mouse_down/up from
// computer_20250124). Every field is checked: a missing required field, a
// field the action does not take, a coordinate that is not two non-negative
// integers, an unknown scroll_direction, a duration outside (0, 100] s and
// unknown key names are errors (*FieldError, wrapping ErrInvalid) that name
// the field and say what is accepted. Coordinates are checked against the
// screenshot size when the actions run.
//
// Mapping:
//   - key: text is xdotool syntax; several chords separated by spaces
//     ("ctrl+a Delete") become one key action each, as xdotool plays them.
//   - left/right/middle/double/triple_click: click; coordinate (from
//     computer_20250124) moves first, text holds modifiers ("ctrl+shift") during
//     the click. computer_20241022 clicks where the pointer is and takes
//     neither.
//   - left_click_drag: drag from start_coordinate to coordinate. In
//     computer_20241022, whose schema had no start_coordinate, it may be
//     left out and the drag starts where the pointer is.
//   - scroll: scroll_amount wheel clicks (1-100) in scroll_direction at
//     coordinate (or where the pointer is) with text as modifiers.
//   - hold_key: text (a key or chord) held for duration seconds.
//   - left_mouse_down/up: button_down/up of left where the pointer is, or at
//     coordinate if given (the reference demo refuses a coordinate; schemas
//     derived from the API documentation allow one, and its meaning is plain).
//   - zoom: region [x0, y0, x1, y1] in screenshot coordinates, returned at the
//     screenshot size.
func TranslateClaude(v ClaudeVersion, input []byte) ([]actions.Action, error) {
	if v == ComputerToolset20260801 {
		return nil, fmt.Errorf("%s: %w", v, actions.OneOf("tool", actions.ErrUnsupportedAction, claudeToolNames(),
			"the toolset's actions arrive as tool_use blocks named by the action; use TranslateToolset or RunToolset"))
	}
	acts, err := translateClaude(v, "", input)
	if err == nil {
		err = actions.ValidateAll(acts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v, err)
	}
	return acts, nil
}

// TranslateToolset turns one member call of Claude's computer_toolset_20260801
// into neutral actions: name is the tool_use block's name (the action, e.g.
// "left_click") and input its input, which has no action field. Fields and
// mapping are those of computer_20251124 (see TranslateClaude) plus:
//   - key: repeat (1-MaxKeyRepeat, default 1) plays the key text that many
//     times;
//   - left_click_drag: text holds modifiers during the drag;
//   - duration (hold_key, wait) is whole seconds.
//
// Errors name the block's own fields ("coordinate", "repeat"); an unknown
// action names "name".
func TranslateToolset(name string, input []byte) ([]actions.Action, error) {
	acts, err := translateClaude(ComputerToolset20260801, name, input)
	if err == nil {
		err = actions.ValidateAll(acts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", ComputerToolset20260801, name, err)
	}
	return acts, nil
}

// claudeToolNames lists the Claude tool types deskfarm accepts.
func claudeToolNames() []string {
	names := make([]string, 0, len(ClaudeVersions)+1)
	for _, cv := range ClaudeVersions {
		names = append(names, string(cv))
	}
	return append(names, string(ComputerToolset20260801))
}

// translateClaude translates a single-tool input (member "", the action in
// the input's action field) or a toolset member's input: it names the
// action, checks the input's fields against the action's spec, then
// translates.
func translateClaude(v ClaudeVersion, member string, input []byte) ([]actions.Action, error) {
	accepted := v.Actions()
	if accepted == nil {
		names := claudeToolNames()
		return nil, actions.OneOf("tool", actions.ErrUnsupportedAction, names,
			fmt.Sprintf("unknown computer tool version %q; supported are %s", v, strings.Join(names, ", ")))
	}
	in, err := decodeClaudeInput(input)
	if err != nil {
		return nil, err
	}
	action, err := claudeActionOf(v, member, in, accepted)
	if err != nil {
		return nil, err
	}
	spec, ok := claudeSpecs[action]
	if !ok {
		return nil, actions.Invalid("action", actions.ErrUnsupportedAction, fmt.Sprintf("action %q is not implemented", action))
	}
	if err := checkClaudeFields(v, action, spec, in); err != nil {
		return nil, err
	}
	c := claudeCall{in: in, toolset: v == ComputerToolset20260801}
	if _, ok := in["coordinate"]; ok {
		if c.at, err = claudeCoordinate(in, "coordinate"); err != nil {
			return nil, err
		}
	}
	return spec.translate(c)
}

// claudeActionOf names the action of an input: the toolset member, or the
// input's action field; it must be one v accepts.
func claudeActionOf(v ClaudeVersion, member string, in claudeInput, accepted []string) (string, error) {
	toolset := v == ComputerToolset20260801
	var action string
	if toolset {
		if _, ok := in["action"]; ok {
			return "", actions.Invalid("action", nil, "a toolset input has no action field: the tool_use block's name is the action")
		}
		action = member
	} else {
		raw, ok := in["action"]
		if !ok {
			return "", actions.OneOf("action", actions.ErrUnsupportedAction, accepted, "missing; accepted actions are "+strings.Join(accepted, ", "))
		}
		if err := json.Unmarshal(raw, &action); err != nil {
			return "", actions.OneOf("action", actions.ErrUnsupportedAction, accepted, "must be a string; accepted actions are "+strings.Join(accepted, ", "))
		}
	}
	if slices.Contains(accepted, action) {
		return action, nil
	}
	if toolset {
		return "", actions.OneOf("name", actions.ErrUnsupportedAction, accepted,
			fmt.Sprintf("unknown computer toolset action %q; accepted are %s", action, strings.Join(accepted, ", ")))
	}
	msg := fmt.Sprintf("unknown action %q; %s accepts %s", action, v, strings.Join(accepted, ", "))
	if since := addedIn(action); since != "" {
		msg = fmt.Sprintf("action %q is not part of %s (it was added in %s); %s accepts %s",
			action, v, since, v, strings.Join(accepted, ", "))
	}
	return "", actions.OneOf("action", actions.ErrUnsupportedAction, accepted, msg)
}

// checkClaudeFields refuses a field the action does not take in v, and a
// missing required one.
func checkClaudeFields(v ClaudeVersion, action string, spec claudeSpec, in claudeInput) error {
	required, optional := spec.required, spec.optional
	switch {
	case v != Computer20241022:
		optional = append(slices.Clone(optional), spec.since20250124...)
	case action == "left_click_drag":
		required, optional = []string{"coordinate"}, []string{"start_coordinate"}
	}
	fields := claudeFields
	if v == ComputerToolset20260801 {
		optional = append(slices.Clone(optional), toolsetExtra[action]...)
		fields = toolsetFields
	}
	allowed := append(append([]string{"action"}, required...), optional...)
	for _, f := range sortedKeys(in) {
		if slices.Contains(allowed, f) {
			continue
		}
		if !slices.Contains(fields, f) {
			msg := fmt.Sprintf("unknown field; the %s input has %s", v, strings.Join(fields, ", "))
			if f == "key" {
				msg += " (modifiers for clicks and scrolls go in text, e.g. \"text\":\"ctrl\")"
			}
			return actions.Invalid(f, nil, msg)
		}
		msg := fmt.Sprintf("not accepted for %s in %s (%s takes %s)", action, v, action, actions.TakesList(allowed[1:]))
		if v == Computer20241022 && slices.Contains(spec.since20250124, f) {
			msg = fmt.Sprintf("not accepted for %s in %s: its clicks happen where the pointer is, without "+
				"modifiers (move first with mouse_move); %s takes a coordinate and modifiers in text from %s",
				action, v, action, Computer20250124)
		}
		return actions.Invalid(f, nil, msg)
	}
	for _, f := range required {
		if _, ok := in[f]; !ok {
			return actions.Invalid(f, nil, fmt.Sprintf("required for %s (%s takes %s)", action, action, actions.TakesList(allowed[1:])))
		}
	}
	return nil
}

// claudeKey: text is xdotool syntax; several chords separated by spaces
// become one key action each; a toolset's repeat plays them that often.
func claudeKey(c claudeCall) ([]actions.Action, error) {
	text, err := claudeText(c.in, "text")
	if err != nil {
		return nil, err
	}
	chords := strings.Fields(text)
	if len(chords) == 0 {
		if text == "" {
			return nil, actions.Invalid("text", actions.ErrUnknownKey, "empty; give an xdotool key such as \"Return\" or \"ctrl+s\"")
		}
		chords = []string{"space"} // a bare " "
	}
	if n := utf8.RuneCountInString(text); n > actions.MaxTextRunes {
		return nil, actions.TooLarge("text", actions.MaxTextRunes, fmt.Sprintf("at most %d characters of key text, got %d", actions.MaxTextRunes, n))
	}
	var acts []actions.Action
	for _, ch := range chords {
		keys, err := actions.ParseChord(ch)
		if err != nil {
			return nil, actions.WithPrefix(fielderr.Name("text"), err)
		}
		a := actions.KeyPress{Keys: keys}
		if err := a.Validate(); err != nil {
			return nil, actions.Renamed(err, "text")
		}
		acts = append(acts, a)
	}
	raw, ok := c.in["repeat"]
	if !ok {
		return acts, nil
	}
	n, err := claudeInt("repeat", raw)
	if err != nil {
		return nil, err
	}
	if n < 1 || n > MaxKeyRepeat {
		return nil, actions.TooLarge("repeat", MaxKeyRepeat, fmt.Sprintf("must be 1 to %d, got %d", MaxKeyRepeat, n))
	}
	if n*len(acts) > actions.MaxActions {
		return nil, actions.TooLarge("repeat", actions.MaxActions, fmt.Sprintf("%d repeats of %d keys are %d key presses; at most %d",
			n, len(acts), n*len(acts), actions.MaxActions))
	}
	once := acts
	for range n - 1 {
		acts = append(acts, once...)
	}
	return acts, nil
}

func claudeType(c claudeCall) ([]actions.Action, error) {
	text, err := claudeText(c.in, "text")
	if err != nil {
		return nil, err
	}
	if text == "" {
		return nil, actions.Invalid("text", nil, "empty; type needs text")
	}
	a := actions.TypeText{Text: text}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return []actions.Action{a}, nil
}

func claudeMove(c claudeCall) ([]actions.Action, error) {
	return []actions.Action{actions.Move{To: *c.at}}, nil
}

// claudeClick clicks b count times at the coordinate (or where the pointer
// is) with text as modifiers.
func claudeClick(b actions.Button, count int) func(claudeCall) ([]actions.Action, error) {
	return func(c claudeCall) ([]actions.Action, error) {
		mods, err := claudeModifiers(c.in)
		if err != nil {
			return nil, err
		}
		return []actions.Action{actions.Click{At: c.at, Button: b, Count: count, Modifiers: mods}}, nil
	}
}

func claudeDrag(c claudeCall) ([]actions.Action, error) {
	a := actions.Drag{To: *c.at, Button: actions.ButtonLeft}
	var err error
	if _, ok := c.in["start_coordinate"]; ok {
		if a.From, err = claudeCoordinate(c.in, "start_coordinate"); err != nil {
			return nil, err
		}
	}
	if a.Modifiers, err = claudeModifiers(c.in); err != nil {
		return nil, err
	}
	return []actions.Action{a}, nil
}

func claudeMouseDown(c claudeCall) ([]actions.Action, error) {
	return []actions.Action{actions.ButtonDown{Button: actions.ButtonLeft, At: c.at}}, nil
}

func claudeMouseUp(c claudeCall) ([]actions.Action, error) {
	return []actions.Action{actions.ButtonUp{Button: actions.ButtonLeft, At: c.at}}, nil
}

func claudeScroll(c claudeCall) ([]actions.Action, error) {
	var dir string
	if err := json.Unmarshal(c.in["scroll_direction"], &dir); err != nil {
		return nil, actions.OneOf("scroll_direction", nil, actions.DirectionNames, "must be a string: up, down, left or right")
	}
	switch d := actions.Direction(dir); d {
	case actions.ScrollUp, actions.ScrollDown, actions.ScrollLeft, actions.ScrollRight:
	default:
		return nil, actions.OneOf("scroll_direction", nil, actions.DirectionNames, fmt.Sprintf("must be up, down, left or right, got %q", dir))
	}
	amount, err := claudeInt("scroll_amount", c.in["scroll_amount"])
	if err != nil {
		return nil, err
	}
	if amount < 1 || amount > actions.MaxScrollAmount {
		return nil, actions.Invalid("scroll_amount", nil, fmt.Sprintf("must be 1 to %d wheel clicks, got %d", actions.MaxScrollAmount, amount))
	}
	mods, err := claudeModifiers(c.in)
	if err != nil {
		return nil, err
	}
	return []actions.Action{actions.Scroll{At: c.at, Direction: actions.Direction(dir), Amount: amount, Modifiers: mods}}, nil
}

func claudeHoldKey(c claudeCall) ([]actions.Action, error) {
	text, err := claudeText(c.in, "text")
	if err != nil {
		return nil, err
	}
	keys, err := actions.ParseChord(text)
	if err != nil {
		return nil, actions.WithPrefix(fielderr.Name("text"), err)
	}
	d, err := claudeDuration(c.in, c.toolset)
	if err != nil {
		return nil, err
	}
	a := actions.HoldKey{Keys: keys, Duration: actions.RoundMS(d)}
	if err := a.Validate(); err != nil {
		return nil, actions.Renamed(err, "text")
	}
	return []actions.Action{a}, nil
}

func claudeWait(c claudeCall) ([]actions.Action, error) {
	d, err := claudeDuration(c.in, c.toolset)
	if err != nil {
		return nil, err
	}
	return []actions.Action{actions.Wait{Duration: actions.RoundMS(d)}}, nil
}

func claudeZoom(c claudeCall) ([]actions.Action, error) {
	region, err := claudeInts("region", c.in["region"], 4)
	if err != nil {
		return nil, err
	}
	a := actions.Zoom{Region: [4]int(region)}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return []actions.Action{a}, nil
}

func sortedKeys(m claudeInput) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func decodeClaudeInput(input []byte) (claudeInput, error) {
	input = bytes.TrimSpace(input)
	if len(input) == 0 || input[0] != '{' {
		return nil, actions.Invalid("input", nil, "must be a JSON object such as {\"action\":\"screenshot\"}")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(input, &m); err != nil {
		return nil, actions.Invalid("input", nil, "malformed JSON object: "+err.Error())
	}
	in := claudeInput{}
	for k, v := range m {
		if string(bytes.TrimSpace(v)) != "null" {
			in[k] = v
		}
	}
	return in, nil
}

func claudeText(in claudeInput, field string) (string, error) {
	var s string
	if err := json.Unmarshal(in[field], &s); err != nil {
		return "", actions.Invalid(field, nil, "must be a string")
	}
	return s, nil
}

// claudeModifiers reads the optional text of a click or scroll: modifier
// keys held during it ("shift", "ctrl+shift").
func claudeModifiers(in claudeInput) ([]actions.Key, error) {
	if _, ok := in["text"]; !ok {
		return nil, nil
	}
	text, err := claudeText(in, "text")
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	keys, err := actions.ParseModifiers([]string{text})
	if err != nil {
		return nil, actions.WithPrefix(fielderr.Name("text"), err)
	}
	return keys, nil
}

func claudeCoordinate(in claudeInput, field string) (*actions.Point, error) {
	v, err := claudeInts(field, in[field], 2)
	if err != nil {
		return nil, err
	}
	return &actions.Point{X: v[0], Y: v[1]}, nil
}

// claudeInts reads an array of exactly n non-negative integers. Integral
// numbers written with a fraction or exponent (10.0, 1e2) are accepted;
// strings, fractions and negatives are not.
func claudeInts(field string, raw json.RawMessage, n int) ([]int, error) {
	shape := "[x, y]"
	if n == 4 {
		shape = "[x0, y0, x1, y1]"
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, actions.Invalid(field, nil, fmt.Sprintf("must be an array %s of %d non-negative integers, got %s", shape, n, clip(raw)))
	}
	if len(elems) != n {
		return nil, actions.Invalid(field, nil, fmt.Sprintf("must have %d values %s, got %d", n, shape, len(elems)))
	}
	out := make([]int, n)
	for i, e := range elems {
		v, err := claudeInt(field, e)
		if err != nil {
			return nil, err
		}
		if v < 0 {
			return nil, actions.Invalid(field, actions.ErrOutOfBounds, fmt.Sprintf("value %d is %d; coordinates must be non-negative integers", i, v))
		}
		out[i] = v
	}
	return out, nil
}

// claudeInt reads a JSON number that must be an integer.
func claudeInt(field string, raw json.RawMessage) (int, error) {
	f, err := claudeNumber(field, raw)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) {
		return 0, actions.Invalid(field, nil, fmt.Sprintf("must be an integer, got %s", clip(raw)))
	}
	if math.Abs(f) > 1e9 {
		return 0, actions.Invalid(field, actions.ErrOutOfBounds, fmt.Sprintf("%s is out of range", clip(raw)))
	}
	return int(f), nil
}

func claudeNumber(field string, raw json.RawMessage) (float64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, actions.Invalid(field, nil, fmt.Sprintf("must be a number, got %s", clip(raw)))
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, actions.Invalid(field, nil, fmt.Sprintf("must be a number, got %s", clip(raw)))
	}
	return f, nil
}

// claudeDuration reads duration: seconds, greater than 0, at most 100;
// whole seconds in the toolset (its schema's duration is an integer).
func claudeDuration(in claudeInput, whole bool) (time.Duration, error) {
	f, err := claudeNumber("duration", in["duration"])
	if err != nil {
		return 0, err
	}
	if whole && f != math.Trunc(f) {
		return 0, actions.Invalid("duration", nil, fmt.Sprintf("must be a whole number of seconds, got %s", clip(in["duration"])))
	}
	if f <= 0 || f > actions.MaxDuration.Seconds() {
		return 0, actions.Invalid("duration", nil, fmt.Sprintf("must be more than 0 and at most %g seconds, got %g", actions.MaxDuration.Seconds(), f))
	}
	return time.Duration(f * float64(time.Second)), nil
}

// clip shortens raw JSON for an error message.
func clip(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return s
}
