package actions

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestTranslateOpenAI(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"type":"click","x":10,"y":20,"button":"left"}`, `[{"kind":"click","x":10,"y":20,"button":"left","count":1}]`},
		{`{"type":"click","x":10,"y":20}`, `[{"kind":"click","x":10,"y":20,"button":"left","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"right"}`, `[{"kind":"click","x":10,"y":20,"button":"right","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"wheel"}`, `[{"kind":"click","x":10,"y":20,"button":"middle","count":1}]`},
		{`{"type":"click","x":10,"y":20,"button":"back"}`, `[{"kind":"move","x":10,"y":20},{"kind":"key","keys":["Alt_L","Left"]}]`},
		{`{"type":"click","x":10,"y":20,"button":"forward"}`, `[{"kind":"move","x":10,"y":20},{"kind":"key","keys":["Alt_L","Right"]}]`},
		{`{"type":"double_click","x":1,"y":2}`, `[{"kind":"click","x":1,"y":2,"button":"left","count":2}]`},
		{`{"type":"move","x":3,"y":4}`, `[{"kind":"move","x":3,"y":4}]`},
		{`{"type":"screenshot"}`, `[{"kind":"screenshot"}]`},
		{`{"type":"wait"}`, `[{"kind":"wait","duration_ms":1000}]`},
		{`{"type":"type","text":"hi there"}`, `[{"kind":"type","text":"hi there"}]`},
		{`{"type":"keypress","keys":["CTRL","C"]}`, `[{"kind":"key","keys":["Control_L","c"]}]`},
		{`{"type":"keypress","keys":["ENTER"]}`, `[{"kind":"key","keys":["Return"]}]`},
		{`{"type":"keypress","keys":["ARROWDOWN"]}`, `[{"kind":"key","keys":["Down"]}]`},
		{`{"type":"keypress","keys":["CMD","SHIFT","T"]}`, `[{"kind":"key","keys":["Super_L","Shift_L","t"]}]`},
		{`{"type":"scroll","x":5,"y":6,"scroll_x":0,"scroll_y":300}`, `[{"kind":"move","x":5,"y":6},{"kind":"scroll","x":5,"y":6,"direction":"down","amount":3}]`},
		{`{"type":"scroll","x":5,"y":6,"scroll_x":-40,"scroll_y":-100}`,
			`[{"kind":"move","x":5,"y":6},{"kind":"scroll","x":5,"y":6,"direction":"up","amount":1},{"kind":"scroll","x":5,"y":6,"direction":"left","amount":1}]`},
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
		{`{"type":"keypress","keys":["HYPERDRIVE"]}`, "keys"},
		{`{"type":"scroll","x":1,"y":1,"scroll_x":0,"scroll_y":0}`, "scroll_y"},
		{`{"type":"drag","path":[{"x":1,"y":2}]}`, "path"},
		{`{"type":"drag","path":[{"x":1,"y":2},{"x":1}]}`, "path[1].y"},
		{`{"type":"type","text":"ß"}`, "text"},
		{`"click"`, "action"},
	}
	for _, c := range bad {
		_, err := TranslateOpenAI([]byte(c.in))
		if !errors.Is(err, ErrInvalid) || fieldOf(err) != c.field {
			t.Errorf("%s: err %v (field %q), want field %q", c.in, err, fieldOf(err), c.field)
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
		{`{"action_type":"TYPING","parameters":{"text":"日本"}}`, "parameters.text"},
		{`{"action_type":"CLICK","extra":1}`, "extra"},
	}
	for _, c := range bad {
		_, _, err := TranslateOSWorld([]byte(c.in))
		if !errors.Is(err, ErrInvalid) || fieldOf(err) != c.field {
			t.Errorf("%s: err %v (field %q), want field %q", c.in, err, fieldOf(err), c.field)
		}
	}
}

func TestNeutralJSONRoundTrip(t *testing.T) {
	acts := []Action{
		MoveTo(10, 20),
		{Kind: KindButtonDown, Button: ButtonLeft},
		{Kind: KindButtonUp, Button: ButtonLeft, At: pt(30, 40)},
		ClickAt(pt(10, 20), ButtonLeft, 2, "ctrl"),
		{Kind: KindDrag, From: pt(10, 20), Via: []Point{{50, 20}}, At: pt(90, 60), Button: ButtonLeft, Modifiers: []string{"shift"}},
		{Kind: KindScroll, At: pt(500, 400), Direction: ScrollDown, Amount: 3, Modifiers: []string{"ctrl"}},
		KeyChord("ctrl", "shift", "t"),
		{Kind: KindKeyDown, Keys: []string{"shift"}},
		{Kind: KindKeyUp, Keys: []string{"shift"}},
		{Kind: KindHoldKey, Keys: []string{"shift"}, DurationMS: 1500},
		TypeText("Hello, World!\n"),
		{Kind: KindWait, DurationMS: 500},
		Screenshot(),
		{Kind: KindZoom, Region: []int{0, 0, 400, 300}, Width: 800},
		{Kind: KindCursorPosition},
	}
	b, err := json.Marshal(acts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeActions(b)
	if err != nil {
		t.Fatalf("DecodeActions(%s): %v", b, err)
	}
	b2, _ := json.Marshal(back)
	if string(b) != string(b2) {
		t.Errorf("round trip:\n%s\n%s", b, b2)
	}
	// The documented example.
	one, err := DecodeActions([]byte(`{"kind":"click","x":10,"y":20,"button":"left","count":2,"modifiers":["ctrl"]}`))
	if err != nil || len(one) != 1 || one[0].At == nil || one[0].At.X != 10 || one[0].Count != 2 {
		t.Errorf("example: %+v %v", one, err)
	}
}

func TestDecodeActionsErrors(t *testing.T) {
	cases := []struct{ in, field, contains string }{
		{`[{"kind":"click","x":1}]`, "actions[0].y", "together"},
		{`[{"kind":"move"}]`, "actions[0].x", "needs x and y"},
		{`[{"kind":"click","x":1,"y":2,"colour":"red"}]`, "actions[0].colour", "unknown field"},
		{`[{"kind":"click","x":"1","y":2}]`, "actions[0].x", "integer"},
		{`[{"kind":"click","x":1.5,"y":2}]`, "actions[0].x", "integer"},
		{`[{"kind":"click","count":4}]`, "actions[0].count", "1 to 3"},
		{`[{"kind":"click","button":"thumb"}]`, "actions[0].button", "left, middle, right"},
		{`[{"kind":"click","text":"a"}]`, "actions[0].text", "not used by click"},
		{`[{"kind":"click","modifiers":["a"]}]`, "actions[0].modifiers", "not a modifier"},
		{`[{"kind":"scroll","direction":"in","amount":1}]`, "actions[0].direction", "up, down"},
		{`[{"kind":"scroll","direction":"up"}]`, "actions[0].amount", "1 to 100"},
		{`[{"kind":"key"}]`, "actions[0].keys", "at least one key"},
		{`[{"kind":"key","keys":["ctrl+foo"]}]`, "actions[0].keys", "unknown key"},
		{`[{"kind":"key","keys":["a","b","c","d","e","f","g","h","i"]}]`, "actions[0].keys", "at most 8"},
		{`[{"kind":"hold_key","keys":["a"]}]`, "actions[0].duration_ms", "1 to 100000"},
		{`[{"kind":"wait","duration_ms":100001}]`, "actions[0].duration_ms", "1 to 100000"},
		{`[{"kind":"type","text":""}]`, "actions[0].text", "non-empty"},
		{`[{"kind":"type","text":"é"}]`, "actions[0].text", "U+00E9"},
		{`[{"kind":"zoom","region":[0,0,1]}]`, "actions[0].region", "4 integers"},
		{`[{"kind":"zoom","region":[0,0,1,1],"width":5000}]`, "actions[0].width", "1 to 4096"},
		{`[{"kind":"drag","x":1,"y":1,"from":{"x":-1,"y":0}}]`, "actions[0].from.x", "non-negative"},
		{`[{"kind":"screenshot","x":1,"y":1}]`, "actions[0].x", "not used by screenshot"},
		{`[{"kind":"teleport"}]`, "actions[0].kind", "kinds are"},
		{`[{}]`, "actions[0].kind", "kinds are"},
		{`[{"kind":"move","x":1,"y":1},{"kind":"move","x":-5,"y":1}]`, "actions[1].x", "non-negative"},
		{`{"kind":"move","x":1}`, "actions[0].y", "together"},
		{`"move"`, "actions", "JSON array"},
	}
	for _, c := range cases {
		_, err := DecodeActions([]byte(c.in))
		if !errors.Is(err, ErrInvalid) || fieldOf(err) != c.field || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: err %v (field %q), want field %q containing %q", c.in, err, fieldOf(err), c.field, c.contains)
		}
	}
}
