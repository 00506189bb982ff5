package screen

// Evdev key codes that the keyboard model treats specially
// (linux/input-event-codes.h).
const (
	KeyBackspace  = 14
	KeyEnter      = 28
	KeyLeftCtrl   = 29
	KeyLeftShift  = 42
	KeyRightShift = 54
	KeyLeftAlt    = 56
	KeyCapsLock   = 58
	KeyNumLock    = 69
	KeyKPEnter    = 96
	KeyRightCtrl  = 97
	KeyRightAlt   = 100
	KeyLeftMeta   = 125
	KeyRightMeta  = 126
)

// keyNames are the lower-case names of evdev key codes without KEY_.
var keyNames = map[uint16]string{
	1: "esc", 2: "1", 3: "2", 4: "3", 5: "4", 6: "5", 7: "6", 8: "7", 9: "8",
	10: "9", 11: "0", 12: "minus", 13: "equal", 14: "backspace", 15: "tab",
	16: "q", 17: "w", 18: "e", 19: "r", 20: "t", 21: "y", 22: "u", 23: "i",
	24: "o", 25: "p", 26: "leftbrace", 27: "rightbrace", 28: "enter",
	29: "leftctrl", 30: "a", 31: "s", 32: "d", 33: "f", 34: "g", 35: "h",
	36: "j", 37: "k", 38: "l", 39: "semicolon", 40: "apostrophe", 41: "grave",
	42: "leftshift", 43: "backslash", 44: "z", 45: "x", 46: "c", 47: "v",
	48: "b", 49: "n", 50: "m", 51: "comma", 52: "dot", 53: "slash",
	54: "rightshift", 55: "kpasterisk", 56: "leftalt", 57: "space",
	58: "capslock", 59: "f1", 60: "f2", 61: "f3", 62: "f4", 63: "f5", 64: "f6",
	65: "f7", 66: "f8", 67: "f9", 68: "f10", 69: "numlock", 70: "scrolllock",
	71: "kp7", 72: "kp8", 73: "kp9", 74: "kpminus", 75: "kp4", 76: "kp5",
	77: "kp6", 78: "kpplus", 79: "kp1", 80: "kp2", 81: "kp3", 82: "kp0",
	83: "kpdot", 85: "zenkakuhankaku", 86: "102nd", 87: "f11", 88: "f12",
	89: "ro", 90: "katakana", 91: "hiragana", 92: "henkan",
	93: "katakanahiragana", 94: "muhenkan", 95: "kpjpcomma", 96: "kpenter",
	97: "rightctrl", 98: "kpslash", 99: "sysrq", 100: "rightalt",
	101: "linefeed", 102: "home", 103: "up", 104: "pageup", 105: "left",
	106: "right", 107: "end", 108: "down", 109: "pagedown", 110: "insert",
	111: "delete", 112: "macro", 113: "mute", 114: "volumedown",
	115: "volumeup", 116: "power", 117: "kpequal", 118: "kpplusminus",
	119: "pause", 120: "scale", 121: "kpcomma", 122: "hangeul", 123: "hanja",
	124: "yen", 125: "leftmeta", 126: "rightmeta", 127: "compose",
	128: "stop", 129: "again", 130: "props", 131: "undo", 132: "front",
	133: "copy", 134: "open", 135: "paste", 136: "find", 137: "cut",
	138: "help", 139: "menu", 140: "calc", 142: "sleep", 143: "wakeup",
	158: "back", 159: "forward", 163: "nextsong", 164: "playpause",
	165: "previoussong", 166: "stopcd", 172: "homepage", 173: "refresh",
	183: "f13", 184: "f14", 185: "f15", 186: "f16", 187: "f17", 188: "f18",
	189: "f19", 190: "f20", 191: "f21", 192: "f22", 193: "f23", 194: "f24",
}

// KeyName returns the lower-case name of evdev key code code without the
// KEY_ prefix ("leftshift", "a", "kpenter"), or "unknown".
func KeyName(code uint16) string {
	if n, ok := keyNames[code]; ok {
		return n
	}
	return "unknown"
}

// usKeys maps evdev key codes to the US layout's characters without and with
// Shift. Letters are listed lower case; CapsLock applies to them only.
var usKeys = map[uint16][2]byte{
	2: {'1', '!'}, 3: {'2', '@'}, 4: {'3', '#'}, 5: {'4', '$'}, 6: {'5', '%'},
	7: {'6', '^'}, 8: {'7', '&'}, 9: {'8', '*'}, 10: {'9', '('}, 11: {'0', ')'},
	12: {'-', '_'}, 13: {'=', '+'},
	16: {'q', 'Q'}, 17: {'w', 'W'}, 18: {'e', 'E'}, 19: {'r', 'R'},
	20: {'t', 'T'}, 21: {'y', 'Y'}, 22: {'u', 'U'}, 23: {'i', 'I'},
	24: {'o', 'O'}, 25: {'p', 'P'}, 26: {'[', '{'}, 27: {']', '}'},
	30: {'a', 'A'}, 31: {'s', 'S'}, 32: {'d', 'D'}, 33: {'f', 'F'},
	34: {'g', 'G'}, 35: {'h', 'H'}, 36: {'j', 'J'}, 37: {'k', 'K'},
	38: {'l', 'L'}, 39: {';', ':'}, 40: {'\'', '"'}, 41: {'`', '~'},
	43: {'\\', '|'}, 44: {'z', 'Z'}, 45: {'x', 'X'}, 46: {'c', 'C'},
	47: {'v', 'V'}, 48: {'b', 'B'}, 49: {'n', 'N'}, 50: {'m', 'M'},
	51: {',', '<'}, 52: {'.', '>'}, 53: {'/', '?'}, 57: {' ', ' '},
	86: {'<', '>'}, // KEY_102ND, the pc105 key left of Z
}

// Keypad keys: operators always type, digits and the dot only with NumLock.
var (
	keypadOps    = map[uint16]byte{55: '*', 74: '-', 78: '+', 98: '/', 117: '='}
	keypadDigits = map[uint16]byte{
		71: '7', 72: '8', 73: '9', 75: '4', 76: '5', 77: '6',
		79: '1', 80: '2', 81: '3', 82: '0', 83: '.',
	}
)

// Keyboard tracks modifier and lock state and turns key events into typed
// characters the way a US keyboard layout does:
//   - Shift selects the upper symbol of a key; CapsLock inverts the case of
//     letters only (so CapsLock+Shift types lower-case letters);
//   - CapsLock and NumLock toggle on press and start off, as in the guest
//     kernel and in QEMU's VNC lock-key sync;
//   - keypad digits and the keypad dot type only with NumLock on, keypad
//     operators always;
//   - while Ctrl, Alt or Meta is held no character is typed;
//   - autorepeat events (value 2) type nothing, so what is typed is exactly
//     the keys pressed, however long the guest takes to see the release;
//   - Tab, function and navigation keys type nothing.
//
// The zero value is a keyboard with nothing held and both locks off.
type Keyboard struct {
	down     map[uint16]bool
	CapsLock bool
	NumLock  bool
}

// Special runes Key returns besides printable ASCII.
const (
	RuneNewline   = '\n'
	RuneBackspace = '\b'
)

// Key applies one EV_KEY event (value 0 release, 1 press, 2 autorepeat) and
// returns the character it types: a printable ASCII rune, RuneNewline for
// Enter or keypad Enter, RuneBackspace for BackSpace. ok is false when the
// event types nothing.
func (k *Keyboard) Key(code uint16, value int32) (r rune, ok bool) {
	if k.down == nil {
		k.down = make(map[uint16]bool)
	}
	switch value {
	case 0:
		delete(k.down, code)
		return 0, false
	case 1:
		k.down[code] = true
	default:
		return 0, false
	}
	switch code {
	case KeyCapsLock:
		k.CapsLock = !k.CapsLock
		return 0, false
	case KeyNumLock:
		k.NumLock = !k.NumLock
		return 0, false
	}
	if k.held(KeyLeftCtrl, KeyRightCtrl, KeyLeftAlt, KeyRightAlt, KeyLeftMeta, KeyRightMeta) {
		return 0, false
	}
	switch code {
	case KeyEnter, KeyKPEnter:
		return RuneNewline, true
	case KeyBackspace:
		return RuneBackspace, true
	}
	if c, ok := keypadOps[code]; ok {
		return rune(c), true
	}
	if c, ok := keypadDigits[code]; ok {
		return rune(c), k.NumLock
	}
	pair, ok := usKeys[code]
	if !ok {
		return 0, false
	}
	shift := k.held(KeyLeftShift, KeyRightShift)
	if pair[0] >= 'a' && pair[0] <= 'z' && k.CapsLock {
		shift = !shift
	}
	if shift {
		return rune(pair[1]), true
	}
	return rune(pair[0]), true
}

// Held reports whether key code is down.
func (k *Keyboard) Held(code uint16) bool { return k.down[code] }

func (k *Keyboard) held(codes ...uint16) bool {
	for _, c := range codes {
		if k.down[c] {
			return true
		}
	}
	return false
}

// KeyFor returns the key code and Shift state that type the printable ASCII
// character c on a US keyboard with CapsLock off; ok is false for other
// runes. Host tests use it to drive the guest through QMP.
func KeyFor(c rune) (code uint16, shift bool, ok bool) {
	if c < 0x20 || c > 0x7e {
		return 0, false, false
	}
	for code, pair := range usKeys {
		if code == 86 { // reach < and > through comma and dot, as VNC clients do
			continue
		}
		if rune(pair[0]) == c {
			return code, false, true
		}
		if rune(pair[1]) == c {
			return code, true, true
		}
	}
	return 0, false, false
}
