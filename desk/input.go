package desk

import (
	"log/slog"
	"sync"
	"time"
)

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

// HumanInputBuffer is how many events a subscriber's channel holds. A
// person sends a few hundred a second at most (pointer moves while
// dragging), so a reader that keeps up never fills it; one that stalls
// loses events rather than holding up the person's input.
const HumanInputBuffer = 4096

// HumanInputs subscribes to the desk's people's input, in order; the
// channel closes when the desk does or cancel is called.
//
// Every key and pointer event a takeover connection plays on the guest is
// published, and so are the releases the desk sends for a connection's
// held keys and buttons (at its close, a hand-back or a reset), so a
// subscriber always sees a key or button go up. Input refused for want of
// control is not published: it never reached the guest.
//
// Publishing never blocks: a subscriber whose channel is full misses the
// event; the first miss is logged, and the count when it unsubscribes.
func (d *Desk) HumanInputs() (<-chan HumanInput, func()) {
	return d.in.subscribe()
}

// humanInputs is a desk's subscribers to people's input.
type humanInputs struct {
	vm  string
	log *slog.Logger

	mu     sync.Mutex
	subs   map[*inputSub]struct{}
	closed bool
}

type inputSub struct {
	ch      chan HumanInput
	dropped uint64
}

func (h *humanInputs) init(vm string, log *slog.Logger) {
	h.vm, h.log = vm, log
	h.subs = map[*inputSub]struct{}{}
}

func (h *humanInputs) subscribe() (<-chan HumanInput, func()) {
	s := &inputSub{ch: make(chan HumanInput, HumanInputBuffer)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	h.subs[s] = struct{}{}
	return s.ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[s]; ok {
			delete(h.subs, s)
			h.end(s)
		}
	}
}

// publish hands in to every subscriber that has room. The sends happen
// under mu so that no channel closes under them.
func (h *humanInputs) publish(in HumanInput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		select {
		case s.ch <- in:
		default:
			s.dropped++
			if s.dropped == 1 {
				h.log.Warn("human input subscriber is full; dropping events", "vm", h.vm, "op", "human_input",
					"buffer", HumanInputBuffer)
			}
		}
	}
}

// close ends every subscription: the desk is closing.
func (h *humanInputs) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.end(s)
	}
	clear(h.subs)
}

// end closes s's channel and says what it missed; mu is held.
func (h *humanInputs) end(s *inputSub) {
	close(s.ch)
	if s.dropped > 0 {
		h.log.Warn("human input subscriber missed events", "vm", h.vm, "op", "human_input", "dropped", s.dropped)
	}
}

// key publishes a key event a takeover connection played.
func (h *humanInputs) key(keysym uint32, down bool) {
	h.publish(HumanInput{Time: time.Now(), Key: true, Keysym: keysym, Down: down})
}

// pointer publishes a pointer event a takeover connection played.
func (h *humanInputs) pointer(x, y int, buttons uint8) {
	h.publish(HumanInput{Time: time.Now(), X: x, Y: y, Buttons: buttons})
}
