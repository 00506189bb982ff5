package screen

import "testing"

// typeChar presses and releases the keys that type c, as a VNC client's
// keysym becomes key events in the guest, and returns what the keyboard typed.
func typeChar(t *testing.T, k *Keyboard, c rune) []rune {
	t.Helper()
	code, shift, ok := KeyFor(c)
	if !ok {
		t.Fatalf("KeyFor(%q): no key", c)
	}
	var got []rune
	press := func(code uint16, v int32) {
		if r, ok := k.Key(code, v); ok {
			got = append(got, r)
		}
	}
	if shift {
		press(KeyLeftShift, 1)
	}
	press(code, 1)
	press(code, 0)
	if shift {
		press(KeyLeftShift, 0)
	}
	return got
}

func TestEveryPrintableASCII(t *testing.T) {
	var k Keyboard
	for c := rune(0x20); c <= 0x7e; c++ {
		got := typeChar(t, &k, c)
		if len(got) != 1 || got[0] != c {
			t.Errorf("typing %q gave %q", c, string(got))
		}
	}
}

func TestCapsLock(t *testing.T) {
	var k Keyboard
	k.Key(KeyCapsLock, 1)
	k.Key(KeyCapsLock, 0)
	if !k.CapsLock {
		t.Fatal("CapsLock press did not turn CapsLock on")
	}
	checks := []struct {
		code  uint16
		shift bool
		want  rune
	}{
		{30, false, 'A'}, {30, true, 'a'}, {2, false, '1'}, {2, true, '!'},
		{39, false, ';'}, {39, true, ':'},
	}
	for _, c := range checks {
		if c.shift {
			k.Key(KeyRightShift, 1)
		}
		r, ok := k.Key(c.code, 1)
		k.Key(c.code, 0)
		if c.shift {
			k.Key(KeyRightShift, 0)
		}
		if !ok || r != c.want {
			t.Errorf("caps lock, key %d shift %v: %q %v, want %q", c.code, c.shift, r, ok, c.want)
		}
	}
	k.Key(KeyCapsLock, 1)
	k.Key(KeyCapsLock, 2) // autorepeat must not toggle again
	k.Key(KeyCapsLock, 0)
	if k.CapsLock {
		t.Error("second CapsLock press did not turn it off")
	}
}

func TestKeysThatTypeNothing(t *testing.T) {
	var k Keyboard
	if _, ok := k.Key(30, 2); ok {
		t.Error("autorepeat typed")
	}
	for _, code := range []uint16{1, 15, 59, 103, 111, KeyLeftShift} {
		if r, ok := k.Key(code, 1); ok {
			t.Errorf("key %d (%s) typed %q", code, KeyName(code), r)
		}
		k.Key(code, 0)
	}
	for _, mod := range []uint16{KeyLeftCtrl, KeyRightCtrl, KeyLeftAlt, KeyRightAlt, KeyLeftMeta, KeyRightMeta} {
		k.Key(mod, 1)
		if r, ok := k.Key(30, 1); ok {
			t.Errorf("%s+a typed %q", KeyName(mod), r)
		}
		k.Key(30, 0)
		k.Key(mod, 0)
	}
	if r, ok := k.Key(30, 1); !ok || r != 'a' {
		t.Errorf("a after modifiers released: %q %v", r, ok)
	}
}

func TestEnterBackspaceKeypad(t *testing.T) {
	var k Keyboard
	for code, want := range map[uint16]rune{KeyEnter: RuneNewline, KeyKPEnter: RuneNewline, KeyBackspace: RuneBackspace, 98: '/', 55: '*', 74: '-', 78: '+'} {
		if r, ok := k.Key(code, 1); !ok || r != want {
			t.Errorf("key %d: %q %v, want %q", code, r, ok, want)
		}
		k.Key(code, 0)
	}
	if _, ok := k.Key(79, 1); ok {
		t.Error("kp1 typed with NumLock off")
	}
	k.Key(79, 0)
	k.Key(KeyNumLock, 1)
	k.Key(KeyNumLock, 0)
	if r, ok := k.Key(79, 1); !ok || r != '1' {
		t.Errorf("kp1 with NumLock on: %q %v", r, ok)
	}
}

func TestKeyNames(t *testing.T) {
	for code, want := range map[uint16]string{42: "leftshift", 30: "a", 28: "enter", 96: "kpenter", 57: "space", 2: "1", 999: "unknown"} {
		if got := KeyName(code); got != want {
			t.Errorf("KeyName(%d) = %q, want %q", code, got, want)
		}
	}
}
