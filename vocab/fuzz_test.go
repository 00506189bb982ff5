package vocab

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

func FuzzClaudeInput(f *testing.F) {
	for _, s := range []string{
		`{"action":"left_click","coordinate":[100,200],"text":"ctrl+shift"}`,
		`{"action":"key","text":"ctrl+a Delete"}`,
		`{"action":"type","text":"Hello, World! <a href=\"x\">"}`,
		`{"action":"scroll","coordinate":[1,2],"scroll_direction":"down","scroll_amount":3}`,
		`{"action":"left_click_drag","start_coordinate":[1,2],"coordinate":[3,4]}`,
		`{"action":"hold_key","text":"shift","duration":1.5}`,
		`{"action":"wait","duration":1e-9}`,
		`{"action":"zoom","region":[0,0,10,10]}`,
		`{"action":"mouse_move","coordinate":[1e308,-0]}`,
		`{"action":null}`, `{}`, `[]`, `null`, ``, `{"action":"key","text":"+"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		for _, v := range ClaudeVersions {
			acts, err := TranslateClaude(v, []byte(input))
			if err != nil {
				if !errors.Is(err, actions.ErrInvalid) {
					t.Fatalf("%s %q: error %v does not wrap ErrInvalid", v, input, err)
				}
				continue
			}
			checkActions(t, acts)
		}
	})
}

func FuzzTranslateOther(f *testing.F) {
	for _, s := range []string{
		`{"type":"click","x":10,"y":20,"button":"back"}`,
		`{"type":"scroll","x":5,"y":6,"scroll_x":-40,"scroll_y":-100}`,
		`{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}`,
		`{"type":"keypress","keys":["CTRL","C"]}`,
		`{"action_type":"CLICK","parameters":{"button":"right","x":5.5,"y":6,"num_clicks":2}}`,
		`{"action_type":"HOTKEY","parameters":{"keys":["ctrl","alt","t"]}}`,
		`{"action_type":"SCROLL","parameters":{"dx":2,"dy":-1}}`,
		`"DONE"`, `"WAIT"`, `{"kind":"click","x":1,"y":2}`, `[{"kind":"type","text":"x"}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		if acts, err := TranslateOpenAI([]byte(input)); err == nil {
			checkActions(t, acts)
		} else if !errors.Is(err, actions.ErrInvalid) {
			t.Fatalf("openai %q: %v", input, err)
		}
		if acts, _, err := TranslateOSWorld([]byte(input)); err == nil {
			checkActions(t, acts)
		} else if !errors.Is(err, actions.ErrInvalid) {
			t.Fatalf("osworld %q: %v", input, err)
		}
		if acts, err := actions.DecodeActions([]byte(input)); err == nil {
			checkActions(t, acts)
		} else if !errors.Is(err, actions.ErrInvalid) {
			t.Fatalf("neutral %q: %v", input, err)
		}
	})
}

// checkActions asserts translated actions validate, survive a JSON round
// trip, and plan and play on a fake display without panicking.
func checkActions(t *testing.T, acts []actions.Action) {
	t.Helper()
	if len(acts) == 0 {
		return // DONE/FAIL
	}
	for i := range acts {
		if err := acts[i].Validate(); err != nil {
			t.Fatalf("action %d %+v does not validate: %v", i, acts[i], err)
		}
	}
	b, err := json.Marshal(acts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := actions.DecodeActions(b)
	if err != nil {
		t.Fatalf("round trip of %s: %v", b, err)
	}
	if !reflect.DeepEqual(acts, back) {
		t.Fatalf("round trip of %s changed %#v to %#v", b, acts, back)
	}
	fd := newFake(64, 48)
	e, err := player.NewExecutor(fd, player.ExecutorConfig{Sleep: func(context.Context, time.Duration) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(context.Background(), acts, player.RunOptions{Screenshot: player.ScreenshotNever}); err != nil && !errors.Is(err, actions.ErrInvalid) {
		t.Fatalf("run %s: %v", b, err)
	}
	if err := e.Release(); err != nil {
		t.Fatal(err)
	}
	if s := fd.Stuck(); len(s) != 0 {
		t.Fatalf("run %s left pressed %v", b, s)
	}
}

// FuzzAgentCalls: OpenAI computer_call items, toolset blocks and pyautogui
// code never panic, and whatever translates validates.
func FuzzAgentCalls(f *testing.F) {
	for _, s := range []string{
		openAIPreviewItem, openAIBatchItem, toolsetTurn,
		`pyautogui.click(100, 200); time.sleep(0.5)`, `pyautogui.typewrite(r'a\'b' """c""")`,
		`pyautogui.hotkey('ctrl', 'c')`, `pyautogui.click((1, 2), clicks=2)`, `"x`, `pyautogui.press(['a'`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		if oc, err := TranslateOpenAICall([]byte(input)); err == nil {
			checkActions(t, oc.Actions)
		} else if !errors.Is(err, actions.ErrInvalid) {
			t.Fatalf("openai call %q: %v", input, err)
		}
		if acts, err := TranslateToolset("key", []byte(input)); err == nil {
			checkActions(t, acts)
		} else if !errors.Is(err, actions.ErrInvalid) {
			t.Fatalf("toolset %q: %v", input, err)
		}
		if acts, err := TranslatePyautogui(input); err == nil {
			checkActions(t, acts)
		} else if !errors.Is(err, ErrNotHostPlayable) {
			t.Fatalf("pyautogui %q: %v", input, err)
		}
	})
}
