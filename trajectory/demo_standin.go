package trajectory

// A stand-in for helper D's trajectory/demo.go (the contract's Coalescer),
// so the package compiles and the demonstration wiring is tested until
// demo.go is on main. It knows only left clicks. Delete this file when
// main has demo.go.

import (
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/desk"
)

// Coalescer turns a person's raw input into neutral actions.
type Coalescer struct {
	down bool
}

// NewCoalescer returns an empty Coalescer.
func NewCoalescer() *Coalescer { return &Coalescer{} }

// Feed takes one event and returns the actions it completed (often none).
func (c *Coalescer) Feed(in desk.HumanInput) []actions.Action {
	if in.Key {
		return nil
	}
	left := in.Buttons&1 != 0
	defer func() { c.down = left }()
	if c.down && !left {
		return []actions.Action{actions.Click{At: &actions.Point{X: in.X, Y: in.Y}, Button: actions.ButtonLeft, Count: 1}}
	}
	return nil
}

// Flush returns what is pending as of now.
func (c *Coalescer) Flush(now time.Time) []actions.Action { return nil }

// Pending reports whether Flush would return anything, and when to call it.
func (c *Coalescer) Pending() (time.Time, bool) { return time.Time{}, false }
