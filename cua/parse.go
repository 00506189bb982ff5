package cua

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// op is one parsed command: what to do, with nothing done yet. parse makes
// ops from requests; Handler.do carries them out.
type op interface{ isOp() }

type (
	versionOp    struct{}
	screenSizeOp struct{}
	cursorOp     struct{}
	// inputOp plays actions through the VM's desk at native screen
	// pixels, as every other vocabulary's actions are played: text the VNC
	// keyboard cannot carry, horizontal wheel clicks and the clipboard go
	// through the desk's guest input path.
	inputOp      struct{ acts []actions.Action }
	screenshotOp struct {
		format  player.ImageFormat
		quality int // JPEG only
	}
	shellOp struct {
		command string
		timeout time.Duration
	}
	fileOp struct {
		kind   fileKind
		path   string // absolute, ~ and relative paths resolved
		data   []byte // write_text, write_bytes
		append bool   // write_bytes
		offset int64  // read_bytes
		length int64  // read_bytes; < 0 reads to the end
	}
	// clipboardGetOp reads the clipboard (an actions.ClipboardGet).
	clipboardGetOp struct{}
	// treeOp reads the desktop's accessibility tree (package atspi).
	treeOp   struct{}
	launchOp struct {
		app  string
		args []string // nil: app is a shell string
	}
	// unsupportedOp is a command of Cua's that deskfarm does not serve.
	unsupportedOp struct{ command string }
	// authOp is the websocket's authenticate handshake.
	authOp struct{}
)

func (versionOp) isOp()      {}
func (screenSizeOp) isOp()   {}
func (cursorOp) isOp()       {}
func (inputOp) isOp()        {}
func (screenshotOp) isOp()   {}
func (shellOp) isOp()        {}
func (fileOp) isOp()         {}
func (clipboardGetOp) isOp() {}
func (treeOp) isOp()         {}
func (launchOp) isOp()       {}
func (unsupportedOp) isOp()  {}
func (authOp) isOp()         {}

// fileKind names a file command.
type fileKind string

const (
	fileExists   fileKind = "file_exists"
	dirExists    fileKind = "directory_exists"
	listDir      fileKind = "list_dir"
	readText     fileKind = "read_text"
	writeText    fileKind = "write_text"
	readBytes    fileKind = "read_bytes"
	writeBytes   fileKind = "write_bytes"
	fileSize     fileKind = "get_file_size"
	deleteFile   fileKind = "delete_file"
	createDir    fileKind = "create_dir"
	deleteDir    fileKind = "delete_dir"
	maxTextChunk          = actions.MaxTextRunes
)

// DefaultCommandTimeout bounds a run_command that names no timeout: Cua's
// server has none, and its client gives up on an HTTP answer after aiohttp's
// default 300 s.
const DefaultCommandTimeout = 300 * time.Second

// MaxCommandTimeout bounds run_command's timeout (api.MaxExecTimeout).
const MaxCommandTimeout = 3600 * time.Second

// aliases are Cua's command aliases (main.py COMMAND_ALIASES).
var aliases = map[string]string{
	"type": "type_text", "key": "press_key", "tap": "left_click", "click": "left_click",
	"shell": "run_command", "exec": "run_command", "read_file": "read_text",
	"write_file": "write_text", "ls": "list_dir", "mkdir": "create_dir",
	"rm": "delete_file", "rmdir": "delete_dir",
}

// parser turns one command's params into an op. home resolves relative
// paths.
type parser func(p json.RawMessage, home string) (op, error)

// commands are the commands served, by canonical name.
var commands = map[string]parser{
	"version":                func(json.RawMessage, string) (op, error) { return versionOp{}, nil },
	"get_screen_size":        func(json.RawMessage, string) (op, error) { return screenSizeOp{}, nil },
	"get_cursor_position":    func(json.RawMessage, string) (op, error) { return cursorOp{}, nil },
	"screenshot":             parseScreenshot,
	"left_click":             clickParser(actions.ButtonLeft, 1),
	"right_click":            clickParser(actions.ButtonRight, 1),
	"double_click":           clickParser(actions.ButtonLeft, 2),
	"move_cursor":            parseMove,
	"mouse_down":             buttonParser(true),
	"mouse_up":               buttonParser(false),
	"drag_to":                parseDragTo,
	"drag":                   parseDrag,
	"scroll":                 parseScroll,
	"scroll_up":              clicksParser(actions.ScrollUp),
	"scroll_down":            clicksParser(actions.ScrollDown),
	"scroll_direction":       parseScrollDirection,
	"key_down":               keyParser("key_down", func(k actions.Key) actions.Action { return actions.KeyDown{Keys: []actions.Key{k}} }),
	"key_up":                 keyParser("key_up", func(k actions.Key) actions.Action { return actions.KeyUp{Keys: []actions.Key{k}} }),
	"press_key":              keyParser("press_key", func(k actions.Key) actions.Action { return actions.KeyPress{Keys: []actions.Key{k}} }),
	"hotkey":                 parseHotkey,
	"type_text":              parseTypeText,
	"run_command":            parseShell,
	"file_exists":            pathParser(fileExists),
	"directory_exists":       pathParser(dirExists),
	"list_dir":               pathParser(listDir),
	"read_text":              pathParser(readText),
	"get_file_size":          pathParser(fileSize),
	"delete_file":            pathParser(deleteFile),
	"create_dir":             pathParser(createDir),
	"delete_dir":             pathParser(deleteDir),
	"write_text":             parseWriteText,
	"read_bytes":             parseReadBytes,
	"write_bytes":            parseWriteBytes,
	"copy_to_clipboard":      func(json.RawMessage, string) (op, error) { return clipboardGetOp{}, nil },
	"get_accessibility_tree": func(json.RawMessage, string) (op, error) { return treeOp{}, nil },
	"set_clipboard":          parseSetClipboard,
	"launch":                 parseLaunch,
}

// unsupported are Cua's commands that deskfarm knows and does not serve.
var unsupported = []string{
	"find_element", "diorama_cmd", "get_desktop_environment",
	"set_wallpaper", "open", "maximize_window", "close_window",
}

// errUnknownCommand marks a command nobody serves; HTTP answers it with 400.
var errUnknownCommand = errors.New("unknown command")

// parse resolves a command (aliases included) and its params. An unknown
// command is an error wrapping errUnknownCommand, worded as Cua words it.
// Params the command does not take are ignored, as Cua's server drops them.
func parse(command string, params json.RawMessage, home string) (op, error) {
	name := command
	if c, ok := aliases[name]; ok {
		name = c
	}
	if p, ok := commands[name]; ok {
		if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
			params = json.RawMessage("{}")
		}
		return p(params, home)
	}
	for _, u := range unsupported {
		if u == name {
			return unsupportedOp{command: name}, nil
		}
	}
	if name == "authenticate" {
		return authOp{}, nil
	}
	msg := "Unknown command: " + name
	if s := suggest(name); len(s) > 0 {
		msg += ". Did you mean: " + strings.Join(s, ", ") + "?"
	}
	return nil, fmt.Errorf("%s: %w", msg, errUnknownCommand)
}

// suggest lists up to five known names that start with the same two
// letters or contain name, as Cua's _suggest_similar_commands does.
func suggest(name string) []string {
	var all []string
	for c := range commands {
		all = append(all, c)
	}
	for a := range aliases {
		all = append(all, a)
	}
	sort.Strings(all)
	low := strings.ToLower(name)
	prefix := low
	if len(prefix) > 2 {
		prefix = prefix[:2]
	}
	var out []string
	for _, c := range all {
		if strings.HasPrefix(c, prefix) || (low != "" && strings.Contains(c, low)) {
			out = append(out, c)
			if len(out) == 5 {
				break
			}
		}
	}
	return out
}

// decode reads params into v; a type mismatch names the param.
func decode(command string, p json.RawMessage, v any) error {
	if err := json.Unmarshal(p, v); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return fmt.Errorf("%s: param %q must be %s, got %s", command, te.Field, te.Type, te.Value)
		}
		return fmt.Errorf("%s: params: %w", command, err)
	}
	return nil
}

func missing(command, param string) error {
	return fmt.Errorf("%s() missing required param %q", command, param)
}

// pixel rounds a coordinate to a screen pixel.
func pixel(command, name string, v float64) (int, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1<<20 {
		return 0, fmt.Errorf("%s: %s=%v is not a screen coordinate", command, name, v)
	}
	return int(math.Round(v)), nil
}

// optPoint is Cua's optional x, y: a point only when both are given.
func optPoint(command string, x, y *float64) (*actions.Point, error) {
	if x == nil || y == nil {
		return nil, nil
	}
	return point(command, *x, *y)
}

func point(command string, x, y float64) (*actions.Point, error) {
	px, err := pixel(command, "x", x)
	if err != nil {
		return nil, err
	}
	py, err := pixel(command, "y", y)
	if err != nil {
		return nil, err
	}
	return &actions.Point{X: px, Y: py}, nil
}

// button is Cua's Linux rule: left, right or middle, anything else left.
func button(name string) actions.Button {
	switch name {
	case "right":
		return actions.ButtonRight
	case "middle":
		return actions.ButtonMiddle
	}
	return actions.ButtonLeft
}

type xyParams struct {
	X *float64 `json:"x"`
	Y *float64 `json:"y"`
}

func clickParser(b actions.Button, count int) parser {
	name := map[actions.Button]string{actions.ButtonLeft: "left_click", actions.ButtonRight: "right_click"}[b]
	if count == 2 {
		name = "double_click"
	}
	return func(raw json.RawMessage, _ string) (op, error) {
		var p xyParams
		if err := decode(name, raw, &p); err != nil {
			return nil, err
		}
		at, err := optPoint(name, p.X, p.Y)
		if err != nil {
			return nil, err
		}
		return inputOp{[]actions.Action{actions.Click{At: at, Button: b, Count: count}}}, nil
	}
}

func parseMove(raw json.RawMessage, _ string) (op, error) {
	var p xyParams
	if err := decode("move_cursor", raw, &p); err != nil {
		return nil, err
	}
	if p.X == nil {
		return nil, missing("move_cursor", "x")
	}
	if p.Y == nil {
		return nil, missing("move_cursor", "y")
	}
	to, err := point("move_cursor", *p.X, *p.Y)
	if err != nil {
		return nil, err
	}
	return inputOp{[]actions.Action{actions.Move{To: *to}}}, nil
}

func buttonParser(down bool) parser {
	name := "mouse_up"
	if down {
		name = "mouse_down"
	}
	return func(raw json.RawMessage, _ string) (op, error) {
		var p struct {
			xyParams
			Button string `json:"button"`
		}
		if err := decode(name, raw, &p); err != nil {
			return nil, err
		}
		at, err := optPoint(name, p.X, p.Y)
		if err != nil {
			return nil, err
		}
		if down {
			return inputOp{[]actions.Action{actions.ButtonDown{At: at, Button: button(p.Button)}}}, nil
		}
		return inputOp{[]actions.Action{actions.ButtonUp{At: at, Button: button(p.Button)}}}, nil
	}
}

// parseDragTo drags from where the pointer is to x, y. duration is ignored:
// the executor moves in small paced steps, as a person's drag would.
func parseDragTo(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		xyParams
		Button string `json:"button"`
	}
	if err := decode("drag_to", raw, &p); err != nil {
		return nil, err
	}
	if p.X == nil {
		return nil, missing("drag_to", "x")
	}
	if p.Y == nil {
		return nil, missing("drag_to", "y")
	}
	to, err := point("drag_to", *p.X, *p.Y)
	if err != nil {
		return nil, err
	}
	return inputOp{[]actions.Action{actions.Drag{To: *to, Button: button(p.Button)}}}, nil
}

// parseDrag drags along path ([[x, y], ...]): pressed at the first point,
// released at the last.
func parseDrag(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Path   *[][]float64 `json:"path"`
		Button string       `json:"button"`
	}
	if err := decode("drag", raw, &p); err != nil {
		return nil, err
	}
	if p.Path == nil {
		return nil, missing("drag", "path")
	}
	path := *p.Path
	if len(path) == 0 {
		return nil, errors.New("Path is empty")
	}
	if len(path) > actions.MaxDragVia+2 {
		return nil, fmt.Errorf("drag: path has %d points, at most %d", len(path), actions.MaxDragVia+2)
	}
	pts := make([]actions.Point, len(path))
	for i, xy := range path {
		if len(xy) != 2 {
			return nil, fmt.Errorf("drag: path[%d] must be [x, y], got %d numbers", i, len(xy))
		}
		pt, err := point("drag", xy[0], xy[1])
		if err != nil {
			return nil, err
		}
		pts[i] = *pt
	}
	d := actions.Drag{From: &pts[0], To: pts[len(pts)-1], Button: button(p.Button)}
	if len(pts) > 2 {
		d.Via = pts[1 : len(pts)-1]
	}
	return inputOp{[]actions.Action{d}}, nil
}

// wheel caps an amount of wheel clicks at actions.MaxScrollAmount: Cua's
// agent passes a model's raw amounts, and scroll_direction sends 300 per
// click sideways.
func wheel(n int) int {
	if n < 0 {
		n = -n
	}
	return min(n, actions.MaxScrollAmount)
}

// scrollOp turns wheel clicks (y > 0 up, x > 0 right, pynput's sense) into
// scroll actions where the pointer is: vertical first, then horizontal
// (which the desk clicks through the guest, as QEMU's VNC drops X buttons
// 6 and 7). A scroll of 0, 0 does nothing.
func scrollOp(x, y int) op {
	var acts []actions.Action
	switch {
	case y > 0:
		acts = append(acts, actions.Scroll{Direction: actions.ScrollUp, Amount: wheel(y)})
	case y < 0:
		acts = append(acts, actions.Scroll{Direction: actions.ScrollDown, Amount: wheel(y)})
	}
	switch {
	case x > 0:
		acts = append(acts, actions.Scroll{Direction: actions.ScrollRight, Amount: wheel(x)})
	case x < 0:
		acts = append(acts, actions.Scroll{Direction: actions.ScrollLeft, Amount: wheel(x)})
	}
	return inputOp{acts}
}

func parseScroll(raw json.RawMessage, _ string) (op, error) {
	var p xyParams
	if err := decode("scroll", raw, &p); err != nil {
		return nil, err
	}
	if p.X == nil {
		return nil, missing("scroll", "x")
	}
	if p.Y == nil {
		return nil, missing("scroll", "y")
	}
	x, err := pixel("scroll", "x", *p.X)
	if err != nil {
		return nil, err
	}
	y, err := pixel("scroll", "y", *p.Y)
	if err != nil {
		return nil, err
	}
	return scrollOp(x, y), nil
}

type clicksParams struct {
	Clicks *int `json:"clicks"`
}

func (p clicksParams) n() int {
	if p.Clicks == nil {
		return 1
	}
	return *p.Clicks
}

func clicksParser(d actions.Direction) parser {
	name := "scroll_" + string(d)
	return func(raw json.RawMessage, _ string) (op, error) {
		var p clicksParams
		if err := decode(name, raw, &p); err != nil {
			return nil, err
		}
		n := wheel(p.n())
		if d == actions.ScrollDown {
			n = -n
		}
		return scrollOp(0, n), nil
	}
}

func parseScrollDirection(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Direction *string `json:"direction"`
		clicksParams
	}
	if err := decode("scroll_direction", raw, &p); err != nil {
		return nil, err
	}
	if p.Direction == nil {
		return nil, missing("scroll_direction", "direction")
	}
	n := wheel(p.n())
	switch strings.ToLower(*p.Direction) {
	case "up":
		return scrollOp(0, n), nil
	case "down":
		return scrollOp(0, -n), nil
	case "left":
		return scrollOp(-300*n, 0), nil
	case "right":
		return scrollOp(300*n, 0), nil
	}
	return nil, fmt.Errorf("Invalid direction: %s. Use 'up', 'down', 'left', or 'right'.", *p.Direction)
}

func keyParser(name string, mk func(actions.Key) actions.Action) parser {
	return func(raw json.RawMessage, _ string) (op, error) {
		var p struct {
			Key *string `json:"key"`
		}
		if err := decode(name, raw, &p); err != nil {
			return nil, err
		}
		if p.Key == nil {
			return nil, missing(name, "key")
		}
		k, err := parseKey(*p.Key)
		if err != nil {
			return nil, err
		}
		return inputOp{[]actions.Action{mk(k)}}, nil
	}
}

// parseHotkey holds all keys but the last, taps the last and releases the
// rest in reverse: a chord.
func parseHotkey(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Keys *[]string `json:"keys"`
	}
	if err := decode("hotkey", raw, &p); err != nil {
		return nil, err
	}
	if p.Keys == nil {
		return nil, missing("hotkey", "keys")
	}
	if len(*p.Keys) == 0 {
		return nil, errors.New("hotkey: keys is empty")
	}
	if len(*p.Keys) > actions.MaxChordKeys {
		return nil, fmt.Errorf("hotkey: %d keys, at most %d", len(*p.Keys), actions.MaxChordKeys)
	}
	keys := make([]actions.Key, len(*p.Keys))
	for i, n := range *p.Keys {
		k, err := parseKey(n)
		if err != nil {
			return nil, fmt.Errorf("Unknown key in hotkey: %s", n)
		}
		keys[i] = k
	}
	return inputOp{[]actions.Action{actions.KeyPress{Keys: keys}}}, nil
}

// parseTypeText types text through the desk in chunks of at most
// actions.MaxTextRunes characters: ASCII as VNC keys, any other text pasted
// in the guest's session byte for byte (actions.TypeText).
func parseTypeText(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Text *string `json:"text"`
	}
	if err := decode("type_text", raw, &p); err != nil {
		return nil, err
	}
	if p.Text == nil {
		return nil, missing("type_text", "text")
	}
	text := *p.Text
	if !utf8.ValidString(text) {
		return nil, errors.New("type_text: text is not valid UTF-8")
	}
	var acts []actions.Action
	for text != "" {
		n, runes := 0, 0
		for n < len(text) && runes < maxTextChunk {
			_, size := utf8.DecodeRuneInString(text[n:])
			n += size
			runes++
		}
		acts = append(acts, actions.TypeText{Text: text[:n]})
		text = text[n:]
	}
	if len(acts) > actions.MaxActions {
		return nil, fmt.Errorf("type_text: %d characters, at most %d", utf8.RuneCountInString(*p.Text), actions.MaxActions*maxTextChunk)
	}
	return inputOp{acts}, nil
}

func parseScreenshot(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Format  *string `json:"format"`
		Quality *int    `json:"quality"`
	}
	if err := decode("screenshot", raw, &p); err != nil {
		return nil, err
	}
	f := "png"
	if p.Format != nil {
		f = strings.ToLower(*p.Format)
	}
	q := 95
	if p.Quality != nil {
		q = max(1, min(95, *p.Quality))
	}
	switch f {
	case "png":
		return screenshotOp{format: player.FormatPNG}, nil
	case "jpeg", "jpg":
		return screenshotOp{format: player.FormatJPEG, quality: q}, nil
	}
	return nil, fmt.Errorf("Unsupported screenshot format %q. Supported: ['jpeg', 'png']", *p.Format)
}

func parseShell(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Command *string  `json:"command"`
		Timeout *float64 `json:"timeout"`
	}
	if err := decode("run_command", raw, &p); err != nil {
		return nil, err
	}
	if p.Command == nil {
		return nil, missing("run_command", "command")
	}
	if strings.ContainsRune(*p.Command, 0) {
		return nil, errors.New("run_command: command contains a NUL byte")
	}
	t := DefaultCommandTimeout
	if p.Timeout != nil {
		if *p.Timeout <= 0 || *p.Timeout > MaxCommandTimeout.Seconds() {
			return nil, fmt.Errorf("run_command: timeout must be in (0, %g] seconds, got %g", MaxCommandTimeout.Seconds(), *p.Timeout)
		}
		t = time.Duration(*p.Timeout * float64(time.Second))
	}
	return shellOp{command: *p.Command, timeout: t}, nil
}

// guestPath resolves a path as Cua's server does (expanduser, then relative
// to its working directory), with the desktop user's home for both.
func guestPath(command string, p *string, home string) (string, error) {
	if p == nil {
		return "", missing(command, "path")
	}
	s := *p
	switch {
	case s == "":
		return "", fmt.Errorf("%s: path is empty", command)
	case strings.ContainsRune(s, 0):
		return "", fmt.Errorf("%s: path contains a NUL byte", command)
	case s == "~":
		s = home
	case strings.HasPrefix(s, "~/"):
		s = home + s[1:]
	case !strings.HasPrefix(s, "/"):
		s = home + "/" + s
	}
	// Path.resolve() drops "." and ".." too (without strict, a missing
	// directory before ".." does not matter).
	return path.Clean(s), nil
}

type pathParams struct {
	Path *string `json:"path"`
}

func pathParser(k fileKind) parser {
	return func(raw json.RawMessage, home string) (op, error) {
		var p pathParams
		if err := decode(string(k), raw, &p); err != nil {
			return nil, err
		}
		path, err := guestPath(string(k), p.Path, home)
		if err != nil {
			return nil, err
		}
		return fileOp{kind: k, path: path, length: -1}, nil
	}
}

func parseWriteText(raw json.RawMessage, home string) (op, error) {
	var p struct {
		pathParams
		Content *string `json:"content"`
	}
	if err := decode("write_text", raw, &p); err != nil {
		return nil, err
	}
	path, err := guestPath("write_text", p.Path, home)
	if err != nil {
		return nil, err
	}
	if p.Content == nil {
		return nil, missing("write_text", "content")
	}
	return fileOp{kind: writeText, path: path, data: []byte(*p.Content), length: -1}, nil
}

func parseReadBytes(raw json.RawMessage, home string) (op, error) {
	var p struct {
		pathParams
		Offset *int64 `json:"offset"`
		Length *int64 `json:"length"`
	}
	if err := decode("read_bytes", raw, &p); err != nil {
		return nil, err
	}
	path, err := guestPath("read_bytes", p.Path, home)
	if err != nil {
		return nil, err
	}
	o := fileOp{kind: readBytes, path: path, length: -1}
	if p.Offset != nil {
		if *p.Offset < 0 {
			return nil, fmt.Errorf("read_bytes: negative seek position %d", *p.Offset)
		}
		o.offset = *p.Offset
	}
	if p.Length != nil && *p.Length >= 0 {
		o.length = *p.Length
	}
	return o, nil
}

func parseWriteBytes(raw json.RawMessage, home string) (op, error) {
	var p struct {
		pathParams
		ContentB64 *string `json:"content_b64"`
		Append     bool    `json:"append"`
	}
	if err := decode("write_bytes", raw, &p); err != nil {
		return nil, err
	}
	path, err := guestPath("write_bytes", p.Path, home)
	if err != nil {
		return nil, err
	}
	if p.ContentB64 == nil {
		return nil, missing("write_bytes", "content_b64")
	}
	data, err := base64.StdEncoding.DecodeString(*p.ContentB64)
	if err != nil {
		return nil, fmt.Errorf("write_bytes: content_b64: %w", err)
	}
	return fileOp{kind: writeBytes, path: path, data: data, append: p.Append, length: -1}, nil
}

func parseSetClipboard(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		Text *string `json:"text"`
	}
	if err := decode("set_clipboard", raw, &p); err != nil {
		return nil, err
	}
	if p.Text == nil {
		return nil, missing("set_clipboard", "text")
	}
	return inputOp{[]actions.Action{actions.ClipboardSet{Text: *p.Text}}}, nil
}

func parseLaunch(raw json.RawMessage, _ string) (op, error) {
	var p struct {
		App  *string  `json:"app"`
		Args []string `json:"args"`
	}
	if err := decode("launch", raw, &p); err != nil {
		return nil, err
	}
	if p.App == nil || *p.App == "" {
		return nil, missing("launch", "app")
	}
	if len(p.Args) == 0 {
		p.Args = nil
	}
	return launchOp{app: *p.App, args: p.Args}, nil
}
