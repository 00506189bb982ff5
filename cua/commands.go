package cua

import "strings"

// params lists each served command's params as Cua's handlers declare them
// ("name" required, "name=default" optional; defaults in Python's terms),
// for GET /commands.
var params = map[string]string{
	"version": "", "get_screen_size": "", "get_cursor_position": "",
	"screenshot":   "format=png quality=95",
	"left_click":   "x=None y=None",
	"right_click":  "x=None y=None",
	"double_click": "x=None y=None",
	"move_cursor":  "x y",
	"mouse_down":   "x=None y=None button=left",
	"mouse_up":     "x=None y=None button=left",
	"drag_to":      "x y button=left duration=0.5",
	"drag":         "path button=left duration=0.5",
	"scroll":       "x y", "scroll_up": "clicks=1", "scroll_down": "clicks=1",
	"scroll_direction": "direction clicks=1",
	"key_down":         "key", "key_up": "key", "press_key": "key", "hotkey": "keys",
	"type_text":   "text",
	"run_command": "command timeout=None",
	"file_exists": "path", "directory_exists": "path", "list_dir": "path",
	"read_text": "path", "write_text": "path content",
	"read_bytes":    "path offset=0 length=None",
	"write_bytes":   "path content_b64 append=False",
	"get_file_size": "path", "delete_file": "path", "create_dir": "path", "delete_dir": "path",
	"copy_to_clipboard": "", "set_clipboard": "text", "get_accessibility_tree": "",
	"launch": "app args=None",
}

// paramInfo is one param in GET /commands (main.py list_commands).
type paramInfo struct {
	Name     string `json:"name"`
	Required bool   `json:"required"`
	Default  any    `json:"default"`
}

type commandInfo struct {
	Params  []paramInfo `json:"params"`
	Aliases []string    `json:"aliases,omitempty"`
}

// commandList is the answer of GET /commands: the served commands only.
func commandList() map[string]any {
	cmds := map[string]commandInfo{}
	for name := range commands {
		info := commandInfo{Params: []paramInfo{}}
		for _, p := range strings.Fields(params[name]) {
			n, def, opt := strings.Cut(p, "=")
			pi := paramInfo{Name: n, Required: !opt}
			if opt {
				pi.Default = pyValue(def)
			}
			info.Params = append(info.Params, pi)
		}
		for a, c := range aliases {
			if c == name {
				info.Aliases = append(info.Aliases, a)
			}
		}
		cmds[name] = info
	}
	return map[string]any{"commands": cmds, "aliases": aliases}
}

// pyValue is a default as JSON would carry Python's value.
func pyValue(s string) any {
	switch s {
	case "None":
		return nil
	case "False":
		return false
	case "True":
		return true
	case "0":
		return 0
	case "1":
		return 1
	case "95":
		return 95
	case "0.5":
		return 0.5
	}
	return s
}
