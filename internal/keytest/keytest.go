// Package keytest holds test data about keyboards written out by hand,
// independent of the key tables it checks (actions/keys.go), so that the
// model's tests and the player's can both compare against it.
package keytest

// USASCII is the US layout written out by hand, independent of keys.go: each
// printable ASCII character, the set-1 scancode of its key, and whether it
// needs Shift. Source: the IBM PC/AT scancode set 1 chart (the same values as
// QEMU keycodemapdb's "AT set1 keycode" column).
var USASCII = []struct {
	C     byte
	Code  uint16
	Shift bool
}{
	{' ', 0x39, false}, {'!', 0x02, true}, {'"', 0x28, true}, {'#', 0x04, true},
	{'$', 0x05, true}, {'%', 0x06, true}, {'&', 0x08, true}, {'\'', 0x28, false},
	{'(', 0x0a, true}, {')', 0x0b, true}, {'*', 0x09, true}, {'+', 0x0d, true},
	{',', 0x33, false}, {'-', 0x0c, false}, {'.', 0x34, false}, {'/', 0x35, false},
	{'0', 0x0b, false}, {'1', 0x02, false}, {'2', 0x03, false}, {'3', 0x04, false},
	{'4', 0x05, false}, {'5', 0x06, false}, {'6', 0x07, false}, {'7', 0x08, false},
	{'8', 0x09, false}, {'9', 0x0a, false}, {':', 0x27, true}, {';', 0x27, false},
	{'<', 0x33, true}, {'=', 0x0d, false}, {'>', 0x34, true}, {'?', 0x35, true},
	{'@', 0x03, true},
	{'A', 0x1e, true}, {'B', 0x30, true}, {'C', 0x2e, true}, {'D', 0x20, true},
	{'E', 0x12, true}, {'F', 0x21, true}, {'G', 0x22, true}, {'H', 0x23, true},
	{'I', 0x17, true}, {'J', 0x24, true}, {'K', 0x25, true}, {'L', 0x26, true},
	{'M', 0x32, true}, {'N', 0x31, true}, {'O', 0x18, true}, {'P', 0x19, true},
	{'Q', 0x10, true}, {'R', 0x13, true}, {'S', 0x1f, true}, {'T', 0x14, true},
	{'U', 0x16, true}, {'V', 0x2f, true}, {'W', 0x11, true}, {'X', 0x2d, true},
	{'Y', 0x15, true}, {'Z', 0x2c, true},
	{'[', 0x1a, false}, {'\\', 0x2b, false}, {']', 0x1b, false}, {'^', 0x07, true},
	{'_', 0x0c, true}, {'`', 0x29, false},
	{'a', 0x1e, false}, {'b', 0x30, false}, {'c', 0x2e, false}, {'d', 0x20, false},
	{'e', 0x12, false}, {'f', 0x21, false}, {'g', 0x22, false}, {'h', 0x23, false},
	{'i', 0x17, false}, {'j', 0x24, false}, {'k', 0x25, false}, {'l', 0x26, false},
	{'m', 0x32, false}, {'n', 0x31, false}, {'o', 0x18, false}, {'p', 0x19, false},
	{'q', 0x10, false}, {'r', 0x13, false}, {'s', 0x1f, false}, {'t', 0x14, false},
	{'u', 0x16, false}, {'v', 0x2f, false}, {'w', 0x11, false}, {'x', 0x2d, false},
	{'y', 0x15, false}, {'z', 0x2c, false},
	{'{', 0x1a, true}, {'|', 0x2b, true}, {'}', 0x1b, true}, {'~', 0x29, true},
}
