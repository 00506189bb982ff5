package web

import (
	"time"

	"github.com/deskfarm/deskfarm/desk"
)

// ActivityEvent is one input action played on a VM, as the live view
// overlays it (the wire form of desk.Event). Positions are native
// framebuffer pixels.
type ActivityEvent struct {
	// Seq numbers a VM's events from 1, in order; a reset does not restart it.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Source is "agent" (POST /v1/vms/{id}/actions), "human" (takeover) or
	// "farm" (a reset, which starts a fresh segment of the log).
	Source string `json:"source"`
	// Kind is the neutral action kind: click, type, key, move, drag, ...;
	// key_down or button_down for a person; reset for a segment start.
	Kind   string   `json:"kind"`
	X      *int     `json:"x,omitempty"`
	Y      *int     `json:"y,omitempty"`
	FromX  *int     `json:"from_x,omitempty"`
	FromY  *int     `json:"from_y,omitempty"`
	Button string   `json:"button,omitempty"`
	Count  int      `json:"count,omitempty"`
	Keys   []string `json:"keys,omitempty"`
	Text   string   `json:"text,omitempty"`
	// Direction and Amount describe a scroll.
	Direction string `json:"direction,omitempty"`
	Amount    int    `json:"amount,omitempty"`
}

func activityEvent(e desk.Event) ActivityEvent {
	return ActivityEvent{Seq: e.Seq, Time: e.Time, Source: e.Source, Kind: e.Kind, X: e.X, Y: e.Y,
		FromX: e.FromX, FromY: e.FromY, Button: e.Button, Count: e.Count, Keys: e.Keys, Text: e.Text,
		Direction: e.Direction, Amount: e.Amount}
}

func deskEvent(e ActivityEvent) desk.Event {
	return desk.Event{Time: e.Time, Source: e.Source, Kind: e.Kind, X: e.X, Y: e.Y,
		FromX: e.FromX, FromY: e.FromY, Button: e.Button, Count: e.Count, Keys: e.Keys, Text: e.Text,
		Direction: e.Direction, Amount: e.Amount}
}

// activity records proxy.go's human input in the VM's desk log (until
// proxy.go moves onto desk.Takeover, which records by itself).
type activity struct{ desks *desk.Pool }

func (a activity) add(id string, evs ...ActivityEvent) {
	if a.desks == nil {
		return
	}
	d := a.desks.Peek(id)
	if d == nil {
		return
	}
	out := make([]desk.Event, len(evs))
	for i, ev := range evs {
		out[i] = deskEvent(ev)
	}
	d.Record(out...)
}
