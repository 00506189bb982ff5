package vocab

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/fielderr"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3/responses"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// The computer_call items below are constructed, not captured: written by
// hand following openai-go v3.99.0's field names (responses.
// ResponseComputerToolCall, response.go l.5956; ComputerActionList l.1157)
// and the shapes OpenAI's computer-use guide shows.
const (
	// A preview-tool item (computer_use_preview): one action.
	openAIPreviewItem = `{
		"type": "computer_call",
		"id": "cu_67cc",
		"call_id": "call_zw3",
		"action": {"type": "click", "button": "left", "x": 156, "y": 50},
		"pending_safety_checks": [],
		"status": "completed"
	}`
	// A GA-tool item (computer): a batch of actions.
	openAIBatchItem = `{
		"type": "computer_call",
		"id": "cu_68aa",
		"call_id": "call_b7",
		"actions": [
			{"type": "double_click", "x": 40, "y": 60, "keys": null},
			{"type": "type", "text": "Grüße, café — naïve ✓ 日本語"},
			{"type": "keypress", "keys": ["CTRL", "S"]},
			{"type": "scroll", "x": 400, "y": 300, "scroll_x": 0, "scroll_y": -250},
			{"type": "drag", "path": [{"x": 10, "y": 10}, {"x": 50, "y": 10}, {"x": 50, "y": 70}]},
			{"type": "move", "x": 5, "y": 6},
			{"type": "wait"},
			{"type": "screenshot"}
		],
		"pending_safety_checks": [{"id": "cu_sc_1", "code": "malicious_instructions", "message": "Check the page."}],
		"status": "completed"
	}`
)

func TestOpenAICallPreviewAndBatch(t *testing.T) {
	oc, err := TranslateOpenAICall([]byte(openAIPreviewItem))
	if err != nil {
		t.Fatal(err)
	}
	if oc.Item.CallID != "call_zw3" || mustJSON(t, oc.Actions) != `[{"kind":"click","x":156,"y":50,"button":"left","count":1}]` {
		t.Errorf("preview: call %q actions %s", oc.Item.CallID, mustJSON(t, oc.Actions))
	}
	oc, err = TranslateOpenAICall([]byte(openAIBatchItem))
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"kind":"click","x":40,"y":60,"button":"left","count":2},` +
		`{"kind":"type","text":"Grüße, café — naïve ✓ 日本語"},` +
		`{"kind":"key","keys":["Control_L","s"]},` +
		`{"kind":"scroll","x":400,"y":300,"direction":"up","amount":3},` +
		`{"kind":"drag","x":50,"y":70,"from":{"x":10,"y":10},"via":[{"x":50,"y":10}],"button":"left"},` +
		`{"kind":"move","x":5,"y":6},{"kind":"wait","duration_ms":1000},{"kind":"screenshot"}]`
	if got := mustJSON(t, oc.Actions); got != want {
		t.Errorf("batch:\n got %s\nwant %s", got, want)
	}
}

func TestOpenAICallErrors(t *testing.T) {
	for _, c := range []struct{ in, field string }{
		{`{"type":"click","x":1,"y":2}`, "type"},
		{`{"type":"computer_call","action":{"type":"screenshot"}}`, "call_id"},
		{`{"type":"computer_call","call_id":"c"}`, "action"},
		{`{"type":"computer_call","call_id":"c","action":{"type":"screenshot"},"actions":[]}`, "actions"},
		{`{"type":"computer_call","call_id":"c","action":{"type":"click","x":-1,"y":2}}`, "action.x"},
		{`{"type":"computer_call","call_id":"c","actions":[{"type":"screenshot"},{"type":"keypress","keys":["CTRL","HYPER"]}]}`, "actions[1].keys[1]"},
		{`{"type":"computer_call","call_id":"c","actions":[{"type":"drag","path":[{"x":1,"y":1},{"x":1}]}]}`, "actions[0].path[1].y"},
		{`{"type":"computer_call","call_id":"c","actions":[{"type":"teleport"}]}`, "actions[0].type"},
	} {
		_, err := TranslateOpenAICall([]byte(c.in))
		if !errors.Is(err, actions.ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%s: err %v (field %q), want field %q", c.in, err, fielderr.Field(err), c.field)
		}
	}
	_, err := TranslateOpenAICall([]byte(`{"type":"computer_call","call_id":"c","action":{"type":"keypress","keys":["HYPER"]}}`))
	if !strings.Contains(err.Error(), "ARROWLEFT") {
		t.Errorf("unknown key error lists no examples: %v", err)
	}
}

// TestOpenAIKeyNames: every name of OpenAI's sample app map
// (openai-cua-sample-app CUA_KEY_TO_PLAYWRIGHT_KEY, looked up lower-cased)
// and common aliases from other CUA adapters resolve, in any case.
func TestOpenAIKeyNames(t *testing.T) {
	want := map[string]string{
		"alt": "Alt_L", "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right", "arrowup": "Up",
		"backspace": "BackSpace", "capslock": "Caps_Lock", "cmd": "Super_L", "ctrl": "Control_L", "delete": "Delete",
		"end": "End", "enter": "Return", "esc": "Escape", "home": "Home", "insert": "Insert", "option": "Alt_L",
		"pagedown": "Page_Down", "pageup": "Page_Up", "shift": "Shift_L", "space": "space", "super": "Super_L",
		"tab": "Tab", "win": "Super_L", "/": "slash", "\\": "backslash",
		"CONTROL": "Control_L", "COMMAND": "Super_L", "META": "Meta_L", "RETURN": "Return", "ESCAPE": "Escape",
		"DEL": "Delete", "ARROW_LEFT": "Left", "UP": "Up", "DOWN": "Down", "LEFT": "Left", "RIGHT": "Right",
		"F5": "F5", "A": "a", "z": "z", "1": "1",
	}
	for name, w := range want {
		for _, n := range []string{name, strings.ToUpper(name)} {
			k, err := parseOpenAIKey(n)
			if err != nil || k.Name != w {
				t.Errorf("%q: %v %v, want %s", n, k.Name, err, w)
			}
		}
	}
}

// TestOpenAIOutputDecodes: the output of a run decodes with openai-go's own
// read-side type, with the call's id and a PNG data URL.
func TestOpenAIOutputDecodes(t *testing.T) {
	f := newFake(640, 400)
	e, _ := newGuestExecutor(t, f)
	for _, ack := range []bool{false, true} {
		c, err := Decode(ToolOpenAI, json.RawMessage(openAIBatchItem))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := c.Run(context.Background(), e, player.RunOptions{}, ReplyOptions{AcknowledgeSafetyChecks: ack})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(rep.OpenAI)
		if err != nil {
			t.Fatal(err)
		}
		var got responses.ResponseInputItemComputerCallOutput
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got.CallID != "call_b7" || got.Type != "computer_call_output" || got.Output.Type != "computer_screenshot" ||
			!strings.HasPrefix(got.Output.ImageURL, "data:image/png;base64,iVBOR") {
			t.Errorf("output %s", clip(b))
		}
		if n := len(got.AcknowledgedSafetyChecks); (n == 1) != ack || (ack && got.AcknowledgedSafetyChecks[0].ID != "cu_sc_1") {
			t.Errorf("ack %v: acknowledged %+v", ack, got.AcknowledgedSafetyChecks)
		}
		var item responses.ResponseInputItemUnion
		if err := json.Unmarshal(b, &item); err != nil || item.Type != "computer_call_output" {
			t.Errorf("as an input item: %v %q", err, item.Type)
		}
	}
}

// TestOpenAIErrorsNameItemFields: an off-screen point in a batch is named
// by its place in the item, not the executor's list.
func TestOpenAIErrorsNameItemFields(t *testing.T) {
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	item := `{"type":"computer_call","call_id":"c","actions":[
		{"type":"move","x":1,"y":1,"keys":["SHIFT"]},
		{"type":"drag","path":[{"x":1,"y":1},{"x":500,"y":1},{"x":2,"y":2}]}]}`
	c, err := Decode(ToolOpenAIPreview, json.RawMessage(item))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Run(context.Background(), e, player.RunOptions{}, ReplyOptions{})
	if !errors.Is(err, actions.ErrOutOfBounds) || fielderr.Field(err) != "actions[1].path[1]" {
		t.Errorf("err %v (field %q)", err, fielderr.Field(err))
	}
}

func decodeRun(t *testing.T, e *player.Executor, tool, input string, ro ReplyOptions) (Reply, error) {
	t.Helper()
	c, err := Decode(tool, json.RawMessage(input))
	if err != nil {
		return Reply{}, err
	}
	return c.Run(context.Background(), e, player.RunOptions{}, ro)
}

// TestClaudeErrorsInAgentFields: errors found while running name the
// input's fields, and with errors_as_results come back as a tool_result.
func TestClaudeErrorsInAgentFields(t *testing.T) {
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	for _, c := range []struct{ in, field string }{
		{`{"action":"left_click","coordinate":[400,10]}`, "coordinate"},
		{`{"action":"left_click_drag","start_coordinate":[1,900],"coordinate":[1,1]}`, "start_coordinate"},
		{`{"action":"zoom","region":[0,0,330,10]}`, "region"},
		{`{"action":"scroll","coordinate":[1,1],"scroll_direction":"left","scroll_amount":2}`, "scroll_direction"},
		{`{"action":"type","text":"naïve"}`, "text"},
	} {
		_, err := decodeRun(t, e, string(Computer20251124), c.in, ReplyOptions{})
		if !errors.Is(err, actions.ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%s: err %v (field %q), want %q", c.in, err, fielderr.Field(err), c.field)
		}
		rep, err := decodeRun(t, e, string(Computer20251124), c.in, ReplyOptions{ErrorsAsResults: true, ToolUseID: "toolu_9"})
		if err != nil || rep.Claude == nil {
			t.Fatalf("errors_as_results: %v", err)
		}
		b, _ := json.Marshal(rep.Claude)
		var tr struct {
			ToolUseID string `json:"tool_use_id"`
			IsError   bool   `json:"is_error"`
			Content   []struct{ Type, Text string }
		}
		if err := json.Unmarshal(b, &tr); err != nil || tr.ToolUseID != "toolu_9" || !tr.IsError ||
			len(tr.Content) != 1 || tr.Content[0].Type != "text" || !strings.Contains(tr.Content[0].Text, "field "+c.field+":") {
			t.Errorf("%s: tool_result %s", c.in, b)
		}
	}
	_, err := Decode("computer_20990101", json.RawMessage(`{"action":"screenshot"}`))
	if fielderr.Field(err) != "tool" {
		t.Errorf("unknown tool: %v", err)
	}
	_, err = TranslateClaude("computer_20990101", []byte(`{"action":"screenshot"}`))
	if fielderr.Field(err) != "tool" || !strings.Contains(err.Error(), "computer_20251124") {
		t.Errorf("unknown version: %v", err)
	}
	rep, err := decodeRun(t, e, string(Computer20250124), `{"action":"left_click","coordinate":[3,4]}`, ReplyOptions{ToolUseID: "toolu_1"})
	if err != nil || rep.Claude == nil || rep.Claude.IsError.Valid() || len(rep.Claude.Content) != 1 || rep.Claude.Content[0].OfImage == nil {
		t.Errorf("success: %v %+v", err, rep.Claude)
	}
}

// The toolset turn below is constructed, not captured: tool_use blocks as
// anthropic-sdk-go v2.15.0 decodes them (ToolUseBlock, message.go l.15964;
// member inputs ComputerLeftClickInput etc.), with the toolset's fields.
const toolsetTurn = `[
	{"type":"tool_use","id":"toolu_01","name":"left_click","toolset_name":"computer","caller":{"type":"direct"},
	 "input":{"coordinate":[10,20],"text":"ctrl"}},
	{"type":"tool_use","id":"toolu_02","name":"key","toolset_name":"computer","caller":{"type":"direct"},
	 "input":{"text":"ctrl+s","repeat":2}},
	{"type":"tool_use","id":"toolu_03","name":"left_click_drag","toolset_name":"computer","caller":{"type":"direct"},
	 "input":{"start_coordinate":[1,1],"coordinate":[30,40],"text":"shift"}},
	{"type":"tool_use","id":"toolu_04","name":"screenshot","toolset_name":"computer","caller":{"type":"direct"},"input":{}}
]`

type toolResult struct {
	ToolUseID   string `json:"tool_use_id"`
	ToolsetName string `json:"toolset_name"`
	IsError     bool   `json:"is_error"`
	Content     []struct {
		Type, Text string
		Source     *struct{ Type, Data string } `json:"source"`
	} `json:"content"`
}

func runToolsetJSON(t *testing.T, e *player.Executor, turn string) []toolResult {
	t.Helper()
	c, err := Decode(string(ComputerToolset20260801), json.RawMessage(turn))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Run(context.Background(), e, player.RunOptions{}, ReplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep.Toolset)
	if err != nil {
		t.Fatal(err)
	}
	var out []toolResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	// The blocks decode with the SDK's own param type too.
	var sdk []anthropic.ToolResultBlockParam
	if err := json.Unmarshal(b, &sdk); err != nil || len(sdk) != len(out) {
		t.Fatalf("SDK decode: %v", err)
	}
	return out
}

func TestToolsetTurn(t *testing.T) {
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	out := runToolsetJSON(t, e, toolsetTurn)
	if len(out) != 4 {
		t.Fatalf("%d results", len(out))
	}
	for i, r := range out {
		if r.ToolUseID != []string{"toolu_01", "toolu_02", "toolu_03", "toolu_04"}[i] || r.ToolsetName != "computer" || r.IsError {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	if len(out[3].Content) != 1 || out[3].Content[0].Source == nil {
		t.Errorf("screenshot block answered %+v", out[3].Content)
	}
	// ctrl held for the click, ctrl+s twice, shift held for the drag.
	var saves int
	for _, ev := range f.Events {
		if ev == "key s down" {
			saves++
		}
	}
	if saves != 2 || len(presses(f.Events, maskLeft)) != 2 || len(f.Stuck()) != 0 {
		t.Errorf("guest received %v", f.Events)
	}
}

// TestToolsetFailureStopsTheTurn: the failing middle block is answered with
// its error in its own fields; the blocks after it are not run.
func TestToolsetFailureStopsTheTurn(t *testing.T) {
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	turn := `[
		{"type":"tool_use","id":"a","name":"mouse_move","toolset_name":"computer","input":{"coordinate":[5,5]}},
		{"type":"tool_use","id":"b","name":"left_click","toolset_name":"computer","input":{"coordinate":[999,5]}},
		{"type":"tool_use","id":"c","name":"type","toolset_name":"computer","input":{"text":"never"}},
		{"type":"tool_use","id":"d","name":"screenshot","toolset_name":"computer","input":{}}]`
	out := runToolsetJSON(t, e, turn)
	if len(out) != 4 || out[0].IsError || !out[1].IsError || !strings.Contains(out[1].Content[0].Text, "field coordinate:") {
		t.Fatalf("%+v", out)
	}
	for _, r := range out[2:] {
		if !r.IsError || len(r.Content) != 1 || r.Content[0].Text != ToolsetNotExecuted || r.ToolsetName != "computer" {
			t.Errorf("after the failure: %+v", r)
		}
	}
	checkEvents(t, f.Events, "ptr 5,5 0x00")

	// A bad block (unknown member, bad field) fails the same way.
	f.Events = nil
	out = runToolsetJSON(t, e, `[
		{"type":"tool_use","id":"a","name":"teleport","toolset_name":"computer","input":{}},
		{"type":"tool_use","id":"b","name":"screenshot","toolset_name":"computer","input":{}}]`)
	if !out[0].IsError || !strings.Contains(out[0].Content[0].Text, "field name:") || out[1].Content[0].Text != ToolsetNotExecuted {
		t.Errorf("%+v", out)
	}
}

func TestTranslateToolset(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"key", `{"text":"Return","repeat":3}`, `[{"kind":"key","keys":["Return"]},{"kind":"key","keys":["Return"]},{"kind":"key","keys":["Return"]}]`},
		{"key", `{"text":"ctrl+a Delete","repeat":null}`, `[{"kind":"key","keys":["Control_L","a"]},{"kind":"key","keys":["Delete"]}]`},
		{"hold_key", `{"text":"shift","duration":2}`, `[{"kind":"hold_key","keys":["Shift_L"],"duration_ms":2000}]`},
		{"wait", `{"duration":1}`, `[{"kind":"wait","duration_ms":1000}]`},
		{"left_click_drag", `{"start_coordinate":[1,2],"coordinate":[3,4],"text":"ctrl+shift"}`,
			`[{"kind":"drag","x":3,"y":4,"from":{"x":1,"y":2},"button":"left","modifiers":["Control_L","Shift_L"]}]`},
		{"scroll", `{"scroll_direction":"down","scroll_amount":5,"coordinate":[9,9],"text":"ctrl"}`,
			`[{"kind":"scroll","x":9,"y":9,"modifiers":["Control_L"],"direction":"down","amount":5}]`},
		{"triple_click", `{"coordinate":[7,8]}`, `[{"kind":"click","x":7,"y":8,"button":"left","count":3}]`},
		{"zoom", `{"region":[0,0,100,50]}`, `[{"kind":"zoom","region":[0,0,100,50]}]`},
		{"cursor_position", `{}`, `[{"kind":"cursor_position"}]`},
	} {
		acts, err := TranslateToolset(c.name, []byte(c.in))
		if err != nil {
			t.Errorf("%s %s: %v", c.name, c.in, err)
			continue
		}
		if got := mustJSON(t, acts); got != c.want {
			t.Errorf("%s %s:\n got %s\nwant %s", c.name, c.in, got, c.want)
		}
	}
	for _, c := range []struct{ name, in, field string }{
		{"wait", `{"duration":1.5}`, "duration"},
		{"key", `{"text":"a","repeat":0}`, "repeat"},
		{"key", `{"text":"a b","repeat":60}`, "repeat"},
		{"left_click", `{"action":"left_click"}`, "action"},
		{"left_click", `{"repeat":2}`, "repeat"},
		{"fly", `{}`, "name"},
	} {
		_, err := TranslateToolset(c.name, []byte(c.in))
		if !errors.Is(err, actions.ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%s %s: err %v (field %q), want %q", c.name, c.in, err, fielderr.Field(err), c.field)
		}
	}
}

// TestDecodeDispatch: each vocabulary reaches its translator through Decode.
func TestDecodeDispatch(t *testing.T) {
	for _, c := range []struct{ tool, in, want string }{
		{"", `[{"kind":"screenshot"}]`, `[{"kind":"screenshot"}]`},
		{ToolNeutral, `[{"kind":"clipboard_get"}]`, `[{"kind":"clipboard_get"}]`},
		{string(Computer20241022), `{"action":"key","text":"Return"}`, `[{"kind":"key","keys":["Return"]}]`},
		{ToolOSWorld, `{"action_type":"CLICK","parameters":{"x":3,"y":4}}`, `[{"kind":"click","x":3,"y":4,"button":"left","count":1}]`},
		{ToolOpenAIPreview, openAIPreviewItem, `[{"kind":"click","x":156,"y":50,"button":"left","count":1}]`},
	} {
		call, err := Decode(c.tool, json.RawMessage(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.tool, err)
			continue
		}
		if got := mustJSON(t, call.Actions); got != c.want {
			t.Errorf("%s: got %s want %s", c.tool, got, c.want)
		}
	}
	call, err := Decode(ToolOSWorld, json.RawMessage(`"DONE"`))
	if err != nil || call.Terminal != "DONE" {
		t.Errorf("DONE: %v %+v", err, call)
	}
	call, err = Decode(string(ComputerToolset20260801), json.RawMessage(toolsetTurn))
	if err != nil || len(call.Toolset) != 4 || call.Toolset[1].Name != "key" {
		t.Errorf("toolset: %v", err)
	}
	if _, err := Decode(string(ComputerToolset20260801), json.RawMessage(`[{"type":"tool_use","name":"key"}]`)); fielderr.Field(err) != "input[0].id" {
		t.Errorf("toolset block without id: %v", err)
	}
	// The assistant message's content can be passed whole.
	call, err = Decode(string(ComputerToolset20260801), json.RawMessage(`[{"type":"text","text":"Clicking."},
		{"type":"tool_use","id":"t1","name":"screenshot","toolset_name":"computer","input":{}}]`))
	if err != nil || len(call.Toolset) != 1 || call.Toolset[0].ID != "t1" {
		t.Errorf("content with a text block: %v", err)
	}
	if _, err := Decode("gemini", json.RawMessage(`{}`)); fielderr.Field(err) != "tool" {
		t.Errorf("unknown tool: %v", err)
	}
	// OSWorld's sideways scroll without a guest path names its own field.
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	_, err = decodeRun(t, e, ToolOSWorld, `{"action_type":"SCROLL","parameters":{"dx":2,"dy":0}}`, ReplyOptions{})
	if fielderr.Field(err) != "parameters.dx" {
		t.Errorf("osworld hscroll: %v", err)
	}
}

// TestPlayFailuresNameAgentActions: a failure while playing names the
// agent's action, not the executor's index.
func TestPlayFailuresNameAgentActions(t *testing.T) {
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	item := `{"type":"computer_call","call_id":"c","actions":[
		{"type":"move","x":1,"y":1,"keys":["SHIFT"]},
		{"type":"click","x":2,"y":2,"button":"left"}]}`
	f.FailAt = 5 // shift down, move, shift up, then the click's move and press
	_, err := decodeRun(t, e, ToolOpenAI, item, ReplyOptions{})
	if !errors.Is(err, actions.ErrDisplay) || !strings.HasPrefix(err.Error(), "actions[1] (click): ") {
		t.Errorf("openai: %v", err)
	}
	f.FailAt, f.N = 1, 0
	_, err = decodeRun(t, e, string(Computer20251124), `{"action":"left_click","coordinate":[3,3]}`, ReplyOptions{})
	if !errors.Is(err, actions.ErrDisplay) || !strings.HasPrefix(err.Error(), "computer_20251124 left_click: ") {
		t.Errorf("claude: %v", err)
	}
}
