package actions

import (
	"errors"
	"testing"
)

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"Return", "ctrl+s", "alt+Tab", "KP_0", "Page_Down", "super", "+", "ctrl++",
		"A", "!", "enter", "ARROWDOWN", "", " ", "ctrl+", "é", "\x00", "F24", "ctrl+shift+t", "a+b+c+d+e+f+g+h+i"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err == nil {
			k2, err2 := ParseKey(k.Name)
			if err2 != nil || k2 != k {
				t.Fatalf("ParseKey(%q) = %+v but its name reparses to %+v, %v", s, k, k2, err2)
			}
			if k.Keysym == 0 || k.Scancode == 0 {
				t.Fatalf("ParseKey(%q) = %+v without keysym or scancode", s, k)
			}
		} else if !errors.Is(err, ErrUnknownKey) {
			t.Fatalf("ParseKey(%q) error %v is not ErrUnknownKey", s, err)
		}
		keys, err := ParseChord(s)
		if err == nil && len(keys) == 0 {
			t.Fatalf("ParseChord(%q) returned no keys and no error", s)
		}
		for _, r := range s {
			KeyForRune(r)
		}
		_ = CheckTypable(s)
	})
}
