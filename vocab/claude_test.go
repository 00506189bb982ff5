package vocab

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/fielderr"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// mustJSON renders actions as neutral JSON for comparison.
func mustJSON(t *testing.T, acts []actions.Action) string {
	t.Helper()
	b, err := json.Marshal(acts)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var allVersions = ClaudeVersions

func versionsFrom(v ClaudeVersion) []ClaudeVersion {
	i := slices.Index(ClaudeVersions, v)
	return ClaudeVersions[i:]
}

func TestClaudeActionLists(t *testing.T) {
	want := map[ClaudeVersion]string{
		Computer20241022: "key type mouse_move left_click left_click_drag right_click middle_click double_click screenshot cursor_position",
		Computer20250124: "key type mouse_move left_click left_click_drag right_click middle_click double_click screenshot cursor_position left_mouse_down left_mouse_up scroll hold_key wait triple_click",
		Computer20251124: "key type mouse_move left_click left_click_drag right_click middle_click double_click screenshot cursor_position left_mouse_down left_mouse_up scroll hold_key wait triple_click zoom",
	}
	for v, w := range want {
		if got := strings.Join(v.Actions(), " "); got != w {
			t.Errorf("%s actions = %s, want %s", v, got, w)
		}
		for _, a := range v.Actions() {
			if _, ok := claudeSpecs[a]; !ok {
				t.Errorf("%s action %s has no spec", v, a)
			}
		}
	}
}

func TestTranslateClaude(t *testing.T) {
	cases := []struct {
		name     string
		versions []ClaudeVersion
		input    string
		want     string // neutral JSON
	}{
		{"key", allVersions, `{"action":"key","text":"Return"}`,
			`[{"kind":"key","keys":["Return"]}]`},
		{"key chord", allVersions, `{"action":"key","text":"ctrl+s"}`,
			`[{"kind":"key","keys":["Control_L","s"]}]`},
		{"key alias", allVersions, `{"action":"key","text":"alt+Tab"}`,
			`[{"kind":"key","keys":["Alt_L","Tab"]}]`},
		{"key keypad", allVersions, `{"action":"key","text":"KP_0"}`,
			`[{"kind":"key","keys":["KP_0"]}]`},
		{"key sequence", allVersions, `{"action":"key","text":"ctrl+a Delete"}`,
			`[{"kind":"key","keys":["Control_L","a"]},{"kind":"key","keys":["Delete"]}]`},
		{"key space char", allVersions, `{"action":"key","text":" "}`,
			`[{"kind":"key","keys":["space"]}]`},
		{"type", allVersions, `{"action":"type","text":"Hello, World! <a href=\"x\">"}`,
			`[{"kind":"type","text":"Hello, World! \u003ca href=\"x\"\u003e"}]`},
		{"mouse_move", allVersions, `{"action":"mouse_move","coordinate":[100,200]}`,
			`[{"kind":"move","x":100,"y":200}]`},
		{"mouse_move integral float", allVersions, `{"action":"mouse_move","coordinate":[100.0,2e2]}`,
			`[{"kind":"move","x":100,"y":200}]`},
		{"left_click here", allVersions, `{"action":"left_click"}`,
			`[{"kind":"click","button":"left","count":1}]`},
		{"left_click null fields", allVersions, `{"action":"left_click","coordinate":null,"text":null}`,
			`[{"kind":"click","button":"left","count":1}]`},
		{"right_click", allVersions, `{"action":"right_click"}`,
			`[{"kind":"click","button":"right","count":1}]`},
		{"middle_click", allVersions, `{"action":"middle_click"}`,
			`[{"kind":"click","button":"middle","count":1}]`},
		{"double_click", allVersions, `{"action":"double_click"}`,
			`[{"kind":"click","button":"left","count":2}]`},
		{"left_click at", versionsFrom(Computer20250124), `{"action":"left_click","coordinate":[5,6]}`,
			`[{"kind":"click","x":5,"y":6,"button":"left","count":1}]`},
		{"left_click modifiers", versionsFrom(Computer20250124), `{"action":"left_click","coordinate":[5,6],"text":"ctrl+shift"}`,
			`[{"kind":"click","x":5,"y":6,"button":"left","count":1,"modifiers":["Control_L","Shift_L"]}]`},
		{"right_click modifiers", versionsFrom(Computer20250124), `{"action":"right_click","text":"alt"}`,
			`[{"kind":"click","button":"right","count":1,"modifiers":["Alt_L"]}]`},
		{"triple_click", versionsFrom(Computer20250124), `{"action":"triple_click","coordinate":[1,2]}`,
			`[{"kind":"click","x":1,"y":2,"button":"left","count":3}]`},
		{"double_click at", versionsFrom(Computer20250124), `{"action":"double_click","coordinate":[1,2],"text":"shift"}`,
			`[{"kind":"click","x":1,"y":2,"button":"left","count":2,"modifiers":["Shift_L"]}]`},
		{"middle_click at", versionsFrom(Computer20250124), `{"action":"middle_click","coordinate":[1,2]}`,
			`[{"kind":"click","x":1,"y":2,"button":"middle","count":1}]`},
		{"drag", allVersions, `{"action":"left_click_drag","start_coordinate":[1,2],"coordinate":[30,40]}`,
			`[{"kind":"drag","x":30,"y":40,"from":{"x":1,"y":2},"button":"left"}]`},
		{"drag from pointer (20241022)", []ClaudeVersion{Computer20241022}, `{"action":"left_click_drag","coordinate":[30,40]}`,
			`[{"kind":"drag","x":30,"y":40,"button":"left"}]`},
		{"screenshot", allVersions, `{"action":"screenshot"}`, `[{"kind":"screenshot"}]`},
		{"cursor_position", allVersions, `{"action":"cursor_position"}`, `[{"kind":"cursor_position"}]`},
		{"left_mouse_down", versionsFrom(Computer20250124), `{"action":"left_mouse_down"}`,
			`[{"kind":"button_down","button":"left"}]`},
		{"left_mouse_up", versionsFrom(Computer20250124), `{"action":"left_mouse_up"}`,
			`[{"kind":"button_up","button":"left"}]`},
		{"left_mouse_down at", versionsFrom(Computer20250124), `{"action":"left_mouse_down","coordinate":[7,8]}`,
			`[{"kind":"button_down","x":7,"y":8,"button":"left"}]`},
		{"left_mouse_up at", versionsFrom(Computer20250124), `{"action":"left_mouse_up","coordinate":[9,9]}`,
			`[{"kind":"button_up","x":9,"y":9,"button":"left"}]`},
		{"scroll", versionsFrom(Computer20250124), `{"action":"scroll","coordinate":[10,20],"scroll_direction":"down","scroll_amount":3}`,
			`[{"kind":"scroll","x":10,"y":20,"direction":"down","amount":3}]`},
		{"scroll here with modifiers", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"left","scroll_amount":1,"text":"ctrl"}`,
			`[{"kind":"scroll","modifiers":["Control_L"],"direction":"left","amount":1}]`},
		{"scroll up right", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":100}`,
			`[{"kind":"scroll","direction":"up","amount":100}]`},
		{"hold_key", versionsFrom(Computer20250124), `{"action":"hold_key","text":"shift","duration":1.5}`,
			`[{"kind":"hold_key","keys":["Shift_L"],"duration_ms":1500}]`},
		{"hold_key chord", versionsFrom(Computer20250124), `{"action":"hold_key","text":"ctrl+alt","duration":100}`,
			`[{"kind":"hold_key","keys":["Control_L","Alt_L"],"duration_ms":100000}]`},
		{"wait", versionsFrom(Computer20250124), `{"action":"wait","duration":2}`,
			`[{"kind":"wait","duration_ms":2000}]`},
		{"wait tiny", versionsFrom(Computer20250124), `{"action":"wait","duration":0.0001}`,
			`[{"kind":"wait","duration_ms":1}]`},
		{"zoom", []ClaudeVersion{Computer20251124}, `{"action":"zoom","region":[0,0,400,300]}`,
			`[{"kind":"zoom","region":[0,0,400,300]}]`},
	}
	for _, c := range cases {
		for _, v := range c.versions {
			acts, err := TranslateClaude(v, []byte(c.input))
			if err != nil {
				t.Errorf("%s %s: %v", v, c.name, err)
				continue
			}
			if got := mustJSON(t, acts); got != c.want {
				t.Errorf("%s %s:\n got %s\nwant %s", v, c.name, got, c.want)
			}
			for i := range acts {
				if err := acts[i].Validate(); err != nil {
					t.Errorf("%s %s: action %d does not validate: %v", v, c.name, i, err)
				}
			}
		}
	}
}

func TestTranslateClaudeErrors(t *testing.T) {
	cases := []struct {
		name     string
		versions []ClaudeVersion
		input    string
		field    string   // FieldError.Path, rendered
		sentinel error    // besides ErrInvalid
		contains []string // in the message
	}{
		{"not an object", allVersions, `[1,2]`, "input", nil, []string{"JSON object"}},
		{"malformed", allVersions, `{"action":`, "input", nil, []string{"malformed"}},
		{"missing action", allVersions, `{}`, "action", actions.ErrUnsupportedAction, []string{"missing", "screenshot"}},
		{"action not string", allVersions, `{"action":3}`, "action", actions.ErrUnsupportedAction, []string{"string"}},
		{"unknown action", allVersions, `{"action":"fly"}`, "action", actions.ErrUnsupportedAction, []string{`"fly"`, "accepts", "left_click"}},
		{"scroll in 20241022", []ClaudeVersion{Computer20241022}, `{"action":"scroll","scroll_direction":"up","scroll_amount":1}`,
			"action", actions.ErrUnsupportedAction, []string{"computer_20241022", "added in computer_20250124", "key, type, mouse_move"}},
		{"triple_click in 20241022", []ClaudeVersion{Computer20241022}, `{"action":"triple_click"}`,
			"action", actions.ErrUnsupportedAction, []string{"added in computer_20250124"}},
		{"zoom before 20251124", []ClaudeVersion{Computer20241022, Computer20250124}, `{"action":"zoom","region":[0,0,1,1]}`,
			"action", actions.ErrUnsupportedAction, []string{"added in computer_20251124", "accepts"}},
		{"hold_key in 20241022", []ClaudeVersion{Computer20241022}, `{"action":"hold_key","text":"a","duration":1}`,
			"action", actions.ErrUnsupportedAction, []string{"hold_key"}},
		{"unknown field", allVersions, `{"action":"screenshot","foo":1}`, "foo", nil, []string{"unknown field", "coordinate"}},
		{"demo key field", versionsFrom(Computer20250124), `{"action":"left_click","key":"ctrl"}`, "key", nil, []string{"modifiers", "text"}},
		{"key missing text", allVersions, `{"action":"key"}`, "text", nil, []string{"required"}},
		{"key with coordinate", allVersions, `{"action":"key","text":"a","coordinate":[1,2]}`, "coordinate", nil, []string{"not accepted for key"}},
		{"key empty", allVersions, `{"action":"key","text":""}`, "text", actions.ErrUnknownKey, []string{"empty"}},
		{"key unknown", allVersions, `{"action":"key","text":"ctrl+foo"}`, "text", actions.ErrUnknownKey, []string{`"foo"`, "X keysym names"}},
		{"key text not string", allVersions, `{"action":"key","text":5}`, "text", nil, []string{"string"}},
		{"type missing text", allVersions, `{"action":"type"}`, "text", nil, []string{"required"}},
		{"type empty", allVersions, `{"action":"type","text":""}`, "text", nil, []string{"empty"}},
		{"type control character", allVersions, `{"action":"type","text":"naïve\u0008"}`, "text", actions.ErrUntypable, []string{"U+0008", "control character"}},
		{"move missing coordinate", allVersions, `{"action":"mouse_move"}`, "coordinate", nil, []string{"required"}},
		{"move with text", allVersions, `{"action":"mouse_move","coordinate":[1,2],"text":"x"}`, "text", nil, []string{"not accepted"}},
		{"coordinate short", allVersions, `{"action":"mouse_move","coordinate":[1]}`, "coordinate", nil, []string{"2 values", "got 1"}},
		{"coordinate long", allVersions, `{"action":"mouse_move","coordinate":[1,2,3]}`, "coordinate", nil, []string{"2 values", "got 3"}},
		{"coordinate negative", allVersions, `{"action":"mouse_move","coordinate":[-1,2]}`, "coordinate", actions.ErrOutOfBounds, []string{"non-negative"}},
		{"coordinate fraction", allVersions, `{"action":"mouse_move","coordinate":[1.5,2]}`, "coordinate", nil, []string{"integer", "1.5"}},
		{"coordinate string", allVersions, `{"action":"mouse_move","coordinate":["1",2]}`, "coordinate", nil, []string{"number"}},
		{"coordinate object", allVersions, `{"action":"mouse_move","coordinate":{"x":1}}`, "coordinate", nil, []string{"array"}},
		{"coordinate huge", allVersions, `{"action":"mouse_move","coordinate":[1e300,2]}`, "coordinate", actions.ErrOutOfBounds, []string{"out of range"}},
		{"click coordinate in 20241022", []ClaudeVersion{Computer20241022}, `{"action":"left_click","coordinate":[1,2]}`,
			"coordinate", nil, []string{"computer_20241022", "mouse_move", "computer_20250124"}},
		{"click text in 20241022", []ClaudeVersion{Computer20241022}, `{"action":"double_click","text":"ctrl"}`,
			"text", nil, []string{"computer_20241022"}},
		{"click non-modifier", versionsFrom(Computer20250124), `{"action":"left_click","text":"a"}`, "text", actions.ErrUnknownKey, []string{"not a modifier"}},
		{"click unknown modifier", versionsFrom(Computer20250124), `{"action":"left_click","text":"hyperctrl"}`, "text", actions.ErrUnknownKey, []string{"unknown key"}},
		{"drag missing start", versionsFrom(Computer20250124), `{"action":"left_click_drag","coordinate":[1,2]}`, "start_coordinate", nil, []string{"required"}},
		{"drag missing end", allVersions, `{"action":"left_click_drag","start_coordinate":[1,2]}`, "coordinate", nil, []string{"required"}},
		{"drag bad start", allVersions, `{"action":"left_click_drag","start_coordinate":[1],"coordinate":[1,2]}`, "start_coordinate", nil, []string{"2 values"}},
		{"drag text", allVersions, `{"action":"left_click_drag","start_coordinate":[1,1],"coordinate":[1,2],"text":"shift"}`, "text", nil, []string{"not accepted"}},
		{"screenshot with coordinate", allVersions, `{"action":"screenshot","coordinate":[1,2]}`, "coordinate", nil, []string{"not accepted for screenshot", "no other fields"}},
		{"cursor_position with text", allVersions, `{"action":"cursor_position","text":"x"}`, "text", nil, []string{"not accepted"}},
		{"mouse_down with start_coordinate", versionsFrom(Computer20250124), `{"action":"left_mouse_down","start_coordinate":[1,2]}`, "start_coordinate", nil, []string{"not accepted"}},
		{"mouse_up with text", versionsFrom(Computer20250124), `{"action":"left_mouse_up","text":"ctrl"}`, "text", nil, []string{"not accepted"}},
		{"scroll missing direction", versionsFrom(Computer20250124), `{"action":"scroll","scroll_amount":1}`, "scroll_direction", nil, []string{"required"}},
		{"scroll missing amount", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up"}`, "scroll_amount", nil, []string{"required"}},
		{"scroll bad direction", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"sideways","scroll_amount":1}`,
			"scroll_direction", nil, []string{"up, down, left or right", "sideways"}},
		{"scroll direction number", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":1,"scroll_amount":1}`,
			"scroll_direction", nil, []string{"string"}},
		{"scroll amount zero", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":0}`,
			"scroll_amount", nil, []string{"1 to 100"}},
		{"scroll amount negative", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":-3}`,
			"scroll_amount", nil, []string{"1 to 100"}},
		{"scroll amount fraction", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":2.5}`,
			"scroll_amount", nil, []string{"integer"}},
		{"scroll amount too big", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":101}`,
			"scroll_amount", nil, []string{"1 to 100"}},
		{"scroll bad coordinate", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":1,"coordinate":[1,-1]}`,
			"coordinate", actions.ErrOutOfBounds, []string{"non-negative"}},
		{"scroll start_coordinate", versionsFrom(Computer20250124), `{"action":"scroll","scroll_direction":"up","scroll_amount":1,"start_coordinate":[1,1]}`,
			"start_coordinate", nil, []string{"not accepted"}},
		{"hold_key missing duration", versionsFrom(Computer20250124), `{"action":"hold_key","text":"a"}`, "duration", nil, []string{"required"}},
		{"hold_key missing text", versionsFrom(Computer20250124), `{"action":"hold_key","duration":1}`, "text", nil, []string{"required"}},
		{"hold_key zero", versionsFrom(Computer20250124), `{"action":"hold_key","text":"a","duration":0}`, "duration", nil, []string{"more than 0", "100"}},
		{"hold_key too long", versionsFrom(Computer20250124), `{"action":"hold_key","text":"a","duration":100.5}`, "duration", nil, []string{"at most 100"}},
		{"hold_key bad key", versionsFrom(Computer20250124), `{"action":"hold_key","text":"nokey","duration":1}`, "text", actions.ErrUnknownKey, []string{"unknown key"}},
		{"wait missing", versionsFrom(Computer20250124), `{"action":"wait"}`, "duration", nil, []string{"required"}},
		{"wait negative", versionsFrom(Computer20250124), `{"action":"wait","duration":-1}`, "duration", nil, []string{"more than 0"}},
		{"wait string", versionsFrom(Computer20250124), `{"action":"wait","duration":"2"}`, "duration", nil, []string{"number"}},
		{"wait with text", versionsFrom(Computer20250124), `{"action":"wait","duration":1,"text":"a"}`, "text", nil, []string{"not accepted"}},
		{"zoom missing region", []ClaudeVersion{Computer20251124}, `{"action":"zoom"}`, "region", nil, []string{"required"}},
		{"zoom short region", []ClaudeVersion{Computer20251124}, `{"action":"zoom","region":[0,0,1]}`, "region", nil, []string{"4 values"}},
		{"zoom inverted region", []ClaudeVersion{Computer20251124}, `{"action":"zoom","region":[10,0,5,5]}`, "region", nil, []string{"x0 < x1"}},
		{"zoom empty region", []ClaudeVersion{Computer20251124}, `{"action":"zoom","region":[0,5,10,5]}`, "region", nil, []string{"y0 < y1"}},
		{"zoom negative region", []ClaudeVersion{Computer20251124}, `{"action":"zoom","region":[-1,0,5,5]}`, "region", actions.ErrOutOfBounds, []string{"non-negative"}},
		{"zoom with coordinate", []ClaudeVersion{Computer20251124}, `{"action":"zoom","region":[0,0,5,5],"coordinate":[1,1]}`, "coordinate", nil, []string{"not accepted"}},
	}
	for _, c := range cases {
		for _, v := range c.versions {
			_, err := TranslateClaude(v, []byte(c.input))
			if err == nil {
				t.Errorf("%s %s: no error", v, c.name)
				continue
			}
			if !errors.Is(err, actions.ErrInvalid) {
				t.Errorf("%s %s: %v does not wrap ErrInvalid", v, c.name, err)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("%s %s: %v does not wrap %v", v, c.name, err, c.sentinel)
			}
			var fe *actions.FieldError
			if !errors.As(err, &fe) || fe.Path.String() != c.field {
				t.Errorf("%s %s: error %v names field %q, want %q", v, c.name, err, fielderr.Field(err), c.field)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, string(v)+": ") {
				t.Errorf("%s %s: error %q does not start with the version", v, c.name, msg)
			}
			for _, want := range c.contains {
				if !strings.Contains(msg, want) {
					t.Errorf("%s %s: error %q lacks %q", v, c.name, msg, want)
				}
			}
		}
	}
	_, err := TranslateClaude("computer_20990101", []byte(`{"action":"screenshot"}`))
	if !errors.Is(err, actions.ErrUnsupportedAction) || !strings.Contains(err.Error(), "computer_20251124") {
		t.Errorf("unknown version: %v", err)
	}
}

func TestNewClaudeTool(t *testing.T) {
	s, _ := player.NewScaler(1920, 1080, player.ScreenshotSize{Mode: player.SizeAuto})
	b, _ := json.Marshal(NewClaudeTool(Computer20251124, s))
	want := `{"type":"computer_20251124","name":"computer","display_width_px":1366,"display_height_px":768,"enable_zoom":true}`
	if string(b) != want {
		t.Errorf("tool = %s, want %s", b, want)
	}
	b, _ = json.Marshal(NewClaudeTool(Computer20250124, s))
	if strings.Contains(string(b), "enable_zoom") {
		t.Errorf("20250124 tool has enable_zoom: %s", b)
	}
}

func TestClaudeContentText(t *testing.T) {
	r := player.Result{Text: "X=1,Y=2", Image: &player.Image{MediaType: "image/png", Data: "AA=="}}
	c := ClaudeToolResult("t1", r, nil).Content
	if len(c) != 2 || c[0].OfText == nil || c[0].OfText.Text != "X=1,Y=2" || c[1].OfImage == nil ||
		c[1].OfImage.Source.OfBase64.MediaType != "image/png" || c[1].OfImage.Source.OfBase64.Data != "AA==" {
		t.Errorf("content %+v", c)
	}
}

// TestClaudeContentZoom: a zoom's image is the tool_result's one image block.
func TestClaudeContentZoom(t *testing.T) {
	e := newTestExecutor(t, newFake(1920, 1080), player.ScreenshotSize{Mode: player.SizeAuto})
	res, err := e.Run(t.Context(), []actions.Action{actions.Zoom{Region: [4]int{0, 0, 200, 100}}}, player.RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocks := ClaudeToolResult("t1", res, nil).Content
	if len(blocks) != 1 || blocks[0].OfImage == nil || blocks[0].OfImage.Source.OfBase64 == nil {
		t.Errorf("claude content %+v", blocks)
	}
}
