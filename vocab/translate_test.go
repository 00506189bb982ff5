package vocab

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/fielderr"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

func TestTranslateOpenAI(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"type":"click","x":10,"y":20,"button":"left"}`, `[{"kind":"click","x":10,"y":20,"button":"left","count":1}]`},
		{`{"type":"click","x":10,"y":20}`, `[{"kind":"click","x":10,"y":20,"button":"left","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"right"}`, `[{"kind":"click","x":10,"y":20,"button":"right","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"wheel"}`, `[{"kind":"click","x":10,"y":20,"button":"middle","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"back"}`, `[{"kind":"click","x":10,"y":20,"button":"back","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"forward","keys":null}`, `[{"kind":"click","x":10,"y":20,"button":"forward","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"left","keys":["CTRL","shift"]}`,
			`[{"kind":"click","x":10,"y":20,"button":"left","count":1,"modifiers":["Control_L","Shift_L"]}]`},
		{`{"type":"move","x":3,"y":4,"keys":["ALT"]}`,
			`[{"kind":"key_down","keys":["Alt_L"]},{"kind":"move","x":3,"y":4},{"kind":"key_up","keys":["Alt_L"]}]`},
		{`{"type":"double_click","x":1,"y":2}`, `[{"kind":"click","x":1,"y":2,"button":"left","count":2}]`},
		{`{"type":"move","x":3,"y":4}`, `[{"kind":"move","x":3,"y":4}]`},
		{`{"type":"screenshot"}`, `[{"kind":"screenshot"}]`},
		{`{"type":"wait"}`, `[{"kind":"wait","duration_ms":1000}]`},
		{`{"type":"type","text":"hi there"}`, `[{"kind":"type","text":"hi there"}]`},
		{`{"type":"keypress","keys":["CTRL","C"]}`, `[{"kind":"key","keys":["Control_L","c"]}]`},
		{`{"type":"keypress","keys":["ENTER"]}`, `[{"kind":"key","keys":["Return"]}]`},
		{`{"type":"keypress","keys":["ARROWDOWN"]}`, `[{"kind":"key","keys":["Down"]}]`},
		{`{"type":"keypress","keys":["CMD","SHIFT","T"]}`, `[{"kind":"key","keys":["Super_L","Shift_L","t"]}]`},
		{`{"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":300}`, `[{"kind":"scroll","x":5,"y":6,"direction":"down","amount":3}]`},
		{`{"type":"scroll","x":5,"y":6,"scroll_x":-40,"scroll_y":-100}`,
			`[{"kind":"scroll","x":5,"y":6,"direction":"up","amount":1},{"kind":"scroll","x":5,"y":6,"direction":"left","amount":1}]`},
		{`{"type":"scroll","x":5,"y":6,"scroll_x":250,"scroll_y":0,"keys":["SHIFT"]}`,
			`[{"kind":"scroll","x":5,"y":6,"modifiers":["Shift_L"],"direction":"right","amount":3}]`},
		{`{"type":"scroll","x":5,"y":6,"scroll_y":1000000}`, `[{"kind":"scroll","x":5,"y":6,"direction":"down","amount":100}]`},
		{`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}],"keys":["shift"]}`,
			`[{"kind":"drag","x":3,"y":4,"from":{"x":1,"y":2},"button":"left","modifiers":["Shift_L"]}]`},
		{`{"type":"type","text":"Grüße, 日本語 ✓"}`, `[{"kind":"type","text":"Grüße, 日本語 ✓"}]`},
		{`{"type":"wait","duration":2}`, `[{"kind":"wait","duration_ms":1000}]`},
		{`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}`, `[{"kind":"drag","x":3,"y":4,"from":{"x":1,"y":2},"button":"left"}]`},
		{`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4},{"x":5,"y":6}]}`,
			`[{"kind":"drag","x":5,"y":6,"from":{"x":1,"y":2},"via":[{"x":3,"y":4}],"button":"left"}]`},
	}
	for _, c := range cases {
		acts, err := TranslateOpenAI([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := mustJSON(t, acts); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
		for i := range acts {
			if err := acts[i].Validate(); err != nil {
				t.Errorf("%s: action %d invalid: %v", c.in, i, err)
			}
		}
	}
	bad := []struct{ in, field string }{
		{`{"type":"fly"}`, "type"},
		{`{}`, "type"},
		{`{"type":"click","y":2}`, "x"},
		{`{"type":"click","x":1,"y":2,"button":"thumb"}`, "button"},
		{`{"type":"click","x":-1,"y":2}`, "x"},
		{`{"type":"click","x":1.5,"y":2}`, "x"},
		{`{"type":"move","x":1,"y":2,"text":"a"}`, "text"},
		{`{"type":"keypress","keys":[]}`, "keys"},
		{`{"type":"keypress","keys":["HYPERDRIVE"]}`, "keys[0]"},
		{`{"type":"keypress","keys":["CTRL","NOPE"]}`, "keys[1]"},
		{`{"type":"click","x":1,"y":2,"keys":["A"]}`, "keys[0]"},
		{`{"type":"click","x":"1","y":2}`, "x"},
		{`{"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":0}`, "scroll_y"},
		{`{"type":"drag","path":[{"x":1,"y":2}]}`, "path"},
		{`{"type":"drag","path":[{"x":1,"y":2},{"x":1}]}`, "path[1].y"},
		{`{"type":"type","text":"bell\u0007"}`, "text"},
		{`"click"`, "action"},
	}
	for _, c := range bad {
		_, err := TranslateOpenAI([]byte(c.in))
		if !errors.Is(err, actions.ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%s: err %v (field %q), want field %q", c.in, err, fielderr.Field(err), c.field)
		}
	}
}

func TestTranslateOSWorld(t *testing.T) {
	cases := []struct{ in, want, terminal string }{
		{`{"action_type":"MOVE_TO","parameters":{"x":100.7,"y":200}}`, `[{"kind":"move","x":100,"y":200}]`, ""},
		{`{"action_type":"CLICK","parameters":{}}`, `[{"kind":"click","button":"left","count":1}]`, ""},
		{`{"action_type":"CLICK"}`, `[{"kind":"click","button":"left","count":1}]`, ""},
		{`{"action_type":"CLICK","parameters":{"button":"right","x":5,"y":6,"num_clicks":2}}`, `[{"kind":"click","x":5,"y":6,"button":"right","count":2}]`, ""},
		{`{"action_type":"MOUSE_DOWN","parameters":{"button":"middle"}}`, `[{"kind":"button_down","button":"middle"}]`, ""},
		{`{"action_type":"MOUSE_UP","parameters":{}}`, `[{"kind":"button_up","button":"left"}]`, ""},
		{`{"action_type":"RIGHT_CLICK","parameters":{"x":1,"y":2}}`, `[{"kind":"click","x":1,"y":2,"button":"right","count":1}]`, ""},
		{`{"action_type":"DOUBLE_CLICK","parameters":{}}`, `[{"kind":"click","button":"left","count":2}]`, ""},
		{`{"action_type":"DRAG_TO","parameters":{"x":9,"y":8}}`, `[{"kind":"drag","x":9,"y":8,"button":"left"}]`, ""},
		{`{"action_type":"SCROLL","parameters":{"dx":0,"dy":-3}}`, `[{"kind":"scroll","direction":"down","amount":3}]`, ""},
		{`{"action_type":"SCROLL","parameters":{"dx":2,"dy":1}}`, `[{"kind":"scroll","direction":"up","amount":1},{"kind":"scroll","direction":"right","amount":2}]`, ""},
		{`{"action_type":"TYPING","parameters":{"text":"a<b>"}}`, `[{"kind":"type","text":"a\u003cb\u003e"}]`, ""},
		{`{"action_type":"PRESS","parameters":{"key":"enter"}}`, `[{"kind":"key","keys":["Return"]}]`, ""},
		{`{"action_type":"PRESS","parameters":{"key":"\n"}}`, `[{"kind":"key","keys":["Return"]}]`, ""},
		{`{"action_type":"KEY_DOWN","parameters":{"key":"shiftleft"}}`, `[{"kind":"key_down","keys":["Shift_L"]}]`, ""},
		{`{"action_type":"KEY_UP","parameters":{"key":"ctrlright"}}`, `[{"kind":"key_up","keys":["Control_R"]}]`, ""},
		{`{"action_type":"HOTKEY","parameters":{"keys":["ctrl","alt","t"]}}`, `[{"kind":"key","keys":["Control_L","Alt_L","t"]}]`, ""},
		{`{"action_type":"HOTKEY","parameters":{"keys":["win","prtsc"]}}`, `[{"kind":"key","keys":["Super_L","Print"]}]`, ""},
		{`{"action_type":"WAIT"}`, `[{"kind":"wait","duration_ms":2000}]`, ""},
		{`"WAIT"`, `[{"kind":"wait","duration_ms":2000}]`, ""},
		{`"DONE"`, `null`, "DONE"},
		{`{"action_type":"FAIL","parameters":{}}`, `null`, "FAIL"},
	}
	for _, c := range cases {
		acts, term, err := TranslateOSWorld([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got := mustJSON(t, acts); got != c.want || term != c.terminal {
			t.Errorf("%s:\n got %s %q\nwant %s %q", c.in, got, term, c.want, c.terminal)
		}
	}
	bad := []struct{ in, field string }{
		{`{"action_type":"JUMP"}`, "action_type"},
		{`"CLICK"`, "action_type"},
		{`{"action_type":"CLICK","parameters":{"x":1}}`, "parameters.y"},
		{`{"action_type":"CLICK","parameters":{"num_clicks":4}}`, "parameters.num_clicks"},
		{`{"action_type":"CLICK","parameters":{"button":"back"}}`, "parameters.button"},
		{`{"action_type":"MOVE_TO","parameters":{}}`, "parameters.x"},
		{`{"action_type":"MOVE_TO","parameters":{"x":-1,"y":0}}`, "parameters.x"},
		{`{"action_type":"MOVE_TO","parameters":{"x":1,"y":2,"duration":1}}`, "parameters.duration"},
		{`{"action_type":"SCROLL","parameters":{"dy":1}}`, "parameters.dx"},
		{`{"action_type":"SCROLL","parameters":{"dx":0,"dy":0}}`, "parameters.dy"},
		{`{"action_type":"SCROLL","parameters":{"dx":0,"dy":0.5}}`, "parameters.dy"},
		{`{"action_type":"PRESS","parameters":{"key":"fn"}}`, "parameters.key"},
		{`{"action_type":"HOTKEY","parameters":{"keys":[]}}`, "parameters.keys"},
		{`{"action_type":"HOTKEY","parameters":{"keys":["ctrl","nokey"]}}`, "parameters.keys[1]"},
		{`{"action_type":"TYPING","parameters":{}}`, "parameters.text"},
		{`{"action_type":"TYPING","parameters":{"text":"日本\u001b"}}`, "parameters.text"},
		{`{"action_type":"CLICK","extra":1}`, "extra"},
	}
	for _, c := range bad {
		_, _, err := TranslateOSWorld([]byte(c.in))
		if !errors.Is(err, actions.ErrInvalid) || fielderr.Field(err) != c.field {
			t.Errorf("%s: err %v (field %q), want field %q", c.in, err, fielderr.Field(err), c.field)
		}
	}
}

// TestLimitsNameFieldAndLimit: every cap is refused with a FieldError that
// carries the field and the limit, so an agent can split its request.
func TestLimitsNameFieldAndLimit(t *testing.T) {
	many := make([]actions.Action, actions.MaxActions+1)
	for i := range many {
		many[i] = actions.Screenshot{}
	}
	e, err := player.NewExecutor(newFake(100, 80), player.ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	_, runErr := e.Run(t.Context(), many, noShot)
	_, claudeErr := TranslateClaude(Computer20251124, []byte(`{"action":"key","text":"`+strings.Repeat("a ", actions.MaxTextRunes)+`"}`))
	for _, c := range []struct {
		name  string
		err   error
		field string
		limit int
	}{
		{"run count", runErr, "actions", actions.MaxActions},
		{"claude key text", claudeErr, "text", actions.MaxTextRunes},
		{"type text", actions.TypeText{Text: strings.Repeat("x", actions.MaxTextRunes+1)}.Validate(), "text", actions.MaxTextRunes},
		{"zoom area", actions.Zoom{Region: [4]int{0, 0, 1, 1}, Width: 4096, Height: 2048}.Validate(), "width", actions.MaxZoomPixels},
		{"drag via", actions.Drag{Via: make([]actions.Point, actions.MaxDragVia+1)}.Validate(), "via", actions.MaxDragVia},
	} {
		fe, ok := errors.AsType[*actions.FieldError](c.err)
		if !ok || fe.Path.String() != c.field || fe.Limit != c.limit || !errors.Is(c.err, actions.ErrTooLarge) || !errors.Is(c.err, actions.ErrInvalid) {
			t.Errorf("%s: %v, want field %s limit %d", c.name, c.err, c.field, c.limit)
		}
	}
	if err := (actions.TypeText{Text: strings.Repeat("é", 10)}).Validate(); errors.Is(err, actions.ErrTooLarge) {
		t.Errorf("text is counted in bytes, not runes: %v", err)
	}
	// A zoom whose derived side makes it huge is refused when planned: a
	// 1-pixel-wide strip the full height, asked 4096 wide.
	f := newFake(1920, 1080)
	e, _ = player.NewExecutor(f, player.ExecutorConfig{})
	_, err = e.Run(t.Context(), []actions.Action{actions.Zoom{Region: [4]int{0, 0, 1, 1080}, Width: 4096}}, noShot)
	if fe, ok := errors.AsType[*actions.FieldError](err); !ok || fe.Path.String() != "actions[0].width" || fe.Limit != actions.MaxZoomPixels {
		t.Errorf("derived zoom: %v", err)
	}
}

// TestAcceptedValues: refusals of a value outside a fixed set list the set.
func TestAcceptedValues(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := actions.DecodeActions([]byte(`[{"kind":"fly"}]`)); return err }(), "cursor_position"},
		{actions.Click{Button: "thumb"}.Validate(), "forward"},
		{actions.Scroll{Direction: "in", Amount: 1}.Validate(), "right"},
		{func() error { _, err := TranslateClaude(Computer20250124, []byte(`{"action":"zoom"}`)); return err }(), "triple_click"},
		{func() error { _, err := TranslateOpenAI([]byte(`{"type":"fly"}`)); return err }(), "keypress"},
		{func() error { _, _, err := TranslateOSWorld([]byte(`{"action_type":"FLY"}`)); return err }(), "HOTKEY"},
		{player.RunOptions{Screenshot: "sometimes"}.Validate(), "never"},
	} {
		fe, ok := errors.AsType[*actions.FieldError](c.err)
		if !ok || !slices.Contains(fe.Accepted, c.want) {
			t.Errorf("%v: accepted values lack %q", c.err, c.want)
		}
	}
}

// TestSpecsCoverVocabularies: every action a vocabulary lists has a spec
// that translates it, and no spec is unreachable.
func TestSpecsCoverVocabularies(t *testing.T) {
	for _, v := range append(slices.Clone(ClaudeVersions), ComputerToolset20260801) {
		for _, a := range v.Actions() {
			if s, ok := claudeSpecs[a]; !ok || s.translate == nil {
				t.Errorf("%s action %s has no translation", v, a)
			}
		}
	}
	for a := range claudeSpecs {
		if !slices.Contains(Computer20251124.Actions(), a) {
			t.Errorf("claude spec %s is in no version", a)
		}
	}
	for _, a := range osworldActions {
		s, ok := osworldSpecs[a]
		if !ok || (s.translate == nil) != (a == "DONE" || a == "FAIL") {
			t.Errorf("computer_13 action %s has no translation", a)
		}
	}
	if len(osworldSpecs) != len(osworldActions) {
		t.Errorf("%d computer_13 specs for %d actions", len(osworldSpecs), len(osworldActions))
	}
}
