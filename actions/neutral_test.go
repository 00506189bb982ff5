package actions

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

func pt(x, y int) *Point { return &Point{X: x, Y: y} }

func TestNeutralJSONRoundTrip(t *testing.T) {
	acts := []Action{
		Move{To: Point{X: 10, Y: 20}},
		MoveBy{DX: -5, DY: 20},
		ButtonDown{Button: ButtonLeft},
		ButtonUp{Button: ButtonLeft, At: pt(30, 40)},
		Click{At: pt(10, 20), Button: ButtonLeft, Count: 2, Modifiers: MustKeys("ctrl")},
		Drag{From: pt(10, 20), Via: []Point{{X: 50, Y: 20}}, To: Point{X: 90, Y: 60}, Button: ButtonLeft, Modifiers: MustKeys("shift")},
		Scroll{At: pt(500, 400), Direction: ScrollDown, Amount: 3, Modifiers: MustKeys("ctrl")},
		KeyPress{Keys: MustKeys("ctrl", "shift", "t")},
		KeyDown{Keys: MustKeys("shift")},
		KeyUp{Keys: MustKeys("shift")},
		HoldKey{Keys: MustKeys("shift"), Duration: 1500 * time.Millisecond},
		TypeText{Text: "Hello, World!\n"},
		Wait{Duration: 500 * time.Millisecond},
		Screenshot{},
		Zoom{Region: [4]int{0, 0, 400, 300}, Width: 800},
		CursorPosition{},
		ClipboardGet{},
		ClipboardSet{Text: "Grüße, 日本語"},
	}
	b, err := json.Marshal(acts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeActions(b)
	if err != nil {
		t.Fatalf("DecodeActions(%s): %v", b, err)
	}
	if !reflect.DeepEqual(acts, back) {
		t.Errorf("round trip:\n%#v\n%#v", acts, back)
	}
	if len(acts) != len(Kinds) {
		t.Errorf("the round trip covers %d kinds of %d", len(acts), len(Kinds))
	}
	// The documented examples, as a client sends them: every kind parses
	// into its own type with its fields.
	got, err := DecodeActions([]byte(`[
		{"kind":"click","x":10,"y":20,"count":2},
		{"kind":"click","x":10,"y":20,"button":"left","count":2,"modifiers":["ctrl"]},
		{"kind":"key","keys":["ctrl+shift+t"]},
		{"kind":"hold_key","keys":["shift"],"duration_ms":1500},
		{"kind":"zoom","region":[0,0,400,300],"width":800}]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Action{
		Click{At: pt(10, 20), Count: 2},
		Click{At: pt(10, 20), Button: ButtonLeft, Count: 2, Modifiers: MustKeys("Control_L")},
		KeyPress{Keys: MustKeys("Control_L", "Shift_L", "t")},
		HoldKey{Keys: MustKeys("Shift_L"), Duration: 1500 * time.Millisecond},
		Zoom{Region: [4]int{0, 0, 400, 300}, Width: 800},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("examples:\n got %#v\nwant %#v", got, want)
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
		{`[{"kind":"type","text":"é\u0000"}]`, "actions[0].text", "U+0000"},
		{`[{"kind":"zoom","region":[0,0,1]}]`, "actions[0].region", "4 integers"},
		{`[{"kind":"zoom","region":[0,0,1,1],"width":5000}]`, "actions[0].width", "1 to 4096"},
		{`[{"kind":"drag","x":1,"y":1,"from":{"x":-1,"y":0}}]`, "actions[0].from.x", "non-negative"},
		{`[{"kind":"screenshot","x":1,"y":1}]`, "actions[0].x", "not used by screenshot"},
		{`[{"kind":"teleport"}]`, "actions[0].kind", "kinds are"},
		{`[{}]`, "actions[0].kind", "kinds are"},
		{`[{"kind":"move","x":1,"y":1},{"kind":"move","x":-5,"y":1}]`, "actions[1].x", "non-negative"},
		{`{"kind":"move","x":1}`, "actions[0].y", "together"},
		{`"move"`, "actions", "JSON array"},
		{`[{"kind":"type","text":"` + strings.Repeat("a", MaxTextRunes+1) + `"}]`, "actions[0].text", "at most 4096"},
		{`[{"kind":"zoom","region":[0,0,1,1],"width":4096,"height":4096}]`, "actions[0].width", "pixels"},
		{`[` + strings.Repeat(`{"kind":"screenshot"},`, MaxActions) + `{"kind":"screenshot"}]`, "actions", "at most 100 actions"},
	}
	for _, c := range cases {
		_, err := DecodeActions([]byte(c.in))
		if !errors.Is(err, ErrInvalid) || fielderr.Field(err) != c.field || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: err %v (field %q), want field %q containing %q", c.in, err, fielderr.Field(err), c.field, c.contains)
		}
	}
}
