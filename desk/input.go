package desk

import "time"

// HumanInput is one input event a person sent through takeover, as the
// desk played it: a key (Keysym, Down) or the pointer (X, Y in native
// pixels, Buttons the RFB mask). The trajectory recorder turns them into
// neutral actions (trajectory/demo.go).
type HumanInput struct {
	Time    time.Time
	Key     bool
	Keysym  uint32
	Down    bool
	X, Y    int
	Buttons uint8
}

// HumanInputs subscribes to the desk's people's input, in order; the
// channel closes when the desk does or cancel is called.
func (d *Desk) HumanInputs() (<-chan HumanInput, func()) { panic("not yet") }
