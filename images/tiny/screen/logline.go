package screen

import (
	"fmt"
	"image"
)

// The functions below format input log lines (see the package
// documentation); each returns one line including its '\n'.

// KeyLine is "key down|up|repeat CODE NAME" for an EV_KEY event with value
// 1, 0 or 2.
func KeyLine(code uint16, value int32) string {
	action := "repeat"
	switch value {
	case 0:
		action = "up"
	case 1:
		action = "down"
	}
	return fmt.Sprintf("key %s %d %s\n", action, code, KeyName(code))
}

// ButtonLine is "button down|up NAME X Y".
func ButtonLine(b Button, down bool, p image.Point) string {
	action := "up"
	if down {
		action = "down"
	}
	return fmt.Sprintf("button %s %s %d %d\n", action, b, p.X, p.Y)
}

// MotionLine is "motion X Y".
func MotionLine(p image.Point) string {
	return fmt.Sprintf("motion %d %d\n", p.X, p.Y)
}

// WheelLine is "wheel N", or "hwheel N" when horizontal.
func WheelLine(n int32, horizontal bool) string {
	if horizontal {
		return fmt.Sprintf("hwheel %d\n", n)
	}
	return fmt.Sprintf("wheel %d\n", n)
}

// TypedLine is "char C", "newline" or "backspace" for a rune Keyboard.Key
// returned.
func TypedLine(r rune) string {
	switch r {
	case RuneNewline:
		return "newline\n"
	case RuneBackspace:
		return "backspace\n"
	}
	return fmt.Sprintf("char %c\n", r)
}
