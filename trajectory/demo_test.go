package trajectory

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/desk"
)

// loadCapture reads a capture of takeover input (testdata/README.md).
func loadCapture(t *testing.T, name string) []desk.HumanInput {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []desk.HumanInput
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var in desk.HumanInput
		if err := json.Unmarshal(sc.Bytes(), &in); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// demoEmitted is an action and when the driver got it.
type demoEmitted struct {
	at      time.Time
	flushed bool // by Flush at a Pending deadline (or the end), not by Feed
	act     actions.Action
}

// playDemo drives c as the recorder does: each event is fed in turn, and
// whenever Pending's time has come before the next event, Flush runs at
// that time; at the end, a last Flush.
func playDemo(c *Coalescer, ins []desk.HumanInput) []demoEmitted {
	var out []demoEmitted
	add := func(at time.Time, flushed bool, acts []actions.Action) {
		for _, a := range acts {
			out = append(out, demoEmitted{at: at, flushed: flushed, act: a})
		}
	}
	for _, in := range ins {
		if at, ok := c.Pending(); ok && !in.Time.Before(at) {
			add(at, true, c.Flush(at))
		}
		add(in.Time, false, c.Feed(in))
	}
	end := ins[len(ins)-1].Time
	add(end, true, c.Flush(end))
	return out
}

func neutralJSON(t *testing.T, a actions.Action) string {
	t.Helper()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func neutralJSONAll(t *testing.T, es []demoEmitted) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = neutralJSON(t, e.act)
	}
	return out
}

func sameActionLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// A real takeover session (noVNC in Chromium on the tiny image) becomes the
// actions the person meant, each a valid neutral action that decodes back
// to itself: the trajectory's replay plays exactly these.
func TestCoalesceTakeoverCapture(t *testing.T) {
	ins := loadCapture(t, "takeover-tiny-novnc.jsonl")
	got := playDemo(NewCoalescer(), ins)
	want := []string{
		`{"kind":"click","x":300,"y":199,"button":"left","count":1}`,
		`{"kind":"type","text":"hello world"}`,
		`{"kind":"key","keys":["Return"]}`,
		`{"kind":"key","keys":["Control_L","l"]}`,
		`{"kind":"type","text":"Hello, World!"}`,
		`{"kind":"key","keys":["Control_L","Shift_L","T"]}`,
		`{"kind":"scroll","x":600,"y":499,"direction":"down","amount":3}`,
		`{"kind":"drag","x":699,"y":450,"from":{"x":399,"y":299},"via":[{"x":419,"y":310},{"x":440,"y":319},` +
			`{"x":460,"y":330},{"x":480,"y":339},{"x":499,"y":350},{"x":519,"y":359},{"x":539,"y":369},` +
			`{"x":559,"y":380},{"x":580,"y":389},{"x":600,"y":400},{"x":620,"y":409},{"x":639,"y":420},` +
			`{"x":659,"y":429},{"x":679,"y":439}],"button":"left"}`,
		`{"kind":"click","x":900,"y":599,"button":"left","count":2}`,
		`{"kind":"click","x":999,"y":299,"button":"right","count":1}`,
	}
	neutralLines := neutralJSONAll(t, got)
	sameActionLines(t, "the capture coalesced to", neutralLines, want)

	// Valid, and the neutral JSON decodes to the same actions.
	var acts []actions.Action
	for _, e := range got {
		acts = append(acts, e.act)
	}
	if err := actions.ValidateAll(acts); err != nil {
		t.Errorf("coalesced actions do not validate: %v", err)
	}
	b, err := json.Marshal(acts)
	if err != nil {
		t.Fatal(err)
	}
	back, err := actions.DecodeActions(b)
	if err != nil {
		t.Fatalf("decode the coalesced actions: %v", err)
	}
	for i := range back {
		if g := neutralJSON(t, back[i]); g != neutralLines[i] {
			t.Errorf("action %d decodes to %s, was %s", i, g, neutralLines[i])
		}
	}

	// A step does not wait for the next input: the click is complete once
	// the double-click time has passed, and the scroll after its pause.
	for _, i := range []int{0, 6} {
		if !got[i].flushed {
			t.Errorf("%s came with the next event, want from the flush at its pause", neutralLines[i])
		}
	}
	firstKey := ins[0].Time
	for _, in := range ins {
		if in.Key {
			firstKey = in.Time
			break
		}
	}
	if !got[0].at.Before(firstKey) {
		t.Errorf("the click was complete at %v, after the typing began (%v)", got[0].at, firstKey)
	}
}

// Driven by Feed alone (no flushes until the end) the actions are the same:
// the pauses only decide when each is complete.
func TestCoalesceCaptureWithoutTimer(t *testing.T) {
	ins := loadCapture(t, "takeover-tiny-novnc.jsonl")
	c := NewCoalescer()
	var neutralLines []string
	for _, in := range ins {
		for _, a := range c.Feed(in) {
			neutralLines = append(neutralLines, neutralJSON(t, a))
		}
	}
	for _, a := range c.Flush(ins[len(ins)-1].Time) {
		neutralLines = append(neutralLines, neutralJSON(t, a))
	}
	sameActionLines(t, "fed without flushes", neutralLines, neutralJSONAll(t, playDemo(NewCoalescer(), ins)))
	if _, ok := c.Pending(); ok {
		t.Error("pending after the last flush")
	}
}

// The capture cut inside "hello world": Pending says when the text is
// complete, and Flush then returns what was typed so far.
func TestCoalesceFlushMidText(t *testing.T) {
	ins := loadCapture(t, "takeover-tiny-novnc.jsonl")
	c := NewCoalescer()
	var typed int
	var last time.Time
	for _, in := range ins {
		c.Feed(in)
		if in.Key && in.Down {
			typed++
			last = in.Time
		}
		if typed == 7 { // "hello w"
			break
		}
	}
	at, ok := c.Pending()
	if !ok || !at.Equal(last.Add(TextPause)) {
		t.Fatalf("Pending() = %v, %v; want the last key's time plus %v", at, ok, TextPause)
	}
	sameActionLines(t, "flush mid-text", neutralLines(t, c.Flush(at)), []string{`{"kind":"type","text":"hello w"}`})
}

func neutralLines(t *testing.T, acts []actions.Action) []string {
	out := make([]string, len(acts))
	for i, a := range acts {
		out[i] = neutralJSON(t, a)
	}
	return out
}

// inputScript builds input events 10 ms apart (a wait adds more).
type inputScript struct {
	now time.Time
	ins []desk.HumanInput
}

func newInputScript() *inputScript {
	return &inputScript{now: time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)}
}

func (s *inputScript) add(in desk.HumanInput) *inputScript {
	s.now = s.now.Add(10 * time.Millisecond)
	in.Time = s.now
	s.ins = append(s.ins, in)
	return s
}

func (s *inputScript) wait(d time.Duration) *inputScript { s.now = s.now.Add(d); return s }

func (s *inputScript) down(ks uint32) *inputScript {
	return s.add(desk.HumanInput{Key: true, Keysym: ks, Down: true})
}
func (s *inputScript) up(ks uint32) *inputScript {
	return s.add(desk.HumanInput{Key: true, Keysym: ks})
}
func (s *inputScript) tap(ks uint32) *inputScript { return s.down(ks).up(ks) }
func (s *inputScript) ptr(x, y int, b uint8) *inputScript {
	return s.add(desk.HumanInput{X: x, Y: y, Buttons: b})
}
func (s *inputScript) click(x, y int, mask uint8) *inputScript { return s.ptr(x, y, mask).ptr(x, y, 0) }

// Keysyms of the edge cases.
const (
	ksShift = 0xffe1
	ksCtrl  = 0xffe3
	ksSuper = 0xffeb
	ksAltGr = 0xfe03 // ISO_Level3_Shift: no neutral key
)

// The coalescer's rules one by one, on scripted input (the state machine's
// edges the capture does not reach).
func TestCoalesceRules(t *testing.T) {
	long := newInputScript().ptr(100, 100, 1)
	for i := 1; i <= 2000; i++ {
		long.ptr(100+i/4, 100+i/8, 1)
	}
	long.ptr(600, 350, 0)

	for _, tc := range []struct {
		name string
		s    *inputScript
		want []string
	}{
		{"a pause splits text", newInputScript().tap('a').tap('b').wait(1500 * time.Millisecond).tap('c'),
			[]string{`{"kind":"type","text":"ab"}`, `{"kind":"type","text":"c"}`}},
		{"three quick clicks are a triple click", newInputScript().click(50, 60, 1).wait(150*time.Millisecond).
			click(51, 61, 1).wait(150*time.Millisecond).click(50, 60, 1),
			[]string{`{"kind":"click","x":50,"y":60,"button":"left","count":3}`}},
		{"a slow second click is a click of its own", newInputScript().click(50, 60, 1).wait(600*time.Millisecond).click(50, 60, 1),
			[]string{`{"kind":"click","x":50,"y":60,"button":"left","count":1}`, `{"kind":"click","x":50,"y":60,"button":"left","count":1}`}},
		{"a second click elsewhere is a click of its own", newInputScript().click(50, 60, 1).click(80, 60, 1),
			[]string{`{"kind":"click","x":50,"y":60,"button":"left","count":1}`, `{"kind":"click","x":80,"y":60,"button":"left","count":1}`}},
		{"a small move under the button is still a click", newInputScript().ptr(10, 10, 1).ptr(13, 12, 1).ptr(13, 12, 0),
			[]string{`{"kind":"click","x":10,"y":10,"button":"left","count":1}`}},
		{"the middle button", newInputScript().click(5, 5, 2),
			[]string{`{"kind":"click","x":5,"y":5,"button":"middle","count":1}`}},
		{"Super alone is a key", newInputScript().tap(ksSuper), []string{`{"kind":"key","keys":["Super_L"]}`}},
		{"Shift alone is nothing", newInputScript().tap(ksShift), nil},
		{"Shift makes capitals of text", newInputScript().down(ksShift).tap('A').up(ksShift).tap('b'),
			[]string{`{"kind":"type","text":"Ab"}`}},
		{"ctrl+click is a click with a modifier, not a Ctrl key", newInputScript().down(ksCtrl).click(7, 8, 1).up(ksCtrl),
			[]string{`{"kind":"click","x":7,"y":8,"button":"left","count":1,"modifiers":["Control_L"]}`}},
		{"ctrl+plus keeps the Shift the person held", newInputScript().down(ksCtrl).down(ksShift).tap('+').up(ksShift).up(ksCtrl),
			[]string{`{"kind":"key","keys":["Control_L","Shift_L","plus"]}`}},
		{"ctrl+wheel is a scroll with a modifier", newInputScript().down(ksCtrl).click(9, 9, 8).click(9, 9, 8).up(ksCtrl),
			[]string{`{"kind":"scroll","x":9,"y":9,"modifiers":["Control_L"],"direction":"up","amount":2}`}},
		{"the wheel's reverse is a new scroll", newInputScript().click(9, 9, 16).click(9, 9, 16).click(9, 9, 8).click(9, 9, 64),
			[]string{`{"kind":"scroll","x":9,"y":9,"direction":"down","amount":2}`,
				`{"kind":"scroll","x":9,"y":9,"direction":"up","amount":1}`,
				`{"kind":"scroll","x":9,"y":9,"direction":"right","amount":1}`}},
		{"a keysym no key names is skipped", newInputScript().tap(ksAltGr).tap('a'),
			[]string{`{"kind":"type","text":"a"}`}},
		{"Latin-1 and Unicode keysyms are text", newInputScript().tap(0xe9).tap(0x010020ac),
			[]string{`{"kind":"type","text":"é€"}`}},
		{"text ends at a click", newInputScript().tap('o').tap('k').click(3, 4, 1),
			[]string{`{"kind":"type","text":"ok"}`, `{"kind":"click","x":3,"y":4,"button":"left","count":1}`}},
		{"moves without a button are nothing", newInputScript().ptr(1, 1, 0).ptr(500, 500, 0).ptr(2, 2, 0), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameActionLines(t, "coalesced", neutralJSONAll(t, playDemo(NewCoalescer(), tc.s.ins)), tc.want)
		})
	}

	t.Run("a long drag keeps at most MaxDragVia points", func(t *testing.T) {
		got := playDemo(NewCoalescer(), long.ins)
		if len(got) != 1 {
			t.Fatalf("got %d actions, want one drag: %v", len(got), neutralJSONAll(t, got))
		}
		d, ok := got[0].act.(actions.Drag)
		if !ok || *d.From != (actions.Point{X: 100, Y: 100}) || d.To != (actions.Point{X: 600, Y: 350}) {
			t.Fatalf("got %s, want a drag from (100,100) to (600,350)", neutralJSON(t, got[0].act))
		}
		if n := len(d.Via); n == 0 || n > actions.MaxDragVia {
			t.Errorf("drag has %d via points, want 1 to %d", n, actions.MaxDragVia)
		}
		// The path keeps its end: the move before the one onto To.
		if last := d.Via[len(d.Via)-1]; last != (actions.Point{X: 599, Y: 349}) {
			t.Errorf("the path ends at %v, want the last move before To, (599,349)", last)
		}
		if err := d.Validate(); err != nil {
			t.Error(err)
		}
	})
}

// A drag still held when the recording flushes (its end) is the press and
// the way so far; the release that follows is a ButtonUp where it happens.
func TestCoalesceHeldDragAtFlush(t *testing.T) {
	s := newInputScript().ptr(10, 10, 1).ptr(40, 40, 1).ptr(60, 50, 1)
	c := NewCoalescer()
	for _, in := range s.ins {
		if acts := c.Feed(in); len(acts) > 0 {
			t.Fatalf("a held drag completed %v", neutralLines(t, acts))
		}
	}
	if _, ok := c.Pending(); ok {
		t.Error("a held button is pending: the recorder would flush it at once")
	}
	sameActionLines(t, "flushed", neutralLines(t, c.Flush(s.now)), []string{
		`{"kind":"button_down","x":10,"y":10,"button":"left"}`,
		`{"kind":"move","x":60,"y":50}`,
	})
	s.ptr(80, 60, 0)
	sameActionLines(t, "released", neutralLines(t, c.Feed(s.ins[len(s.ins)-1])), []string{`{"kind":"button_up","x":80,"y":60,"button":"left"}`})
}
