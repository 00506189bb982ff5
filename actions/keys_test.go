package actions

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/keytest"
)

func TestPrintableASCIIKeys(t *testing.T) {
	if len(keytest.USASCII) != 95 {
		t.Fatalf("table has %d characters, want all 95 printable ASCII", len(keytest.USASCII))
	}
	seen := map[byte]bool{}
	for _, want := range keytest.USASCII {
		if seen[want.C] {
			t.Fatalf("table lists %q twice", want.C)
		}
		seen[want.C] = true
		for _, get := range []struct {
			how string
			f   func() (Key, error)
		}{
			{"KeyForRune", func() (Key, error) { return KeyForRune(rune(want.C)) }},
			{"ParseKey", func() (Key, error) { return ParseKey(string(want.C)) }},
		} {
			k, err := get.f()
			if err != nil {
				t.Errorf("%s(%q): %v", get.how, want.C, err)
				continue
			}
			if k.Keysym != uint32(want.C) || k.Scancode != want.Code || k.Shift != want.Shift {
				t.Errorf("%s(%q) = keysym %#x scancode %#x shift %v, want %#x %#x %v",
					get.how, want.C, k.Keysym, k.Scancode, k.Shift, want.C, want.Code, want.Shift)
			}
		}
	}
	// The OSWorld bug: '<' and '>' share a key; only Shift tells them apart.
	lt, _ := KeyForRune('<')
	gt, _ := KeyForRune('>')
	if lt.Scancode == gt.Scancode || lt.Keysym == gt.Keysym {
		t.Errorf("< (%+v) and > (%+v) must be different keys", lt, gt)
	}
}

func TestKeyForRuneControlAndNonASCII(t *testing.T) {
	for r, want := range map[rune]string{'\n': "Return", '\r': "Return", '\t': "Tab"} {
		k, err := KeyForRune(r)
		if err != nil || k.Name != want {
			t.Errorf("KeyForRune(%q) = %v, %v; want %s", r, k, err, want)
		}
	}
	for _, r := range []rune{'é', '€', '中', 0x7f, 0x00, 0x1b, '😀'} {
		_, err := KeyForRune(r)
		if !errors.Is(err, ErrUntypable) || !errors.Is(err, ErrInvalid) {
			t.Errorf("KeyForRune(%q) = %v, want ErrUntypable", r, err)
			continue
		}
		if !strings.Contains(err.Error(), "printable US-ASCII") {
			t.Errorf("KeyForRune(%q) error %q does not say what is supported", r, err)
		}
	}
}

func TestParseKeyNames(t *testing.T) {
	cases := []struct {
		names  []string
		want   string
		keysym uint32
		code   uint16
	}{
		{[]string{"Return", "return", "RETURN", "enter", "Enter", "ENTER", "\n", "\r"}, "Return", 0xff0d, 0x1c},
		{[]string{"KP_Enter", "kp_enter", "KPEnter", "numpadenter"}, "KP_Enter", 0xff8d, 0xe01c},
		{[]string{"Escape", "escape", "esc", "ESC", "Esc"}, "Escape", 0xff1b, 0x01},
		{[]string{"BackSpace", "backspace", "BACKSPACE", "Backspace"}, "BackSpace", 0xff08, 0x0e},
		{[]string{"Tab", "tab", "TAB", "\t"}, "Tab", 0xff09, 0x0f},
		{[]string{"Delete", "delete", "del", "DEL", "Del"}, "Delete", 0xffff, 0xe053},
		{[]string{"Insert", "insert", "ins", "INS"}, "Insert", 0xff63, 0xe052},
		{[]string{"Home", "HOME"}, "Home", 0xff50, 0xe047},
		{[]string{"End", "end"}, "End", 0xff57, 0xe04f},
		{[]string{"Page_Up", "page_up", "pageup", "PAGEUP", "PageUp", "pgup", "Prior"}, "Page_Up", 0xff55, 0xe049},
		{[]string{"Page_Down", "page_down", "pagedown", "PAGEDOWN", "PageDown", "pgdn", "Next"}, "Page_Down", 0xff56, 0xe051},
		{[]string{"Left", "left", "arrowleft", "ArrowLeft", "ARROWLEFT"}, "Left", 0xff51, 0xe04b},
		{[]string{"Right", "right", "arrowright", "ArrowRight", "ARROWRIGHT"}, "Right", 0xff53, 0xe04d},
		{[]string{"Up", "up", "arrowup", "ArrowUp", "ARROWUP"}, "Up", 0xff52, 0xe048},
		{[]string{"Down", "down", "arrowdown", "ArrowDown", "ARROWDOWN"}, "Down", 0xff54, 0xe050},
		{[]string{"Control_L", "control_l", "ctrl", "CTRL", "Ctrl", "control", "Control", "ctrlleft"}, "Control_L", 0xffe3, 0x1d},
		{[]string{"Control_R", "ctrlright"}, "Control_R", 0xffe4, 0xe01d},
		{[]string{"Shift_L", "shift", "SHIFT", "Shift", "shiftleft"}, "Shift_L", 0xffe1, 0x2a},
		{[]string{"Shift_R", "shiftright"}, "Shift_R", 0xffe2, 0x36},
		{[]string{"Alt_L", "alt", "ALT", "Alt", "option", "OPTION", "altleft"}, "Alt_L", 0xffe9, 0x38},
		{[]string{"Alt_R", "altright"}, "Alt_R", 0xffea, 0xe038},
		{[]string{"Super_L", "super", "SUPER", "cmd", "CMD", "command", "win", "WIN", "windows", "winleft"}, "Super_L", 0xffeb, 0xe05b},
		{[]string{"Super_R", "winright"}, "Super_R", 0xffec, 0xe05c},
		{[]string{"Meta_L", "meta", "META", "Meta"}, "Meta_L", 0xffe7, 0xe05b},
		{[]string{"Caps_Lock", "capslock", "CAPSLOCK"}, "Caps_Lock", 0xffe5, 0x3a},
		{[]string{"Print", "printscreen", "prtsc", "prtscr", "prntscrn"}, "Print", 0xff61, 0x54},
		{[]string{"Menu", "apps", "ContextMenu"}, "Menu", 0xff67, 0xe05d},
		{[]string{"Pause"}, "Pause", 0xff13, 0xe046},
		{[]string{"space", "Space", "SPACE", " "}, "space", 0x20, 0x39},
		{[]string{"KP_0", "kp_0", "KP0", "num0", "numpad0"}, "KP_0", 0xffb0, 0x52},
		{[]string{"KP_9", "num9"}, "KP_9", 0xffb9, 0x49},
		{[]string{"KP_Add", "add"}, "KP_Add", 0xffab, 0x4e},
		{[]string{"KP_Divide", "divide"}, "KP_Divide", 0xffaf, 0xe035},
		{[]string{"F1", "f1"}, "F1", 0xffbe, 0x3b},
		{[]string{"F10", "f10"}, "F10", 0xffc7, 0x44},
		{[]string{"F11", "f11"}, "F11", 0xffc8, 0x57},
		{[]string{"F12", "F12"}, "F12", 0xffc9, 0x58},
		{[]string{"F13"}, "F13", 0xffca, 0x5d},
		{[]string{"F24", "f24"}, "F24", 0xffd5, 0x6f},
		{[]string{"XF86AudioMute", "volumemute"}, "XF86AudioMute", 0x1008ff12, 0xe020},
		{[]string{"XF86Back", "browserback"}, "XF86Back", 0x1008ff26, 0xe06a},
		// X names of punctuation.
		{[]string{"comma", "COMMA"}, "comma", ',', 0x33},
		{[]string{"period", "dot"}, "period", '.', 0x34},
		{[]string{"slash"}, "slash", '/', 0x35},
		{[]string{"minus", "Minus"}, "minus", '-', 0x0c},
		{[]string{"plus", "+"}, "plus", '+', 0x0d},
		{[]string{"equal", "="}, "equal", '=', 0x0d},
		{[]string{"bracketleft", "["}, "bracketleft", '[', 0x1a},
		{[]string{"bracketright"}, "bracketright", ']', 0x1b},
		{[]string{"braceleft"}, "braceleft", '{', 0x1a},
		{[]string{"backslash", "\\"}, "backslash", '\\', 0x2b},
		{[]string{"semicolon"}, "semicolon", ';', 0x27},
		{[]string{"apostrophe", "quoteright", "'"}, "apostrophe", '\'', 0x28},
		{[]string{"grave", "quoteleft", "`"}, "grave", '`', 0x29},
		{[]string{"asciitilde", "~"}, "asciitilde", '~', 0x29},
		{[]string{"exclam", "!"}, "exclam", '!', 0x02},
		{[]string{"less", "<"}, "less", '<', 0x33},
		{[]string{"greater", ">"}, "greater", '>', 0x34},
		{[]string{"question"}, "question", '?', 0x35},
		{[]string{"underscore"}, "underscore", '_', 0x0c},
		{[]string{"at", "@"}, "at", '@', 0x03},
		{[]string{"a"}, "a", 'a', 0x1e},
		{[]string{"A"}, "A", 'A', 0x1e},
		{[]string{"1"}, "1", '1', 0x02},
	}
	for _, c := range cases {
		for _, n := range c.names {
			k, err := ParseKey(n)
			if err != nil {
				t.Errorf("ParseKey(%q): %v", n, err)
				continue
			}
			if k.Name != c.want || k.Keysym != c.keysym || k.Scancode != c.code {
				t.Errorf("ParseKey(%q) = %s %#x %#x, want %s %#x %#x", n, k.Name, k.Keysym, k.Scancode, c.want, c.keysym, c.code)
			}
		}
	}
}

func TestParseKeyFunctionKeys(t *testing.T) {
	for i := 1; i <= 24; i++ {
		for _, p := range []string{"F", "f"} {
			name := p + strconv.Itoa(i)
			k, err := ParseKey(name)
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", name, err)
			}
			if k.Keysym != 0xffbe+uint32(i-1) || k.Scancode == 0 {
				t.Errorf("ParseKey(%q) = %#x %#x", name, k.Keysym, k.Scancode)
			}
		}
	}
}

// TestModifiersMapToLeft checks the anchors.md rule: ctrl/alt/shift/super/meta
// are the _L keysyms.
func TestModifiersMapToLeft(t *testing.T) {
	for alias, want := range map[string]uint32{
		"ctrl": xkControlL, "alt": xkAltL, "shift": xkShiftL, "super": xkSuperL, "meta": xkMetaL,
	} {
		k, err := ParseKey(alias)
		if err != nil || k.Keysym != want || !k.IsModifier() {
			t.Errorf("ParseKey(%q) = %+v, %v; want modifier keysym %#x", alias, k, err, want)
		}
	}
}

func TestCanonicalNamesRoundTrip(t *testing.T) {
	for norm, k := range keyIndex {
		k2, err := ParseKey(k.Name)
		if err != nil || k2 != k {
			t.Errorf("name %q (alias %q): ParseKey(Name) = %+v, %v; want %+v", k.Name, norm, k2, err, k)
		}
	}
	for c := byte(0x20); c < 0x7f; c++ {
		k := charKeys[c]
		k2, err := ParseKey(k.Name)
		if err != nil || k2 != k {
			t.Errorf("char %q: ParseKey(%q) = %+v, %v", c, k.Name, k2, err)
		}
	}
}

func TestParseKeyUnknown(t *testing.T) {
	for _, n := range []string{"", "foo", "Retrun", "ctrl+s", "é", "F25", "KP_A", "\x00", "aa"} {
		_, err := ParseKey(n)
		if !errors.Is(err, ErrUnknownKey) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseKey(%q) = %v, want ErrUnknownKey", n, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"X keysym names", "Return", "Page_Down", "F1-F24", "printable ASCII", "enter", "cmd", "case-insensitive"} {
			if !strings.Contains(msg, want) {
				t.Errorf("ParseKey(%q) error lacks %q: %s", n, want, msg)
			}
		}
	}
	_, err := ParseKey("Retrun")
	if !strings.Contains(err.Error(), `did you mean "Return"`) {
		t.Errorf("no suggestion for Retrun: %v", err)
	}
	_, err = ParseKey("pagedwn")
	if !strings.Contains(err.Error(), `did you mean "Page_Down"`) {
		t.Errorf("no suggestion for pagedwn: %v", err)
	}
}

func TestParseChord(t *testing.T) {
	cases := []struct {
		spec string
		want []string
	}{
		{"Return", []string{"Return"}},
		{"ctrl+s", []string{"Control_L", "s"}},
		{"ctrl+S", []string{"Control_L", "S"}},
		{"alt+Tab", []string{"Alt_L", "Tab"}},
		{"ctrl+shift+t", []string{"Control_L", "Shift_L", "t"}},
		{"CTRL+ALT+DELETE", []string{"Control_L", "Alt_L", "Delete"}},
		{"super", []string{"Super_L"}},
		{"KP_0", []string{"KP_0"}},
		{"Page_Down", []string{"Page_Down"}},
		{"+", []string{"plus"}},
		{"ctrl++", []string{"Control_L", "plus"}},
		{"ctrl+plus", []string{"Control_L", "plus"}},
		{"ctrl+minus", []string{"Control_L", "minus"}},
		{" ctrl + c ", []string{"Control_L", "c"}},
	}
	for _, c := range cases {
		keys, err := ParseChord(c.spec)
		if err != nil {
			t.Errorf("ParseChord(%q): %v", c.spec, err)
			continue
		}
		if got := KeyNames(keys); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("ParseChord(%q) = %v, want %v", c.spec, got, c.want)
		}
	}
	for _, bad := range []string{"", "ctrl+", "+ctrl", "ctrl++s", "ctrl+foo", "ctrl+ +s"} {
		if _, err := ParseChord(bad); !errors.Is(err, ErrUnknownKey) {
			t.Errorf("ParseChord(%q) = %v, want ErrUnknownKey", bad, err)
		}
	}
}

func TestParseModifiers(t *testing.T) {
	keys, err := ParseModifiers([]string{"ctrl+shift", "alt"})
	if err != nil || strings.Join(KeyNames(keys), ",") != "Control_L,Shift_L,Alt_L" {
		t.Errorf("parseModifiers = %v, %v", KeyNames(keys), err)
	}
	_, err = ParseModifiers([]string{"ctrl+a"})
	if err == nil || !strings.Contains(err.Error(), "not a modifier") {
		t.Errorf("ParseModifiers(ctrl+a) = %v, want not-a-modifier error", err)
	}
}

func TestCheckTypable(t *testing.T) {
	if err := CheckTypable("Hello, World! <a href=\"x\">\n\t~!@#$%^&*()_+{}|:\"<>?"); err != nil {
		t.Errorf("CheckTypable(ascii) = %v", err)
	}
	err := CheckTypable("café")
	if !errors.Is(err, ErrUntypable) || !strings.Contains(err.Error(), "at byte 3") || !strings.Contains(err.Error(), "U+00E9") {
		t.Errorf("CheckTypable(café) = %v", err)
	}
	if err := CheckTypable("a\xffb"); !errors.Is(err, ErrUntypable) || !strings.Contains(err.Error(), "invalid UTF-8") {
		t.Errorf("CheckTypable(invalid utf8) = %v", err)
	}
}
