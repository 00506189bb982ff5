package vocab

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/actions"
)

// ErrNotHostPlayable means pyautogui code holds something besides literal
// pyautogui calls, time.sleep, imports and comments (variables, loops, other
// modules, screen queries such as locateOnScreen), or a call deskfarm cannot
// play from the host: the caller runs the code in the guest instead, as
// OSWorld itself does.
var ErrNotHostPlayable = errors.New("code is not host-playable")

// pyautoguiCode reads the pyautogui tool's input: a JSON string of code, or
// {"command": code} (OSWorld's DesktopEnv.step accepts both).
func pyautoguiCode(input json.RawMessage) (string, error) {
	var code string
	if err := json.Unmarshal(input, &code); err == nil {
		return code, nil
	}
	var obj struct {
		Command *string `json:"command"`
	}
	if err := json.Unmarshal(input, &obj); err != nil || obj.Command == nil {
		return "", actions.Invalid("input", nil, `must be a JSON string of Python code, or {"command": code}`)
	}
	return *obj.Command, nil
}

// TranslatePyautogui turns OSWorld pyautogui-action-space code into neutral
// actions when it is only:
//   - import pyautogui / import time (also "import pyautogui, time"),
//     comments, blank lines, statements separated by newlines or ";";
//   - calls with literal arguments (numbers, strings, True/False/None,
//     lists and tuples of them; positional or keyword) of
//     pyautogui.click, doubleClick, tripleClick, rightClick, middleClick,
//     moveTo, moveRel/move, dragTo, dragRel/drag, mouseDown, mouseUp,
//     scroll/vscroll, hscroll, typewrite/write, press, hotkey, keyDown,
//     keyUp, sleep, and time.sleep.
//
// pyautogui's semantics on X11 are kept: coordinates are screen pixels
// (floats truncated), scroll clicks positive up, hscroll positive right,
// typewrite of a list presses the named keys, press repeats presses times.
// Durations and tweens of moves and drags are not replayed (the pointer
// jumps; a drag moves in the executor's steps). pyautogui's own 0.1 s pause
// after each call is not added: the executor paces input itself.
//
// Anything else fails with ErrNotHostPlayable, naming the line and why; the
// caller then runs the code in the guest.
func TranslatePyautogui(code string) ([]actions.Action, error) {
	toks, err := pyTokenize(code)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHostPlayable, err)
	}
	p := &pyParser{toks: toks}
	var acts []actions.Action
	for {
		p.skipSeparators()
		if p.peek().kind == pyEOF {
			break
		}
		line := p.peek().line
		more, err := p.statement()
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrNotHostPlayable, line, err)
		}
		acts = append(acts, more...)
		if len(acts) > actions.MaxActions {
			return nil, fmt.Errorf("%w: more than %d actions", ErrNotHostPlayable, actions.MaxActions)
		}
		if t := p.peek(); t.kind != pyNewline && t.kind != pyEOF && !(t.kind == pyOp && t.text == ";") {
			return nil, fmt.Errorf("%w: line %d: unexpected %q after a statement", ErrNotHostPlayable, t.line, t.text)
		}
	}
	if err := actions.ValidateAll(acts); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotHostPlayable, err)
	}
	return acts, nil
}

// pyValue is a literal argument.
type pyValue struct {
	kind  string // "num", "str", "bool", "none", "list"
	num   float64
	str   string
	b     bool
	items []pyValue
}

type pyParser struct {
	toks []pyToken
	pos  int
}

func (p *pyParser) peek() pyToken { return p.toks[p.pos] }
func (p *pyParser) next() pyToken {
	t := p.toks[p.pos]
	if t.kind != pyEOF {
		p.pos++
	}
	return t
}

func (p *pyParser) skipSeparators() {
	for t := p.peek(); t.kind == pyNewline || (t.kind == pyOp && t.text == ";"); t = p.peek() {
		p.next()
	}
}

func (p *pyParser) expect(op string) error {
	if t := p.next(); t.kind != pyOp || t.text != op {
		return fmt.Errorf("expected %q, got %q", op, t.text)
	}
	return nil
}

// statement parses an import or a call.
func (p *pyParser) statement() ([]actions.Action, error) {
	t := p.next()
	if t.kind != pyName {
		return nil, fmt.Errorf("%q is not an import or a pyautogui call", t.text)
	}
	if t.text == "import" {
		for {
			m := p.next()
			if m.kind != pyName || (m.text != "pyautogui" && m.text != "time") {
				return nil, fmt.Errorf("import of %q: only pyautogui and time are played on the host", m.text)
			}
			if n := p.peek(); n.kind == pyOp && n.text == "," {
				p.next()
				continue
			}
			return nil, nil
		}
	}
	if t.text != "pyautogui" && t.text != "time" {
		return nil, fmt.Errorf("%q is not an import or a pyautogui call", t.text)
	}
	if err := p.expect("."); err != nil {
		return nil, err
	}
	fn := p.next()
	if fn.kind != pyName {
		return nil, fmt.Errorf("expected a function name after %s.", t.text)
	}
	name := t.text + "." + fn.text
	if err := p.expect("("); err != nil {
		return nil, fmt.Errorf("%s is not called: %w", name, err)
	}
	var pos []pyValue
	kw := map[string]pyValue{}
	for {
		if n := p.peek(); n.kind == pyOp && n.text == ")" {
			p.next()
			break
		}
		if p.peek().kind == pyName && p.toks[p.pos+1].kind == pyOp && p.toks[p.pos+1].text == "=" {
			k := p.next().text
			p.next()
			v, err := p.value()
			if err != nil {
				return nil, fmt.Errorf("%s(%s=...): %w", name, k, err)
			}
			kw[k] = v
		} else {
			if len(kw) > 0 {
				return nil, fmt.Errorf("%s: positional argument after keyword argument", name)
			}
			v, err := p.value()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			pos = append(pos, v)
		}
		if n := p.peek(); n.kind == pyOp && n.text == "," {
			p.next()
			continue
		}
		if err := p.expect(")"); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		break
	}
	return pyCall(name, pos, kw)
}

// value parses a literal.
func (p *pyParser) value() (pyValue, error) {
	t := p.next()
	switch {
	case t.kind == pyOp && (t.text == "-" || t.text == "+"):
		v, err := p.value()
		if err != nil || v.kind != "num" {
			return v, fmt.Errorf("%s must precede a number", t.text)
		}
		if t.text == "-" {
			v.num = -v.num
		}
		return v, nil
	case t.kind == pyNumber:
		f, err := strconv.ParseFloat(strings.ReplaceAll(t.text, "_", ""), 64)
		if err != nil {
			return pyValue{}, fmt.Errorf("bad number %q", t.text)
		}
		return pyValue{kind: "num", num: f}, nil
	case t.kind == pyStr:
		s := t.str()
		for n := p.peek(); n.kind == pyStr; n = p.peek() { // implicit concatenation
			s += p.next().text
		}
		return pyValue{kind: "str", str: s}, nil
	case t.kind == pyName && (t.text == "True" || t.text == "False"):
		return pyValue{kind: "bool", b: t.text == "True"}, nil
	case t.kind == pyName && t.text == "None":
		return pyValue{kind: "none"}, nil
	case t.kind == pyOp && (t.text == "[" || t.text == "("):
		closer := map[string]string{"[": "]", "(": ")"}[t.text]
		v := pyValue{kind: "list"}
		for {
			if n := p.peek(); n.kind == pyOp && n.text == closer {
				p.next()
				return v, nil
			}
			item, err := p.value()
			if err != nil {
				return v, err
			}
			v.items = append(v.items, item)
			if n := p.peek(); n.kind == pyOp && n.text == "," {
				p.next()
				continue
			}
			if err := p.expect(closer); err != nil {
				return v, err
			}
			return v, nil
		}
	}
	return pyValue{}, fmt.Errorf("%q is not a literal", t.text)
}

func (t pyToken) str() string { return t.text }

// pyArgs binds a call's arguments to pyautogui's parameter names.
type pyArgs struct {
	fn   string
	vals map[string]pyValue
}

func bindPy(fn string, params []string, pos []pyValue, kw map[string]pyValue, ignored ...string) (pyArgs, error) {
	a := pyArgs{fn: fn, vals: map[string]pyValue{}}
	if len(pos) > len(params) {
		return a, fmt.Errorf("%s takes at most %d positional arguments, got %d", fn, len(params), len(pos))
	}
	for i, v := range pos {
		a.vals[params[i]] = v
	}
	for k, v := range kw {
		known := false
		for _, p := range params {
			known = known || p == k
		}
		for _, p := range ignored {
			known = known || p == k
		}
		if !known {
			return a, fmt.Errorf("%s has no argument %s that deskfarm plays", fn, k)
		}
		if _, dup := a.vals[k]; dup {
			return a, fmt.Errorf("%s got %s twice", fn, k)
		}
		a.vals[k] = v
	}
	return a, nil
}

func (a pyArgs) has(k string) bool {
	v, ok := a.vals[k]
	return ok && v.kind != "none"
}

func (a pyArgs) num(k string, def float64) (float64, error) {
	v, ok := a.vals[k]
	if !ok || v.kind == "none" {
		return def, nil
	}
	if v.kind != "num" {
		return 0, fmt.Errorf("%s: %s must be a number", a.fn, k)
	}
	return v.num, nil
}

func (a pyArgs) str(k, def string) (string, error) {
	v, ok := a.vals[k]
	if !ok || v.kind == "none" {
		return def, nil
	}
	if v.kind != "str" {
		return "", fmt.Errorf("%s: %s must be a string", a.fn, k)
	}
	return v.str, nil
}

// point reads x, y (x may be an (x, y) tuple); nil when both are absent.
func (a pyArgs) point() (*actions.Point, error) {
	if a.vals["x"].kind == "str" {
		return nil, fmt.Errorf("%s: x is an image to locate on the screen", a.fn)
	}
	if v := a.vals["x"]; v.kind == "list" {
		if len(v.items) != 2 || v.items[0].kind != "num" || v.items[1].kind != "num" || a.has("y") {
			return nil, fmt.Errorf("%s: x as a sequence must be (x, y)", a.fn)
		}
		return pyPoint(a.fn, v.items[0].num, v.items[1].num)
	}
	switch {
	case !a.has("x") && !a.has("y"):
		return nil, nil
	case !a.has("x") || !a.has("y"):
		return nil, fmt.Errorf("%s: x and y go together (one alone keeps the other's current value, known only in the guest)", a.fn)
	}
	x, err := a.num("x", 0)
	if err != nil {
		return nil, err
	}
	y, err := a.num("y", 0)
	if err != nil {
		return nil, err
	}
	return pyPoint(a.fn, x, y)
}

func pyPoint(fn string, x, y float64) (*actions.Point, error) {
	if x < 0 || y < 0 || x > 1e6 || y > 1e6 || math.IsNaN(x) || math.IsNaN(y) {
		return nil, fmt.Errorf("%s: (%g, %g) is off any screen", fn, x, y)
	}
	return &actions.Point{X: int(x), Y: int(y)}, nil
}

func (a pyArgs) button() (actions.Button, error) {
	b, err := a.str("button", "left")
	if err != nil {
		return "", err
	}
	switch strings.ToLower(b) {
	case "left", "primary":
		return actions.ButtonLeft, nil
	case "right", "secondary":
		return actions.ButtonRight, nil
	case "middle":
		return actions.ButtonMiddle, nil
	}
	return "", fmt.Errorf("%s: button %q", a.fn, b)
}

// keyNames reads a key argument: a name or a list of names.
func (a pyArgs) keyNames(k string) ([]string, error) {
	v := a.vals[k]
	switch v.kind {
	case "str":
		return []string{v.str}, nil
	case "list":
		var out []string
		for _, it := range v.items {
			if it.kind != "str" {
				return nil, fmt.Errorf("%s: %s must hold key names", a.fn, k)
			}
			out = append(out, it.str)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s: %s must be a key name or a list of them", a.fn, k)
}

// pyKey resolves a pyautogui key name. pyautogui lower-cases names of more
// than one character; a single character stands for itself.
func pyKey(fn, name string) (actions.Key, error) {
	if utf8.RuneCountInString(name) > 1 {
		name = strings.ToLower(name)
	}
	k, err := actions.ParseKey(name)
	if err != nil {
		return actions.Key{}, fmt.Errorf("%s: %w", fn, err)
	}
	return k, nil
}

func pySleep(fn string, secs float64) ([]actions.Action, error) {
	if secs <= 0 {
		return nil, nil
	}
	d := time.Duration(secs * float64(time.Second))
	if d > actions.MaxDuration {
		return nil, fmt.Errorf("%s(%g): longer than %v", fn, secs, actions.MaxDuration)
	}
	return []actions.Action{actions.Wait{Duration: actions.RoundMS(d)}}, nil
}

var pyMoveIgnored = []string{"duration", "tween", "logScreenshot", "_pause", "interval"}

// pyCall maps one call onto actions.
func pyCall(fn string, pos []pyValue, kw map[string]pyValue) ([]actions.Action, error) {
	switch fn {
	case "time.sleep", "pyautogui.sleep":
		a, err := bindPy(fn, []string{"seconds"}, pos, kw)
		if err != nil {
			return nil, err
		}
		s, err := a.num("seconds", 0)
		if err != nil {
			return nil, err
		}
		return pySleep(fn, s)

	case "pyautogui.click", "pyautogui.doubleClick", "pyautogui.tripleClick", "pyautogui.rightClick", "pyautogui.middleClick":
		params := map[string][]string{
			"pyautogui.click":       {"x", "y", "clicks", "interval", "button", "duration", "tween"},
			"pyautogui.doubleClick": {"x", "y", "interval", "button", "duration", "tween"},
			"pyautogui.tripleClick": {"x", "y", "interval", "button", "duration", "tween"},
			"pyautogui.rightClick":  {"x", "y", "interval", "duration", "tween"},
			"pyautogui.middleClick": {"x", "y", "interval", "duration", "tween"},
		}[fn]
		a, err := bindPy(fn, params, pos, kw, "logScreenshot", "_pause")
		if err != nil {
			return nil, err
		}
		at, err := a.point()
		if err != nil {
			return nil, err
		}
		c := actions.Click{At: at, Button: actions.ButtonLeft, Count: 1}
		switch fn {
		case "pyautogui.click":
			n, err := a.num("clicks", 1)
			if err != nil {
				return nil, err
			}
			if n != math.Trunc(n) || n < 0 || n > actions.MaxClickCount {
				return nil, fmt.Errorf("%s: clicks=%g; deskfarm plays 1 to %d", fn, n, actions.MaxClickCount)
			}
			if n == 0 { // pyautogui moves but does not click
				if at == nil {
					return nil, nil
				}
				return []actions.Action{actions.Move{To: *at}}, nil
			}
			c.Count = int(n)
			if c.Button, err = a.button(); err != nil {
				return nil, err
			}
		case "pyautogui.doubleClick", "pyautogui.tripleClick":
			c.Count = map[string]int{"pyautogui.doubleClick": 2, "pyautogui.tripleClick": 3}[fn]
			if c.Button, err = a.button(); err != nil {
				return nil, err
			}
		case "pyautogui.rightClick":
			c.Button = actions.ButtonRight
		case "pyautogui.middleClick":
			c.Button = actions.ButtonMiddle
		}
		return []actions.Action{c}, nil

	case "pyautogui.moveTo", "pyautogui.dragTo":
		params := []string{"x", "y", "duration", "tween"}
		if fn == "pyautogui.dragTo" {
			params = append(params, "button", "mouseDownUp")
		}
		a, err := bindPy(fn, params, pos, kw, pyMoveIgnored...)
		if err != nil {
			return nil, err
		}
		at, err := a.point()
		if err != nil {
			return nil, err
		}
		if at == nil {
			return nil, fmt.Errorf("%s needs x and y", fn)
		}
		if fn == "pyautogui.moveTo" {
			return []actions.Action{actions.Move{To: *at}}, nil
		}
		b, err := a.button()
		if err != nil {
			return nil, err
		}
		if v, ok := a.vals["mouseDownUp"]; ok && v.kind == "bool" && !v.b {
			return []actions.Action{actions.Move{To: *at}}, nil // the button is held by an earlier mouseDown
		}
		return []actions.Action{actions.Drag{To: *at, Button: b}}, nil

	case "pyautogui.moveRel", "pyautogui.move", "pyautogui.dragRel", "pyautogui.drag":
		params := []string{"xOffset", "yOffset", "duration", "tween"}
		drag := fn == "pyautogui.dragRel" || fn == "pyautogui.drag"
		if drag {
			params = append(params, "button", "mouseDownUp")
		}
		a, err := bindPy(fn, params, pos, kw, pyMoveIgnored...)
		if err != nil {
			return nil, err
		}
		dx, err := a.num("xOffset", 0)
		if err != nil {
			return nil, err
		}
		dy, err := a.num("yOffset", 0)
		if err != nil {
			return nil, err
		}
		by := actions.MoveBy{DX: int(dx), DY: int(dy)}
		if !drag {
			return []actions.Action{by}, nil
		}
		b, err := a.button()
		if err != nil {
			return nil, err
		}
		if v, ok := a.vals["mouseDownUp"]; ok && v.kind == "bool" && !v.b {
			return []actions.Action{by}, nil
		}
		return []actions.Action{actions.ButtonDown{Button: b}, by, actions.ButtonUp{Button: b}}, nil

	case "pyautogui.mouseDown", "pyautogui.mouseUp":
		a, err := bindPy(fn, []string{"x", "y", "button", "duration", "tween"}, pos, kw, "logScreenshot", "_pause")
		if err != nil {
			return nil, err
		}
		at, err := a.point()
		if err != nil {
			return nil, err
		}
		b, err := a.button()
		if err != nil {
			return nil, err
		}
		if fn == "pyautogui.mouseUp" {
			return []actions.Action{actions.ButtonUp{At: at, Button: b}}, nil
		}
		return []actions.Action{actions.ButtonDown{At: at, Button: b}}, nil

	case "pyautogui.scroll", "pyautogui.vscroll", "pyautogui.hscroll":
		a, err := bindPy(fn, []string{"clicks", "x", "y"}, pos, kw, "logScreenshot", "_pause")
		if err != nil {
			return nil, err
		}
		n, err := a.num("clicks", 0)
		if err != nil {
			return nil, err
		}
		at, err := a.point()
		if err != nil {
			return nil, err
		}
		clicks := int(n)
		if clicks == 0 {
			if at == nil {
				return nil, nil
			}
			return []actions.Action{actions.Move{To: *at}}, nil
		}
		if abs := max(clicks, -clicks); abs > actions.MaxScrollAmount {
			return nil, fmt.Errorf("%s: %d clicks; deskfarm plays at most %d", fn, clicks, actions.MaxScrollAmount)
		}
		dir := map[bool]actions.Direction{true: actions.ScrollUp, false: actions.ScrollDown}[clicks > 0]
		if fn == "pyautogui.hscroll" {
			dir = map[bool]actions.Direction{true: actions.ScrollRight, false: actions.ScrollLeft}[clicks > 0]
		}
		return []actions.Action{actions.Scroll{At: at, Direction: dir, Amount: max(clicks, -clicks)}}, nil

	case "pyautogui.typewrite", "pyautogui.write":
		a, err := bindPy(fn, []string{"message", "interval"}, pos, kw, "logScreenshot", "_pause")
		if err != nil {
			return nil, err
		}
		switch v := a.vals["message"]; v.kind {
		case "str":
			if v.str == "" {
				return nil, nil
			}
			return []actions.Action{actions.TypeText{Text: v.str}}, nil
		case "list":
			names, err := a.keyNames("message")
			if err != nil {
				return nil, err
			}
			var acts []actions.Action
			for _, n := range names {
				k, err := pyKey(fn, n)
				if err != nil {
					return nil, err
				}
				acts = append(acts, actions.KeyPress{Keys: []actions.Key{k}})
			}
			return acts, nil
		}
		return nil, fmt.Errorf("%s needs a message string or a list of key names", fn)

	case "pyautogui.press":
		a, err := bindPy(fn, []string{"keys", "presses", "interval"}, pos, kw, "logScreenshot", "_pause")
		if err != nil {
			return nil, err
		}
		names, err := a.keyNames("keys")
		if err != nil {
			return nil, err
		}
		n, err := a.num("presses", 1)
		if err != nil {
			return nil, err
		}
		if n != math.Trunc(n) || n < 0 || n*float64(len(names)) > actions.MaxActions {
			return nil, fmt.Errorf("%s: presses=%g", fn, n)
		}
		var once []actions.Action
		for _, name := range names {
			k, err := pyKey(fn, name)
			if err != nil {
				return nil, err
			}
			once = append(once, actions.KeyPress{Keys: []actions.Key{k}})
		}
		var acts []actions.Action
		for range int(n) {
			acts = append(acts, once...)
		}
		return acts, nil

	case "pyautogui.hotkey":
		var names []string
		for _, v := range pos {
			if v.kind == "list" { // hotkey(["ctrl", "c"]) is accepted by newer pyautogui
				for _, it := range v.items {
					names = append(names, it.str)
				}
				continue
			}
			if v.kind != "str" {
				return nil, fmt.Errorf("%s takes key names", fn)
			}
			names = append(names, v.str)
		}
		for k := range kw {
			if k != "interval" && k != "logScreenshot" && k != "_pause" {
				return nil, fmt.Errorf("%s has no argument %s", fn, k)
			}
		}
		if len(names) == 0 {
			return nil, nil
		}
		var keys []actions.Key
		for _, n := range names {
			k, err := pyKey(fn, n)
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
		return []actions.Action{actions.KeyPress{Keys: keys}}, nil

	case "pyautogui.keyDown", "pyautogui.keyUp":
		a, err := bindPy(fn, []string{"key"}, pos, kw, "logScreenshot", "_pause")
		if err != nil {
			return nil, err
		}
		name, err := a.str("key", "")
		if err != nil || name == "" {
			return nil, fmt.Errorf("%s needs a key name", fn)
		}
		k, err := pyKey(fn, name)
		if err != nil {
			return nil, err
		}
		if fn == "pyautogui.keyUp" {
			return []actions.Action{actions.KeyUp{Keys: []actions.Key{k}}}, nil
		}
		return []actions.Action{actions.KeyDown{Keys: []actions.Key{k}}}, nil
	}
	return nil, fmt.Errorf("%s is not a call deskfarm plays on the host", fn)
}
