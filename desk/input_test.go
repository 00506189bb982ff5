package desk

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// takeover returns a takeover connection in control of d.
func takeover(t *testing.T, d *Desk) *Takeover {
	t.Helper()
	g, err := d.TakeControl()
	if err != nil {
		t.Fatal(err)
	}
	tk, err := d.Takeover(g.Token)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// drain returns what ch holds now, and whether it is closed.
func drain(ch <-chan HumanInput) (out []HumanInput, closed bool) {
	for {
		select {
		case in, ok := <-ch:
			if !ok {
				return out, true
			}
			out = append(out, in)
		default:
			return out, false
		}
	}
}

// untimed returns ins without their times, and whether each had one.
func untimed(ins []HumanInput) ([]HumanInput, bool) {
	out, timed := make([]HumanInput, len(ins)), true
	for i, in := range ins {
		timed = timed && !in.Time.IsZero()
		in.Time = time.Time{}
		out[i] = in
	}
	return out, timed
}

func TestHumanInputsSeeWhatTakeoverPlays(t *testing.T) {
	disp := newFakeDisplay(64, 48)
	d := testDesk(t, disp)
	a, cancelA := d.HumanInputs()
	b, cancelB := d.HumanInputs()
	defer cancelB()

	// Input without control reaches neither the guest nor subscribers.
	ro, err := d.Takeover("")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Key('q', true); err == nil {
		t.Fatal("read-only takeover played a key")
	}

	tk := takeover(t, d)
	steps := []func() error{
		func() error { return tk.Pointer(10, 20, 0) },
		func() error { return tk.Pointer(10, 20, 1) },
		func() error { return tk.Key('h', true) },
		func() error { return tk.Key('h', false) },
		func() error { return tk.Key(0xffe3, true) }, // Control_L, held at the close
		func() error { return tk.Pointer(30, 40, 1) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	// The close releases Control_L and the left button: subscribers see
	// them go up.
	if err := tk.Close(); err != nil {
		t.Fatal(err)
	}
	want := []HumanInput{
		{X: 10, Y: 20}, {X: 10, Y: 20, Buttons: 1},
		{Key: true, Keysym: 'h', Down: true}, {Key: true, Keysym: 'h'},
		{Key: true, Keysym: 0xffe3, Down: true}, {X: 30, Y: 40, Buttons: 1},
		{Key: true, Keysym: 0xffe3}, {X: 30, Y: 40},
	}
	for name, ch := range map[string]<-chan HumanInput{"a": a, "b": b} {
		got, closed := drain(ch)
		if closed {
			t.Errorf("subscriber %s: closed early", name)
		}
		g, timed := untimed(got)
		if !slices.Equal(g, want) {
			t.Errorf("subscriber %s got %+v, want %+v", name, g, want)
		}
		if !timed {
			t.Errorf("subscriber %s got an event without its time", name)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Time.Before(got[i-1].Time) {
				t.Errorf("subscriber %s: event %d is older than the one before", name, i)
			}
		}
	}

	// Cancel closes the channel; the other subscriber goes on.
	cancelA()
	cancelA() // twice is harmless
	if _, closed := drain(a); !closed {
		t.Error("cancelled subscription's channel is open")
	}
	tk2 := takeover(t, d)
	defer tk2.Close()
	if err := tk2.Key('x', true); err != nil {
		t.Fatal(err)
	}
	if got, _ := drain(b); len(got) != 1 || got[0].Keysym != 'x' || !got[0].Down {
		t.Errorf("after the other's cancel, subscriber b got %+v, want x down", got)
	}

	// The desk's close ends the rest, and later subscriptions are closed
	// at once.
	d.close(&ClosedError{VM: "vm1", Reason: "test over"})
	if _, closed := drain(b); !closed {
		t.Error("subscription outlived the desk")
	}
	c, cancelC := d.HumanInputs()
	defer cancelC()
	if _, closed := drain(c); !closed {
		t.Error("subscription after the close is open")
	}
}

// A subscriber that reads nothing loses events past its buffer, and the
// person's input goes on reaching the guest; the loss is logged once.
func TestHumanInputsNeverBlockTheViewer(t *testing.T) {
	disp := newFakeDisplay(64, 48)
	var logs bytes.Buffer
	d := newDesk("vm1", disp, DefaultMaxExecutors, slog.New(slog.NewTextHandler(&logs, nil)))
	defer d.close(&ClosedError{VM: "vm1", Reason: "test over"})
	stalled, cancel := d.HumanInputs()
	tk := takeover(t, d)
	defer tk.Close()
	const n = HumanInputBuffer + 100
	for i := range n {
		if err := tk.Pointer(i%64, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if got := disp.inputEvents(); got != n {
		t.Errorf("guest got %d pointer events, want %d", got, n)
	}
	got, _ := drain(stalled)
	if len(got) != HumanInputBuffer {
		t.Errorf("stalled subscriber holds %d events, want its buffer, %d", len(got), HumanInputBuffer)
	}
	if got[len(got)-1].X != (HumanInputBuffer-1)%64 {
		t.Errorf("stalled subscriber's last event %+v, want the last before the buffer filled", got[len(got)-1])
	}
	cancel()
	out := logs.String()
	if c := strings.Count(out, "dropping events"); c != 1 {
		t.Errorf("logged the first drop %d times, want once:\n%s", c, out)
	}
	if !strings.Contains(out, "dropped=100") {
		t.Errorf("the end of the subscription does not say 100 events were dropped:\n%s", out)
	}
}

func (f *fakeDisplay) inputEvents() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.events
}
