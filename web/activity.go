package web

import (
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
)

// ActivityEvent is a wire type (package api).
type ActivityEvent = api.ActivityEvent

// activityKeep is how many events the recorder keeps per VM.
const activityKeep = 200

// activity records the actions played on each VM and lets live views wait
// for new ones. It keeps the last activityKeep events per VM in memory.
type activity struct {
	mu  sync.Mutex
	vms map[string]*vmActivity
}

type vmActivity struct {
	seq     uint64
	events  []ActivityEvent // oldest first, at most activityKeep
	changed chan struct{}   // closed and replaced when an event is added
}

func newActivity() *activity { return &activity{vms: map[string]*vmActivity{}} }

func (a *activity) vmLocked(id string) *vmActivity {
	v := a.vms[id]
	if v == nil {
		v = &vmActivity{changed: make(chan struct{})}
		a.vms[id] = v
	}
	return v
}

// record adds the first res.Executed of acts, played by an agent on vm id,
// converting their positions to native pixels with sc.
func (a *activity) record(id string, acts []actions.Action, res actions.Result, sc *actions.Scaler) {
	now := time.Now()
	evs := make([]ActivityEvent, 0, len(acts))
	for i, act := range acts {
		if i >= res.Executed {
			break
		}
		ev := ActivityEvent{Time: now, Source: "agent", Kind: string(act.Kind())}
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
	a.add(id, evs...)
}

func native(sc *actions.Scaler, p actions.Point) (*int, *int) {
	x, y := p.X, p.Y
	if sc != nil {
		if nx, ny, err := sc.ToNative(p.X, p.Y); err == nil {
			x, y = nx, ny
		}
	}
	return &x, &y
}

// add appends events to vm id's log and wakes its waiters.
func (a *activity) add(id string, evs ...ActivityEvent) {
	if len(evs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.vmLocked(id)
	for _, ev := range evs {
		v.seq++
		ev.Seq = v.seq
		v.events = append(v.events, ev)
	}
	if n := len(v.events); n > activityKeep {
		v.events = append([]ActivityEvent(nil), v.events[n-activityKeep:]...)
	}
	close(v.changed)
	v.changed = make(chan struct{})
}

// since returns vm id's kept events after seq, and a channel closed when
// more arrive.
func (a *activity) since(id string, seq uint64) ([]ActivityEvent, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.vmLocked(id)
	var out []ActivityEvent
	for _, ev := range v.events {
		if ev.Seq > seq {
			out = append(out, ev)
		}
	}
	return out, v.changed
}

// last returns vm id's latest event, if any.
func (a *activity) last(id string) (ActivityEvent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := a.vms[id]
	if v == nil || len(v.events) == 0 {
		return ActivityEvent{}, false
	}
	return v.events[len(v.events)-1], true
}

// forget drops vm id's log (the VM was destroyed).
func (a *activity) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.vms[id]; v != nil {
		close(v.changed)
		delete(a.vms, id)
	}
}
