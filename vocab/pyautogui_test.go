package vocab

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// The code below is constructed, not captured: it follows the shapes
// OSWorld's pyautogui-space agents send (/work/shared/research/osworld-api.md
// §2: multi-line code with comments, import time, time.sleep, keyword
// arguments; PromptAgent passes whole code blocks).
func TestTranslatePyautogui(t *testing.T) {
	cases := []struct{ code, want string }{
		{"import pyautogui\npyautogui.click(100, 200)",
			`[{"kind":"click","x":100,"y":200,"button":"left","count":1}]`},
		{"import pyautogui, time\n# open the menu\npyautogui.click(x=640.7, y=12, button='right')\ntime.sleep(0.5)\n",
			`[{"kind":"click","x":640,"y":12,"button":"right","count":1},{"kind":"wait","duration_ms":500}]`},
		{"pyautogui.doubleClick(10, 20); pyautogui.tripleClick(x=1, y=2); pyautogui.rightClick(3, 4); pyautogui.middleClick()",
			`[{"kind":"click","x":10,"y":20,"button":"left","count":2},{"kind":"click","x":1,"y":2,"button":"left","count":3},` +
				`{"kind":"click","x":3,"y":4,"button":"right","count":1},{"kind":"click","button":"middle","count":1}]`},
		{"pyautogui.click((5, 6), clicks=2, interval=0.1)", `[{"kind":"click","x":5,"y":6,"button":"left","count":2}]`},
		{"pyautogui.moveTo(300, 400, duration=1.0, tween=None)\npyautogui.moveRel(-10, 5)",
			`[{"kind":"move","x":300,"y":400},{"kind":"move_by","dx":-10,"dy":5}]`},
		{"pyautogui.mouseDown(10, 10, button='left')\npyautogui.dragTo(200, 10, duration=0.5, mouseDownUp=False)\npyautogui.mouseUp()",
			`[{"kind":"button_down","x":10,"y":10,"button":"left"},{"kind":"move","x":200,"y":10},{"kind":"button_up","button":"left"}]`},
		{"pyautogui.dragTo(500, 300, duration=1.0, button='left')",
			`[{"kind":"drag","x":500,"y":300,"button":"left"}]`},
		{"pyautogui.dragRel(30, 0)",
			`[{"kind":"button_down","button":"left"},{"kind":"move_by","dx":30,"dy":0},{"kind":"button_up","button":"left"}]`},
		{"pyautogui.scroll(-5)\npyautogui.scroll(3, x=100, y=200)\npyautogui.hscroll(2)\npyautogui.vscroll(clicks=-1)",
			`[{"kind":"scroll","direction":"down","amount":5},{"kind":"scroll","x":100,"y":200,"direction":"up","amount":3},` +
				`{"kind":"scroll","direction":"right","amount":2},{"kind":"scroll","direction":"down","amount":1}]`},
		{`pyautogui.typewrite("Hello, world!\n", interval=0.05)`, `[{"kind":"type","text":"Hello, world!\n"}]`},
		{`pyautogui.write('Grüße \u65e5\u672c')`, `[{"kind":"type","text":"Grüße 日本"}]`},
		{`pyautogui.typewrite(['a', 'left', 'enter'])`,
			`[{"kind":"key","keys":["a"]},{"kind":"key","keys":["Left"]},{"kind":"key","keys":["Return"]}]`},
		{`pyautogui.press('enter'); pyautogui.press(['tab', 'Tab'], presses=2)`,
			`[{"kind":"key","keys":["Return"]},{"kind":"key","keys":["Tab"]},{"kind":"key","keys":["Tab"]},` +
				`{"kind":"key","keys":["Tab"]},{"kind":"key","keys":["Tab"]}]`},
		{"pyautogui.hotkey('ctrl', 'shift', 'T')\npyautogui.hotkey(['alt', 'f4'])",
			`[{"kind":"key","keys":["Control_L","Shift_L","T"]},{"kind":"key","keys":["Alt_L","F4"]}]`},
		{"pyautogui.keyDown('shift')\npyautogui.click(\n    50,\n    60,\n)\npyautogui.keyUp('shift')",
			`[{"kind":"key_down","keys":["Shift_L"]},{"kind":"click","x":50,"y":60,"button":"left","count":1},{"kind":"key_up","keys":["Shift_L"]}]`},
		{`pyautogui.typewrite(r'C:\path' "\t" '''x''')`, `[{"kind":"type","text":"C:\\path\tx"}]`},
		{"# nothing to do\n\nimport time\ntime.sleep(0)\n", `null`},
	}
	for _, c := range cases {
		acts, err := TranslatePyautogui(c.code)
		if err != nil {
			t.Errorf("%q: %v", c.code, err)
			continue
		}
		if got := mustJSON(t, acts); got != c.want {
			t.Errorf("%q:\n got %s\nwant %s", c.code, got, c.want)
		}
	}
}

// TestPyautoguiNotHostPlayable: code the host cannot play is reported, with
// the line and the reason, for the caller to run it in the guest.
func TestPyautoguiNotHostPlayable(t *testing.T) {
	for _, c := range []struct{ code, why string }{
		{"import pyautogui\nx, y = pyautogui.locateCenterOnScreen('ok.png')\npyautogui.click(x, y)", "line 2"},
		{"pyautogui.click('button.png')", "image"},
		{"import subprocess\nsubprocess.run(['ls'])", "import of \"subprocess\""},
		{"for i in range(3):\n    pyautogui.press('down')", "line 1"},
		{"pyautogui.click(100)", "x and y go together"},
		{"pyautogui.press('enter'", "expected"},
		{"pyautogui.screenshot('a.png')", "pyautogui.screenshot is not a call"},
		{"pyautogui.typewrite(f'{x}')", "f-strings"},
		{"pyautogui.click(1, 2); import os", "import of \"os\""},
		{"time.sleep(500)", "longer than"},
		{"pyautogui.press('nosuchkey')", "unknown key"},
		{"pyautogui.click(1, 2) pyautogui.click(3, 4)", "unexpected"},
		{"pyperclip.copy('x')", "not an import or a pyautogui call"},
	} {
		_, err := TranslatePyautogui(c.code)
		if !errors.Is(err, ErrNotHostPlayable) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%q: %v, want ErrNotHostPlayable mentioning %q", c.code, err, c.why)
		}
	}
}

// TestPyautoguiThroughDecode: the tool's input is a JSON string or
// {"command": code}; a relative move plays from where the pointer is.
func TestPyautoguiThroughDecode(t *testing.T) {
	f := newFake(320, 200)
	e := newTestExecutor(t, f, player.ScreenshotSize{})
	for _, in := range []string{`"pyautogui.moveTo(10, 10)\npyautogui.moveRel(5, -3)"`, `{"command":"pyautogui.moveTo(10, 10); pyautogui.move(5, -3)"}`} {
		f.Events = nil
		if _, err := decodeRun(t, e, ToolPyautogui, in, ReplyOptions{}); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		checkEvents(t, f.Events, "ptr 10,10 0x00", "ptr 15,7 0x00")
	}
	if _, err := Decode(ToolPyautogui, []byte(`"import os"`)); !errors.Is(err, ErrNotHostPlayable) {
		t.Errorf("not host-playable through Decode: %v", err)
	}
	// A relative move off the screen stops at its edge, as in pyautogui.
	f.Events = nil
	if _, err := decodeRun(t, e, ToolPyautogui, `"pyautogui.moveRel(-1000, 1000)"`, ReplyOptions{}); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, f.Events, "ptr 0,199 0x00")
	_, err := e.Run(context.Background(), []actions.Action{actions.MoveBy{DX: 1}}, noShot)
	if err != nil {
		t.Errorf("move_by after a move: %v", err)
	}
}
