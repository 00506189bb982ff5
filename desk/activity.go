package desk

import (
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// Event is one input action played on a VM, as the live view overlays it.
// Positions are native framebuffer pixels.
type Event struct {
	// Seq numbers a desk's events from 1, in order, across reset segments.
	Seq  uint64
	Time time.Time
	// Source is SourceAgent, SourceHuman or SourceFarm.
	Source string
	// Kind is the neutral action kind (click, type, key, ...), key_down or
	// button_down for a person's input, or "reset" for a segment start.
	Kind         string
	X, Y         *int
	FromX, FromY *int
	Button       string
	Count        int
	Keys         []string
	Text         string
	// Direction and Amount describe a scroll.
	Direction string
	Amount    int
}

// Event sources.
const (
	SourceAgent = "agent" // POST .../actions
	SourceHuman = "human" // takeover
	SourceFarm  = "farm"  // lifecycle: a reset starts a segment
)

// ActivityKeep is how many events a desk keeps.
const ActivityKeep = 200

// activityLog keeps a desk's last ActivityKeep events and wakes followers.
type activityLog struct {
	mu      sync.Mutex
	seq     uint64
	events  []Event       // oldest first, this segment only
	changed chan struct{} // closed and replaced when an event is added
	closed  bool
}

func (a *activityLog) init() { a.changed = make(chan struct{}) }

func (a *activityLog) add(evs ...Event) {
	if len(evs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	for _, ev := range evs {
		a.seq++
		ev.Seq = a.seq
		a.events = append(a.events, ev)
	}
	if n := len(a.events); n > ActivityKeep {
		a.events = append([]Event(nil), a.events[n-ActivityKeep:]...)
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// segment starts a fresh segment after a reset: the events before it are
// dropped and a "reset" event marks the boundary.
func (a *activityLog) segment(at time.Time) {
	a.mu.Lock()
	a.events = nil
	a.mu.Unlock()
	a.add(Event{Time: at, Source: SourceFarm, Kind: "reset"})
}

func (a *activityLog) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		close(a.changed)
	}
}

// Record adds events (their Seq is assigned) and wakes followers.
func (d *Desk) Record(evs ...Event) { d.act.add(evs...) }

// Activity returns the kept events after seq and a channel closed when more
// arrive or the desk closes (see Done).
func (d *Desk) Activity(after uint64) ([]Event, <-chan struct{}) {
	a := &d.act
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Event
	for _, ev := range a.events {
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, a.changed
}

// LastEvent returns the latest kept event, if any.
func (d *Desk) LastEvent() (Event, bool) {
	a := &d.act
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.events) == 0 {
		return Event{}, false
	}
	return a.events[len(a.events)-1], true
}

// agentEvents are the first res.Executed of acts as events, their positions
// converted to native pixels with sc.
func agentEvents(acts []actions.Action, res player.Result, sc *player.Scaler) []Event {
	now := time.Now()
	evs := make([]Event, 0, min(len(acts), res.Executed))
	for i, act := range acts {
		if i >= res.Executed {
			break
		}
		ev := Event{Time: now, Source: SourceAgent, Kind: string(act.Kind())}
		var at, from *actions.Point
		switch a := act.(type) {
		case actions.Move:
			at = &a.To
		case actions.ButtonDown:
			at, ev.Button = a.At, string(a.Button)
		case actions.ButtonUp:
			at, ev.Button = a.At, string(a.Button)
		case actions.Click:
			at, ev.Button, ev.Count = a.At, string(a.Button), a.Count
		case actions.Drag:
			at, from, ev.Button = &a.To, a.From, string(a.Button)
		case actions.Scroll:
			at, ev.Direction, ev.Amount = a.At, string(a.Direction), a.Amount
		case actions.KeyPress:
			ev.Keys = actions.KeyNames(a.Keys)
		case actions.KeyDown:
			ev.Keys = actions.KeyNames(a.Keys)
		case actions.KeyUp:
			ev.Keys = actions.KeyNames(a.Keys)
		case actions.HoldKey:
			ev.Keys = actions.KeyNames(a.Keys)
		case actions.TypeText:
			ev.Text = a.Text
		}
		if at != nil {
			ev.X, ev.Y = native(sc, *at)
		}
		if from != nil {
			ev.FromX, ev.FromY = native(sc, *from)
		}
		evs = append(evs, ev)
	}
	return evs
}

func native(sc *player.Scaler, p actions.Point) (*int, *int) {
	x, y := p.X, p.Y
	if sc != nil {
		if nx, ny, err := sc.ToNative(p.X, p.Y); err == nil {
			x, y = nx, ny
		}
	}
	return &x, &y
}
