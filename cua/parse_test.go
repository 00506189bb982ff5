package cua

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

func key(t *testing.T, name string) actions.Key {
	t.Helper()
	k, err := actions.ParseKey(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pt(x, y int) *actions.Point { return &actions.Point{X: x, Y: y} }

func acts(a ...actions.Action) op { return inputOp{a} }

// The requests are what Cua's client (computer/interface/generic.py @
// b296ec9) sends for each method; the ops are what deskfarm plays.
func TestParseInput(t *testing.T) {
	cases := []struct {
		command, params string
		want            op
	}{
		{"left_click", `{"x": 10, "y": 20}`, acts(actions.Click{At: pt(10, 20), Button: actions.ButtonLeft, Count: 1})},
		// The client always sends both keys, null when the caller gave none.
		{"left_click", `{"x": null, "y": null}`, acts(actions.Click{Button: actions.ButtonLeft, Count: 1})},
		{"click", `{"x": 1.6, "y": 2.4}`, acts(actions.Click{At: pt(2, 2), Button: actions.ButtonLeft, Count: 1})},
		{"right_click", `{"x": 5, "y": 6}`, acts(actions.Click{At: pt(5, 6), Button: actions.ButtonRight, Count: 1})},
		{"double_click", `{"x": 5, "y": 6}`, acts(actions.Click{At: pt(5, 6), Button: actions.ButtonLeft, Count: 2})},
		// Only one coordinate: Cua's server clicks where the pointer is.
		{"double_click", `{"x": 5}`, acts(actions.Click{Button: actions.ButtonLeft, Count: 2})},
		{"move_cursor", `{"x": 7, "y": 8}`, acts(actions.Move{To: actions.Point{X: 7, Y: 8}})},
		{"mouse_down", `{"x": 1, "y": 2, "button": "right"}`, acts(actions.ButtonDown{At: pt(1, 2), Button: actions.ButtonRight})},
		{"mouse_up", `{"x": null, "y": null, "button": "left"}`, acts(actions.ButtonUp{Button: actions.ButtonLeft})},
		// Cua's Linux server takes any other button name as left.
		{"mouse_down", `{"button": "x1"}`, acts(actions.ButtonDown{Button: actions.ButtonLeft})},
		{"drag_to", `{"x": 30, "y": 40, "button": "left", "duration": 0.5}`, acts(actions.Drag{To: actions.Point{X: 30, Y: 40}, Button: actions.ButtonLeft})},
		{"drag", `{"path": [[1, 2], [3, 4], [5, 6]], "button": "middle", "duration": 0.5}`,
			acts(actions.Drag{From: pt(1, 2), Via: []actions.Point{{X: 3, Y: 4}}, To: actions.Point{X: 5, Y: 6}, Button: actions.ButtonMiddle})},
		{"drag", `{"path": [[1, 2], [5, 6]]}`, acts(actions.Drag{From: pt(1, 2), To: actions.Point{X: 5, Y: 6}, Button: actions.ButtonLeft})},
		// scroll counts wheel clicks, y > 0 up; horizontal goes through the guest.
		{"scroll", `{"x": 0, "y": 3}`, acts(actions.Scroll{Direction: actions.ScrollUp, Amount: 3})},
		{"scroll", `{"x": 0, "y": -2}`, acts(actions.Scroll{Direction: actions.ScrollDown, Amount: 2})},
		{"scroll", `{"x": 4, "y": 0}`, acts(actions.Scroll{Direction: actions.ScrollRight, Amount: 4})},
		{"scroll", `{"x": -1, "y": 1}`, acts(actions.Scroll{Direction: actions.ScrollUp, Amount: 1}, actions.Scroll{Direction: actions.ScrollLeft, Amount: 1})},
		{"scroll", `{"x": 0, "y": -500}`, acts(actions.Scroll{Direction: actions.ScrollDown, Amount: actions.MaxScrollAmount})},
		{"scroll", `{"x": 0, "y": 0}`, inputOp{}},
		{"scroll_up", `{"clicks": 2}`, acts(actions.Scroll{Direction: actions.ScrollUp, Amount: 2})},
		{"scroll_down", `{}`, acts(actions.Scroll{Direction: actions.ScrollDown, Amount: 1})},
		{"scroll_direction", `{"direction": "left", "clicks": 1}`, acts(actions.Scroll{Direction: actions.ScrollLeft, Amount: actions.MaxScrollAmount})},
		{"scroll_direction", `{"direction": "Down", "clicks": 3}`, acts(actions.Scroll{Direction: actions.ScrollDown, Amount: 3})},
		{"type_text", `{"text": "echo hi\n"}`, acts(actions.TypeText{Text: "echo hi\n"})},
		{"type", `{"text": ""}`, inputOp{}},
		{"type_text", `{"text": "Grüße"}`, acts(actions.TypeText{Text: "Grüße"})},
	}
	for _, c := range cases {
		got, err := parse(c.command, json.RawMessage(c.params), "/home/user")
		if err != nil {
			t.Errorf("%s %s: %v", c.command, c.params, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s:\n got %#v\nwant %#v", c.command, c.params, got, c.want)
		}
	}
}

func TestParseKeys(t *testing.T) {
	cases := []struct {
		command, params string
		want            op
	}{
		// Cua's Key enum values (models.py) and pynput attribute names.
		{"press_key", `{"key": "enter"}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "Return")}})},
		{"key", `{"key": "pagedown"}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "Page_Down")}})},
		{"press_key", `{"key": "page_down"}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "Page_Down")}})},
		{"press_key", `{"key": "del"}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "Delete")}})},
		{"press_key", `{"key": "A"}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "A")}})},
		{"key_down", `{"key": "cmd_l"}`, acts(actions.KeyDown{Keys: []actions.Key{key(t, "Super_L")}})},
		{"key_up", `{"key": "win"}`, acts(actions.KeyUp{Keys: []actions.Key{key(t, "Super_L")}})},
		{"key_down", `{"key": "ctrl_l"}`, acts(actions.KeyDown{Keys: []actions.Key{key(t, "Control_L")}})},
		{"press_key", `{"key": "media_volume_up"}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "XF86AudioRaiseVolume")}})},
		{"hotkey", `{"keys": ["ctrl", "alt", "t"]}`, acts(actions.KeyPress{Keys: []actions.Key{key(t, "Control_L"), key(t, "Alt_L"), key(t, "t")}})},
	}
	for _, c := range cases {
		got, err := parse(c.command, json.RawMessage(c.params), "/home/user")
		if err != nil {
			t.Errorf("%s %s: %v", c.command, c.params, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s:\n got %#v\nwant %#v", c.command, c.params, got, c.want)
		}
	}
}

// Long ASCII text is split into actions the executor accepts.
func TestParseTypeTextChunks(t *testing.T) {
	text := strings.Repeat("abc", actions.MaxTextRunes) // 3 chunks
	raw, _ := json.Marshal(map[string]string{"text": text})
	got, err := parse("type_text", raw, "/home/user")
	if err != nil {
		t.Fatal(err)
	}
	in := got.(inputOp)
	var joined string
	for _, a := range in.acts {
		tt := a.(actions.TypeText)
		if err := tt.Validate(); err != nil {
			t.Fatalf("chunk refused: %v", err)
		}
		joined += tt.Text
	}
	if len(in.acts) != 3 || joined != text {
		t.Fatalf("%d chunks, text kept: %v", len(in.acts), joined == text)
	}
}

func TestParseGuestCommands(t *testing.T) {
	cases := []struct {
		command, params string
		want            op
	}{
		{"run_command", `{"command": "ls -la"}`, shellOp{command: "ls -la", timeout: DefaultCommandTimeout}},
		{"shell", `{"command": "true", "timeout": 2.5}`, shellOp{command: "true", timeout: 2500 * time.Millisecond}},
		{"file_exists", `{"path": "/etc/hostname"}`, fileOp{kind: fileExists, path: "/etc/hostname", length: -1}},
		{"directory_exists", `{"path": "~"}`, fileOp{kind: dirExists, path: "/home/user", length: -1}},
		{"ls", `{"path": "~/Desktop"}`, fileOp{kind: listDir, path: "/home/user/Desktop", length: -1}},
		{"read_file", `{"path": "notes.txt"}`, fileOp{kind: readText, path: "/home/user/notes.txt", length: -1}},
		{"write_text", `{"path": "/tmp/a", "content": "hé"}`, fileOp{kind: writeText, path: "/tmp/a", data: []byte("hé"), length: -1}},
		{"read_bytes", `{"path": "/tmp/a", "offset": 3, "length": null}`, fileOp{kind: readBytes, path: "/tmp/a", offset: 3, length: -1}},
		{"read_bytes", `{"path": "/tmp/a", "offset": 0, "length": 10}`, fileOp{kind: readBytes, path: "/tmp/a", length: 10}},
		{"write_bytes", `{"path": "/tmp/b", "content_b64": "AAEC", "append": true}`, fileOp{kind: writeBytes, path: "/tmp/b", data: []byte{0, 1, 2}, append: true, length: -1}},
		{"get_file_size", `{"path": "/tmp/b"}`, fileOp{kind: fileSize, path: "/tmp/b", length: -1}},
		{"rm", `{"path": "/tmp/b"}`, fileOp{kind: deleteFile, path: "/tmp/b", length: -1}},
		{"mkdir", `{"path": "/tmp/d"}`, fileOp{kind: createDir, path: "/tmp/d", length: -1}},
		{"rmdir", `{"path": "/tmp/d"}`, fileOp{kind: deleteDir, path: "/tmp/d", length: -1}},
		{"copy_to_clipboard", ``, clipboardGetOp{}},
		{"set_clipboard", `{"text": "x"}`, acts(actions.ClipboardSet{Text: "x"})},
		{"launch", `{"app": "xterm", "args": ["-e", "top"]}`, launchOp{app: "xterm", args: []string{"-e", "top"}}},
		{"launch", `{"app": "lxterminal --title x", "args": null}`, launchOp{app: "lxterminal --title x"}},
		{"screenshot", `null`, screenshotOp{format: player.FormatPNG}},
		{"screenshot", `{"format": "JPG", "quality": 120}`, screenshotOp{format: player.FormatJPEG, quality: 95}},
		{"version", `{}`, versionOp{}},
		{"get_screen_size", `{}`, screenSizeOp{}},
		{"get_cursor_position", `{}`, cursorOp{}},
		{"get_accessibility_tree", `{}`, treeOp{}},
		{"find_element", `{}`, unsupportedOp{command: "find_element"}},
		{"maximize_window", `{"window_id": 3}`, unsupportedOp{command: "maximize_window"}},
		{"get_current_window_id", `{}`, windowOp{command: "get_current_window_id"}},
		{"get_application_windows", `{"app": "Terminal"}`, windowOp{command: "get_application_windows", app: "Terminal"}},
		{"get_window_name", `{"window_id": 4194311}`, windowOp{command: "get_window_name", id: "4194311"}},
		{"activate_window", `{"window_id": "0x400007"}`, windowOp{command: "activate_window", id: "4194311"}},
		{"set_window_size", `{"window_id": 7, "width": 640, "height": 480}`, windowOp{command: "set_window_size", id: "7", a: 640, b: 480}},
		{"set_window_position", `{"window_id": 7, "x": 10, "y": 20}`, windowOp{command: "set_window_position", id: "7", a: 10, b: 20}},
		{"authenticate", `{"api_key": "k", "container_name": "c"}`, authOp{}},
	}
	for _, c := range cases {
		got, err := parse(c.command, json.RawMessage(c.params), "/home/user")
		if err != nil {
			t.Errorf("%s %s: %v", c.command, c.params, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %s:\n got %#v\nwant %#v", c.command, c.params, got, c.want)
		}
	}
}

// Errors read as Cua's server words them where a client may show them.
func TestParseErrors(t *testing.T) {
	cases := []struct {
		command, params, want string
		unknown               bool
	}{
		{"get_active_window_bounds", `{}`, "Unknown command: get_active_window_bounds. Did you mean: get_accessibility_tree, get_application_windows, get_current_window_id, get_cursor_position, get_file_size?", true},
		{"frobnicate", `{}`, "Unknown command: frobnicate", true},
		{"press_key", `{"key": "hyperdrive"}`, "Unknown key: hyperdrive", false},
		{"hotkey", `{"keys": ["ctrl", "nope"]}`, "Unknown key in hotkey: nope", false},
		{"move_cursor", `{"x": 1}`, `move_cursor() missing required param "y"`, false},
		{"left_click", `{"x": "a", "y": 1}`, `left_click: param "x" must be`, false},
		{"drag", `{"path": []}`, "Path is empty", false},
		{"drag", `{"path": [[1]]}`, "drag: path[0] must be [x, y]", false},
		{"scroll_direction", `{"direction": "sideways"}`, "Invalid direction: sideways", false},
		{"screenshot", `{"format": "gif"}`, `Unsupported screenshot format "gif"`, false},
		{"write_bytes", `{"path": "/a", "content_b64": "!!"}`, "write_bytes: content_b64: illegal base64", false},
		{"read_text", `{}`, `read_text() missing required param "path"`, false},
		{"run_command", `{"command": "x", "timeout": -1}`, "run_command: timeout must be in", false},
		{"get_window_name", `{}`, `get_window_name() missing required param "window_id"`, false},
		{"get_window_name", `{"window_id": "main"}`, `get_window_name: window_id "main" is not an X window id`, false},
		{"set_window_size", `{"window_id": 1, "width": 5}`, `set_window_size() missing required param "height"`, false},
	}
	for _, c := range cases {
		_, err := parse(c.command, json.RawMessage(c.params), "/home/user")
		if err == nil {
			t.Errorf("%s %s: no error", c.command, c.params)
			continue
		}
		if !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s %s: error %q, want it to start with %q", c.command, c.params, err, c.want)
		}
		if errors.Is(err, errUnknownCommand) != c.unknown {
			t.Errorf("%s: unknown command = %v, want %v", c.command, !c.unknown, c.unknown)
		}
	}
}

// Every served command lists its params for GET /commands, and only them.
func TestCommandParamsListed(t *testing.T) {
	for name := range commands {
		if _, ok := params[name]; !ok {
			t.Errorf("command %s has no params entry", name)
		}
	}
	for name := range params {
		if _, ok := commands[name]; !ok {
			t.Errorf("params lists %s, which is not served", name)
		}
	}
	info := commandList()["commands"].(map[string]commandInfo)["read_bytes"]
	if len(info.Params) != 3 || !info.Params[0].Required || info.Params[1].Default != 0 || info.Params[2].Default != nil {
		t.Errorf("read_bytes params: %+v", info.Params)
	}
}
