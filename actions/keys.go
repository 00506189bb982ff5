package actions

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Key is one key of a US-layout PC keyboard as the guest sees it: the X keysym
// it produces and the PC/XT set-1 scancode of the physical key.
//
// Scancodes come from QEMU's keycodemapdb (data/keymaps.csv, column "AT set1
// keycode"), the table QEMU itself uses to turn VNC extended key events into
// guest key codes; extended keys are written 0xE0xx. Keysyms come from X11's
// keysymdef.h and XF86keysym.h.
type Key struct {
	// Name is the canonical X keysym name: "Return", "a", "A", "exclam",
	// "Control_L", "XF86AudioMute".
	Name string
	// Keysym is the X keysym.
	Keysym uint32
	// Scancode is the set-1 scancode of the key on a US layout, 0xE0xx for
	// extended keys.
	Scancode uint16
	// Shift reports that the US layout needs Shift held for the key to produce
	// Keysym ("A" is Shift+a, "!" is Shift+1). QEMU lowercases A-Z key events
	// and takes Shift from the modifier state, so the executor presses Shift_L
	// around such keys itself, as Packer's VNC driver does.
	Shift bool
}

// IsModifier reports whether k is a Shift, Control, Alt, Meta or Super key.
func (k Key) IsModifier() bool {
	switch k.Keysym {
	case xkShiftL, xkShiftR, xkControlL, xkControlR, xkMetaL, xkMetaR,
		xkAltL, xkAltR, xkSuperL, xkSuperR:
		return true
	}
	return false
}

// IsShift reports whether k is Shift_L or Shift_R.
func (k Key) IsShift() bool { return k.Keysym == xkShiftL || k.Keysym == xkShiftR }

// Extended reports whether the key's scancode has the 0xE0 prefix (two bytes
// on the wire to the guest's keyboard controller).
func (k Key) Extended() bool { return k.Scancode&0xff00 == 0xe000 }

// String returns the key's X keysym name.
func (k Key) String() string { return k.Name }

// Keysyms of the modifiers.
const (
	xkShiftL   = 0xffe1
	xkShiftR   = 0xffe2
	xkControlL = 0xffe3
	xkControlR = 0xffe4
	xkMetaL    = 0xffe7
	xkMetaR    = 0xffe8
	xkAltL     = 0xffe9
	xkAltR     = 0xffea
	xkSuperL   = 0xffeb
	xkSuperR   = 0xffec
)

// usLayout lists the US layout's printable keys: set-1 scancode, the
// character without Shift and the character with Shift.
var usLayout = []struct {
	scancode     uint16
	plain, shift byte
}{
	{0x29, '`', '~'}, {0x02, '1', '!'}, {0x03, '2', '@'}, {0x04, '3', '#'},
	{0x05, '4', '$'}, {0x06, '5', '%'}, {0x07, '6', '^'}, {0x08, '7', '&'},
	{0x09, '8', '*'}, {0x0a, '9', '('}, {0x0b, '0', ')'}, {0x0c, '-', '_'},
	{0x0d, '=', '+'},
	{0x10, 'q', 'Q'}, {0x11, 'w', 'W'}, {0x12, 'e', 'E'}, {0x13, 'r', 'R'},
	{0x14, 't', 'T'}, {0x15, 'y', 'Y'}, {0x16, 'u', 'U'}, {0x17, 'i', 'I'},
	{0x18, 'o', 'O'}, {0x19, 'p', 'P'}, {0x1a, '[', '{'}, {0x1b, ']', '}'},
	{0x2b, '\\', '|'},
	{0x1e, 'a', 'A'}, {0x1f, 's', 'S'}, {0x20, 'd', 'D'}, {0x21, 'f', 'F'},
	{0x22, 'g', 'G'}, {0x23, 'h', 'H'}, {0x24, 'j', 'J'}, {0x25, 'k', 'K'},
	{0x26, 'l', 'L'}, {0x27, ';', ':'}, {0x28, '\'', '"'},
	{0x2c, 'z', 'Z'}, {0x2d, 'x', 'X'}, {0x2e, 'c', 'C'}, {0x2f, 'v', 'V'},
	{0x30, 'b', 'B'}, {0x31, 'n', 'N'}, {0x32, 'm', 'M'}, {0x33, ',', '<'},
	{0x34, '.', '>'}, {0x35, '/', '?'},
	{0x39, ' ', ' '},
}

// asciiNames are the X keysym names of printable ASCII characters that are
// not letters or digits (keysymdef.h). Latin-1 keysyms equal the character
// code.
var asciiNames = map[byte]string{
	' ': "space", '!': "exclam", '"': "quotedbl", '#': "numbersign",
	'$': "dollar", '%': "percent", '&': "ampersand", '\'': "apostrophe",
	'(': "parenleft", ')': "parenright", '*': "asterisk", '+': "plus",
	',': "comma", '-': "minus", '.': "period", '/': "slash", ':': "colon",
	';': "semicolon", '<': "less", '=': "equal", '>': "greater",
	'?': "question", '@': "at", '[': "bracketleft", '\\': "backslash",
	']': "bracketright", '^': "asciicircum", '_': "underscore", '`': "grave",
	'{': "braceleft", '|': "bar", '}': "braceright", '~': "asciitilde",
}

// asciiAliases are further names for printable characters: old X names and
// what pyautogui and agents send.
var asciiAliases = map[byte][]string{
	'\'': {"quoteright"}, '`': {"quoteleft", "backquote", "backtick"},
	' ': {"spacebar"}, '-': {"hyphen", "dash"}, '=': {"equals"},
	'.': {"dot"},
}

// specialKey is a non-printing key: its X name, keysym, scancode and the
// aliases agents use (any case; underscores are ignored when matching).
type specialKey struct {
	name     string
	keysym   uint32
	scancode uint16
	aliases  []string
}

// specialKeys are the non-printing keys ParseKey knows. Aliases cover the
// vocabularies in use: xdotool/X names, Claude's agents (enter, esc, cmd,
// win, meta, option, pagedown, arrowleft, del, ins), OpenAI CUA (ENTER,
// CTRL, ARROWDOWN, ...) and pyautogui/OSWorld (ctrlleft, pgdn, num0,
// prtsc, volumemute, browserback, ...).
var specialKeys = []specialKey{
	{"Escape", 0xff1b, 0x01, []string{"esc"}},
	{"BackSpace", 0xff08, 0x0e, []string{"bksp", "back_space"}},
	{"Tab", 0xff09, 0x0f, nil},
	{"Return", 0xff0d, 0x1c, []string{"enter", "ret", "newline"}},
	{"Control_L", xkControlL, 0x1d, []string{"ctrl", "control", "ctrlleft", "lctrl", "leftctrl", "ctrl_l"}},
	{"Control_R", xkControlR, 0xe01d, []string{"ctrlright", "rctrl", "rightctrl", "ctrl_r"}},
	{"Shift_L", xkShiftL, 0x2a, []string{"shift", "shiftleft", "lshift", "leftshift"}},
	{"Shift_R", xkShiftR, 0x36, []string{"shiftright", "rshift", "rightshift"}},
	{"Alt_L", xkAltL, 0x38, []string{"alt", "altleft", "lalt", "leftalt", "option", "optionleft", "opt"}},
	{"Alt_R", xkAltR, 0xe038, []string{"altright", "ralt", "rightalt", "optionright"}},
	// "super", "cmd" and "win" mean the Windows/Command key: Super_L on the
	// left GUI key.
	{"Super_L", xkSuperL, 0xe05b, []string{"super", "win", "winleft", "windows", "lwin", "cmd", "command", "cmdleft", "commandleft", "os"}},
	{"Super_R", xkSuperR, 0xe05c, []string{"winright", "rwin", "cmdright", "commandright"}},
	// "meta" is X's Meta_L keysym. Agents (browsers' metaKey, CUA's META)
	// mean the Windows/Command key by it, so it is sent on the left GUI key's
	// scancode; the keysym only matters to servers without QEMU's extended
	// key event.
	{"Meta_L", xkMetaL, 0xe05b, []string{"meta", "metaleft"}},
	{"Meta_R", xkMetaR, 0xe05c, []string{"metaright"}},
	{"Caps_Lock", 0xffe5, 0x3a, []string{"capslock", "caps"}},
	{"Num_Lock", 0xff7f, 0x45, []string{"numlock"}},
	{"Scroll_Lock", 0xff14, 0x46, []string{"scrolllock", "scrlk"}},
	// QEMU's table has Print Screen on 0x54 (the SysRq code); its PS/2
	// emulation sends the guest the E0 2A E0 37 sequence for it.
	{"Print", 0xff61, 0x54, []string{"printscreen", "prtsc", "prtscr", "prntscrn", "prtscn", "snapshot", "sysrq", "sys_req"}},
	{"Pause", 0xff13, 0xe046, []string{"break"}},
	{"Menu", 0xff67, 0xe05d, []string{"apps", "contextmenu", "application"}},
	{"Insert", 0xff63, 0xe052, []string{"ins"}},
	{"Delete", 0xffff, 0xe053, []string{"del", "forwarddelete"}},
	{"Home", 0xff50, 0xe047, nil},
	{"End", 0xff57, 0xe04f, nil},
	{"Page_Up", 0xff55, 0xe049, []string{"pageup", "pgup", "prior"}},
	{"Page_Down", 0xff56, 0xe051, []string{"pagedown", "pgdn", "next"}},
	{"Left", 0xff51, 0xe04b, []string{"arrowleft", "leftarrow", "arrow_left"}},
	{"Up", 0xff52, 0xe048, []string{"arrowup", "uparrow", "arrow_up"}},
	{"Right", 0xff53, 0xe04d, []string{"arrowright", "rightarrow", "arrow_right"}},
	{"Down", 0xff54, 0xe050, []string{"arrowdown", "downarrow", "arrow_down"}},
	{"Help", 0xff6a, 0xe075, nil},

	// Keypad. With Num Lock off the guest reads the digit keys as
	// KP_Home, KP_Left, ...: the scancode is the same key.
	{"KP_0", 0xffb0, 0x52, []string{"num0", "numpad0"}},
	{"KP_1", 0xffb1, 0x4f, []string{"num1", "numpad1"}},
	{"KP_2", 0xffb2, 0x50, []string{"num2", "numpad2"}},
	{"KP_3", 0xffb3, 0x51, []string{"num3", "numpad3"}},
	{"KP_4", 0xffb4, 0x4b, []string{"num4", "numpad4"}},
	{"KP_5", 0xffb5, 0x4c, []string{"num5", "numpad5"}},
	{"KP_6", 0xffb6, 0x4d, []string{"num6", "numpad6"}},
	{"KP_7", 0xffb7, 0x47, []string{"num7", "numpad7"}},
	{"KP_8", 0xffb8, 0x48, []string{"num8", "numpad8"}},
	{"KP_9", 0xffb9, 0x49, []string{"num9", "numpad9"}},
	{"KP_Decimal", 0xffae, 0x53, []string{"decimal", "numpaddecimal"}},
	{"KP_Add", 0xffab, 0x4e, []string{"add", "numpadadd"}},
	{"KP_Subtract", 0xffad, 0x4a, []string{"subtract", "numpadsubtract"}},
	{"KP_Multiply", 0xffaa, 0x37, []string{"multiply", "numpadmultiply"}},
	{"KP_Divide", 0xffaf, 0xe035, []string{"divide", "numpaddivide"}},
	{"KP_Enter", 0xff8d, 0xe01c, []string{"numpadenter"}},
	{"KP_Equal", 0xffbd, 0x59, []string{"numpadequal"}},
	{"KP_Home", 0xff95, 0x47, nil},
	{"KP_Left", 0xff96, 0x4b, nil},
	{"KP_Up", 0xff97, 0x48, nil},
	{"KP_Right", 0xff98, 0x4d, nil},
	{"KP_Down", 0xff99, 0x50, nil},
	{"KP_Page_Up", 0xff9a, 0x49, []string{"kp_prior"}},
	{"KP_Page_Down", 0xff9b, 0x51, []string{"kp_next"}},
	{"KP_End", 0xff9c, 0x4f, nil},
	{"KP_Begin", 0xff9d, 0x4c, nil},
	{"KP_Insert", 0xff9e, 0x52, nil},
	{"KP_Delete", 0xff9f, 0x53, nil},

	// Function keys; F13-F24 per keycodemapdb.
	{"F1", 0xffbe, 0x3b, nil}, {"F2", 0xffbf, 0x3c, nil},
	{"F3", 0xffc0, 0x3d, nil}, {"F4", 0xffc1, 0x3e, nil},
	{"F5", 0xffc2, 0x3f, nil}, {"F6", 0xffc3, 0x40, nil},
	{"F7", 0xffc4, 0x41, nil}, {"F8", 0xffc5, 0x42, nil},
	{"F9", 0xffc6, 0x43, nil}, {"F10", 0xffc7, 0x44, nil},
	{"F11", 0xffc8, 0x57, nil}, {"F12", 0xffc9, 0x58, nil},
	{"F13", 0xffca, 0x5d, nil}, {"F14", 0xffcb, 0x5e, nil},
	{"F15", 0xffcc, 0x5f, nil}, {"F16", 0xffcd, 0x55, nil},
	{"F17", 0xffce, 0xe003, nil}, {"F18", 0xffcf, 0xe077, nil},
	{"F19", 0xffd0, 0xe004, nil}, {"F20", 0xffd1, 0x5a, nil},
	{"F21", 0xffd2, 0x74, nil}, {"F22", 0xffd3, 0xe079, nil},
	{"F23", 0xffd4, 0x6d, nil}, {"F24", 0xffd5, 0x6f, nil},

	// Multimedia and browser keys (XF86keysym.h).
	{"XF86AudioMute", 0x1008ff12, 0xe020, []string{"volumemute", "audiomute", "mute"}},
	{"XF86AudioLowerVolume", 0x1008ff11, 0xe02e, []string{"volumedown"}},
	{"XF86AudioRaiseVolume", 0x1008ff13, 0xe030, []string{"volumeup"}},
	{"XF86AudioPlay", 0x1008ff14, 0xe022, []string{"playpause", "mediaplaypause"}},
	{"XF86AudioStop", 0x1008ff15, 0xe024, []string{"mediastop"}},
	{"XF86AudioPrev", 0x1008ff16, 0xe010, []string{"prevtrack", "mediaprevioustrack", "mediatrackprevious"}},
	{"XF86AudioNext", 0x1008ff17, 0xe019, []string{"nexttrack", "medianexttrack", "mediatracknext"}},
	{"XF86Back", 0x1008ff26, 0xe06a, []string{"browserback"}},
	{"XF86Forward", 0x1008ff27, 0xe069, []string{"browserforward"}},
	{"XF86Refresh", 0x1008ff29, 0xe067, []string{"browserrefresh"}},
	{"XF86Stop", 0x1008ff28, 0xe068, []string{"browserstop"}},
	{"XF86Search", 0x1008ff1b, 0xe065, []string{"browsersearch"}},
	{"XF86Favorites", 0x1008ff30, 0xe066, []string{"browserfavorites"}},
	{"XF86HomePage", 0x1008ff18, 0xe032, []string{"browserhome"}},
	{"XF86Mail", 0x1008ff19, 0xe06c, []string{"launchmail"}},
	{"XF86Calculator", 0x1008ff1d, 0xe021, []string{"calculator", "launchapp2"}},
	{"XF86MyComputer", 0x1008ff33, 0xe06b, []string{"launchapp1", "mycomputer"}},
	{"XF86AudioMedia", 0x1008ff32, 0xe06d, []string{"launchmediaselect", "mediaselect"}},

	// Input-method keys of Japanese and Korean keyboards (pyautogui names).
	{"Henkan_Mode", 0xff23, 0x79, []string{"convert", "henkan"}},
	{"Muhenkan", 0xff22, 0x7b, []string{"nonconvert"}},
	{"Hiragana_Katakana", 0xff27, 0x70, []string{"kana"}},
	{"Hangul", 0xff31, 0xf2, []string{"hanguel"}},
	{"Hangul_Hanja", 0xff34, 0xf1, []string{"hanja"}},
}

var (
	// keyIndex maps a normalised name (see normName) to its key.
	keyIndex = map[string]Key{}
	// charKeys maps printable ASCII characters to their keys.
	charKeys [128]Key
	// shiftKey is the Shift_L key the executor presses for Shift.
	shiftKey Key
)

func init() {
	add := func(alias string, k Key) {
		n := normName(alias)
		if old, dup := keyIndex[n]; dup && old != k {
			panic(fmt.Sprintf("actions: key alias %q names both %s and %s", alias, old.Name, k.Name))
		}
		keyIndex[n] = k
	}
	for _, row := range usLayout {
		for i, c := range []byte{row.plain, row.shift} {
			if i == 1 && c == row.plain {
				continue // space has no shifted form
			}
			name, ok := asciiNames[c]
			if !ok {
				name = string(c)
			}
			k := Key{Name: name, Keysym: uint32(c), Scancode: row.scancode, Shift: i == 1}
			charKeys[c] = k
			if ok {
				add(name, k)
			}
			for _, a := range asciiAliases[c] {
				add(a, k)
			}
		}
	}
	for _, s := range specialKeys {
		k := Key{Name: s.name, Keysym: s.keysym, Scancode: s.scancode}
		add(s.name, k)
		for _, a := range s.aliases {
			add(a, k)
		}
	}
	shiftKey = keyIndex["shiftl"]
}

// ShiftKey returns Shift_L, the key a player presses for Shift.
func ShiftKey() Key { return shiftKey }

// AllKeys returns every key ParseKey or KeyForRune can return, once each.
func AllKeys() []Key {
	seen := map[Key]bool{}
	var out []Key
	for c := byte(0x20); c < 0x7f; c++ {
		if k := charKeys[c]; !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, k := range keyIndex {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// normName folds a multi-character key name for lookup: lower case, without
// underscores, so "Page_Down", "pagedown" and "PAGEDOWN" are one name.
func normName(s string) string {
	return strings.ReplaceAll(strings.ToLower(s), "_", "")
}

// keyNamesHelp is the part of an unknown-key error that says what is
// accepted.
const keyNamesHelp = "accepted are X keysym names (Return, BackSpace, Tab, Escape, Delete, Home, End, " +
	"Page_Up, Page_Down, Left, Up, F1-F24, KP_0-KP_9, KP_Enter, Control_L, Shift_L, Alt_L, Super_L, " +
	"comma, period, slash, minus, plus, bracketleft, ...), a single printable ASCII character " +
	"(a, A, 1, !, ~), and aliases (enter, esc, del, ins, pageup, pagedown, arrowleft/right/up/down, " +
	"ctrl, control, shift, alt, option, super, cmd, win, meta, space, tab, pyautogui names such as " +
	"ctrlleft, num0, prtsc, volumeup); names are case-insensitive except single characters " +
	"(\"A\" is Shift+a); a chord joins keys with + (ctrl+shift+t)"

// ParseKey resolves one key name in xdotool/X keysym syntax or a common alias
// (see specialKeys and keyNamesHelp). A single printable ASCII character
// stands for itself and is case-sensitive ("a", "A", "!", "+"); "\t", "\n"
// and "\r" stand for Tab and Return (pyautogui sends them). Longer names are
// matched case-insensitively and without regard to underscores. An unknown
// name is a *FieldError wrapping ErrUnknownKey whose message lists what is
// accepted and, when one is close, suggests a name.
func ParseKey(name string) (Key, error) {
	if len(name) == 1 {
		c := name[0]
		switch {
		case c >= 0x20 && c < 0x7f:
			return charKeys[c], nil
		case c == '\t':
			return keyIndex["tab"], nil
		case c == '\n', c == '\r':
			return keyIndex["return"], nil
		}
	}
	if k, ok := keyIndex[normName(name)]; ok {
		return k, nil
	}
	return Key{}, unknownKeyError(name)
}

func unknownKeyError(name string) error {
	msg := fmt.Sprintf("unknown key %q; %s", name, keyNamesHelp)
	if name == "" {
		msg = "empty key name; " + keyNamesHelp
	} else if s := suggestKey(name); s != "" {
		msg = fmt.Sprintf("unknown key %q (did you mean %q?); %s", name, s, keyNamesHelp)
	}
	return &FieldError{Msg: msg, Errs: []error{ErrInvalid, ErrUnknownKey}}
}

// suggestKey returns the known name closest to name, or "" when none is
// within two edits.
func suggestKey(name string) string {
	n := normName(name)
	if len(n) < 3 || len(n) > 32 || !utf8.ValidString(n) {
		return ""
	}
	best, bestD := "", 3
	names := make([]string, 0, len(keyIndex))
	for k := range keyIndex {
		names = append(names, k)
	}
	sort.Strings(names) // deterministic among ties
	for _, cand := range names {
		if d := editDistance(n, cand, bestD); d < bestD {
			best, bestD = keyIndex[cand].Name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, or limit if it is at
// least limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

// ParseChord resolves an xdotool chord such as "ctrl+shift+t", "alt+Tab" or
// "ctrl++" (the last + is the plus key). The keys come back in press order.
// A lone "+" is the plus key.
func ParseChord(spec string) ([]Key, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, &FieldError{Msg: "empty key chord; " + keyNamesHelp, Errs: []error{ErrInvalid, ErrUnknownKey}}
	}
	var tail []Key
	switch {
	case s == "+":
		return []Key{charKeys['+']}, nil
	case strings.HasSuffix(s, "++"):
		tail = []Key{charKeys['+']}
		s = s[:len(s)-2]
	}
	var keys []Key
	for _, part := range strings.Split(s, "+") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, &FieldError{
				Msg:  fmt.Sprintf("empty key name in chord %q (write the plus key as \"plus\"); %s", spec, keyNamesHelp),
				Errs: []error{ErrInvalid, ErrUnknownKey},
			}
		}
		k, err := ParseKey(part)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return append(keys, tail...), nil
}

// KeyForRune returns the key that types r on a US layout: printable ASCII as
// itself (with Shift where the layout needs it), '\n' and '\r' as Return,
// '\t' as Tab. Anything else is a *FieldError wrapping ErrUntypable.
//
// Characters outside US ASCII are refused rather than sent as bare Unicode
// keysyms: QEMU maps a keysym without a scancode through its keymap and drops
// keysyms the keymap lacks, so such text would silently go missing. The
// executor types non-ASCII text through its GuestInput instead.
func KeyForRune(r rune) (Key, error) {
	switch {
	case r >= 0x20 && r < 0x7f:
		return charKeys[r], nil
	case r == '\n', r == '\r':
		return keyIndex["return"], nil
	case r == '\t':
		return keyIndex["tab"], nil
	}
	return Key{}, &FieldError{Msg: untypableMsg(r), Errs: []error{ErrInvalid, ErrUntypable}}
}

func untypableMsg(r rune) string {
	return fmt.Sprintf("character %q (U+%04X) cannot be typed as key events: the display types printable "+
		"US-ASCII (space to ~), \\n and \\r (Return) and \\t (Tab); other text needs the guest input path "+
		"(GuestInput: the desktop session's agent)", r, r)
}

// checkText refuses invalid UTF-8 and control characters other than \n, \r
// and \t: no path types them.
func checkText(text string) error {
	for i, r := range text {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(text[i:]); size <= 1 {
				return &FieldError{Msg: fmt.Sprintf("invalid UTF-8 at byte %d", i), Errs: []error{ErrInvalid, ErrUntypable}}
			}
		}
		if r != '\n' && r != '\r' && r != '\t' && unicode.IsControl(r) {
			return &FieldError{Msg: fmt.Sprintf("at byte %d: control character U+%04X cannot be typed; "+
				"text may hold any printable character, \\n, \\r and \\t", i, r), Errs: []error{ErrInvalid, ErrUntypable}}
		}
	}
	return nil
}

// ASCIITypable reports whether every character of text has a key on the US
// layout (KeyForRune), so it can go over the display.
func ASCIITypable(text string) bool {
	for _, r := range text {
		if _, err := KeyForRune(r); err != nil {
			return false
		}
	}
	return true
}

// CheckTypable returns an error naming the first character of text that
// KeyForRune refuses, with its byte offset.
func CheckTypable(text string) error {
	for i, r := range text {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(text[i:]); size <= 1 {
				return &FieldError{Msg: fmt.Sprintf("invalid UTF-8 at byte %d", i), Errs: []error{ErrInvalid, ErrUntypable}}
			}
		}
		if _, err := KeyForRune(r); err != nil {
			return &FieldError{Msg: fmt.Sprintf("at byte %d: %s", i, untypableMsg(r)), Errs: []error{ErrInvalid, ErrUntypable}}
		}
	}
	return nil
}

// ParseModifiers resolves modifier key names (each may itself be a chord
// such as "ctrl+shift") and checks every key is a modifier.
func ParseModifiers(names []string) ([]Key, error) {
	var keys []Key
	for _, n := range names {
		ks, err := ParseChord(n)
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			if !k.IsModifier() {
				return nil, &FieldError{
					Msg: fmt.Sprintf("%q is not a modifier key; modifiers are shift, ctrl, alt, super "+
						"(cmd, win), meta and their _L/_R forms, joined with + (\"ctrl+shift\")", n),
					Errs: []error{ErrInvalid, ErrUnknownKey},
				}
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}
