package player

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player/playertest"
)

// The fake guest is playertest's; these names keep the tests short.
type fakeDisplay = playertest.Display

var (
	newFake     = playertest.New
	errWire     = playertest.ErrWire
	checkEvents = playertest.CheckEvents
	presses     = playertest.Presses
	keysDownAt  = playertest.KeysDownAt
	guestUS     = playertest.GuestUS
	coordImage  = playertest.CoordImage
	pt          = playertest.Pt
)

// newTestExecutor returns an executor on f with the default pacing, whose
// sleeps advance f's virtual clock instead of taking time.
func newTestExecutor(t *testing.T, f *fakeDisplay, size ScreenshotSize) *Executor {
	t.Helper()
	e, err := NewExecutor(f, ExecutorConfig{Size: size, Sleep: f.Sleep})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func run(t *testing.T, e *Executor, opts RunOptions, acts ...actions.Action) Result {
	t.Helper()
	res, err := e.Run(context.Background(), acts, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

var noShot = RunOptions{Screenshot: ScreenshotNever}

// TestClick: a click of any button, count and modifiers presses the button
// count times where asked, with exactly the modifiers down at each press,
// and leaves nothing pressed.
func TestClick(t *testing.T) {
	for _, c := range []struct {
		click actions.Click
		bit   uint8
		at    string
		mods  []string
	}{
		{actions.Click{At: pt(10, 20)}, maskLeft, "10,20", nil},
		{actions.Click{At: pt(5, 6), Button: actions.ButtonRight, Count: 2}, maskRight, "5,6", nil},
		{actions.Click{At: pt(7, 8), Button: actions.ButtonMiddle, Count: 1}, maskMiddle, "7,8", nil},
		{actions.Click{Count: 3, Modifiers: actions.MustKeys("ctrl+shift")}, maskLeft, "40,30", []string{"Control_L", "Shift_L"}},
		{actions.Click{At: pt(1, 1), Count: 2, Modifiers: actions.MustKeys("alt", "super")}, maskLeft, "1,1", []string{"Alt_L", "Super_L"}},
	} {
		f := newFake(100, 80)
		f.X, f.Y = 40, 30
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, c.click)
		p := presses(f.Events, c.bit)
		if len(p) != max(c.click.Count, 1) {
			t.Errorf("%+v: %d presses, want %d; guest got %v", c.click, len(p), max(c.click.Count, 1), f.Events)
		}
		for i, ev := range f.Events {
			if strings.HasPrefix(ev, "ptr") && strings.Contains(ev, fmt.Sprintf("%#02x", c.bit)) {
				if !strings.HasPrefix(ev, "ptr "+c.at+" ") {
					t.Errorf("%+v: press at %q, want %s", c.click, ev, c.at)
				}
				if got := keysDownAt(f.Events, i); !slices.Equal(got, c.mods) {
					t.Errorf("%+v: keys down at the press %v, want %v", c.click, got, c.mods)
				}
			}
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("%+v: left pressed %v", c.click, s)
		}
		if len(f.Settles) != 1 || f.Settles[0] != "settle 150ms 2s" {
			t.Errorf("%+v: settles %v, want one with the defaults", c.click, f.Settles)
		}
	}
}

// TestDrag: the button goes down at the start, stays down along a path
// through every via point in steps of at most DragStepPx, and comes up at
// the end, with the modifiers down throughout.
func TestDrag(t *testing.T) {
	for _, d := range []actions.Drag{
		{From: pt(0, 0), To: actions.Point{X: 30, Y: 0}, Modifiers: actions.MustKeys("shift")},
		{From: pt(0, 0), Via: []actions.Point{{X: 100, Y: 0}}, To: actions.Point{X: 100, Y: 100}, Button: actions.ButtonMiddle},
		{To: actions.Point{X: 50, Y: 50}}, // from where the pointer is, to the same point
		{From: pt(199, 0), Via: []actions.Point{{X: 0, Y: 199}, {X: 199, Y: 199}}, To: actions.Point{X: 0, Y: 0}},
	} {
		f := newFake(200, 200)
		f.X, f.Y = 50, 50
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, d)
		bit, _ := buttonMask(d.Button)
		from := actions.Point{X: 50, Y: 50}
		if d.From != nil {
			from = *d.From
		}
		var path []actions.Point
		var sawUp bool
		for i, ev := range f.Events {
			var x, y int
			var mask uint8
			if _, err := fmt.Sscanf(ev, "ptr %d,%d %v", &x, &y, &mask); err != nil {
				continue
			}
			if mask&bit != 0 {
				if sawUp {
					t.Errorf("%+v: pressed again after the release", d)
				}
				path = append(path, actions.Point{X: x, Y: y})
				if got := keysDownAt(f.Events, i); !slices.Equal(got, actions.KeyNames(d.Modifiers)) {
					t.Errorf("%+v: keys down while dragging %v", d, got)
				}
			} else if len(path) > 0 {
				sawUp = true
				if x != d.To.X || y != d.To.Y {
					t.Errorf("%+v: released at %d,%d", d, x, y)
				}
			}
		}
		if len(path) == 0 || path[0] != from || path[len(path)-1] != d.To || !sawUp {
			t.Fatalf("%+v: path %v", d, path)
		}
		for _, v := range d.Via {
			if !slices.Contains(path, v) {
				t.Errorf("%+v: path %v misses via %v", d, path, v)
			}
		}
		for i := 1; i < len(path); i++ {
			if dist := math.Hypot(float64(path[i].X-path[i-1].X), float64(path[i].Y-path[i-1].Y)); dist > float64(DefaultPacing.DragStepPx)+1 {
				t.Errorf("%+v: step %v -> %v is %.0f px", d, path[i-1], path[i], dist)
			}
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("%+v: left pressed %v", d, s)
		}
	}
}

// TestScroll: one wheel press and release per click of the amount, with the
// direction's button, where asked.
func TestScroll(t *testing.T) {
	for dir, bit := range map[actions.Direction]uint8{actions.ScrollUp: maskWheelUp, actions.ScrollDown: maskWheelDown} {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, actions.Scroll{At: pt(7, 8), Direction: dir, Amount: 3, Modifiers: actions.MustKeys("ctrl")})
		if p := presses(f.Events, bit); strings.Join(p, " ") != "7,8 7,8 7,8" {
			t.Errorf("%s: wheel presses %v; guest got %v", dir, p, f.Events)
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("%s: left pressed %v", dir, s)
		}
	}
}

func TestChord(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, actions.KeyPress{Keys: actions.MustKeys("ctrl+shift+t")})
	checkEvents(t, f.Events,
		"key Control_L down", "key Shift_L down", "key T down",
		"key T up", "key Shift_L up", "key Control_L up")
	// A key that needs Shift gets it; one already held is not pressed twice.
	f2 := newFake(100, 80)
	e2 := newTestExecutor(t, f2, ScreenshotSize{})
	run(t, e2, noShot, actions.KeyPress{Keys: actions.MustKeys("ctrl", "A")}, actions.KeyPress{Keys: actions.MustKeys("shift+A")})
	checkEvents(t, f2.Events,
		"key Control_L down", "key Shift_L down", "key A down", "key A up", "key Shift_L up", "key Control_L up",
		"key Shift_L down", "key A down", "key A up", "key Shift_L up")
}

// TestTypeExact: what a US-layout guest decodes is the text, byte for byte.
func TestTypeExact(t *testing.T) {
	all := make([]byte, 0, 95)
	for c := byte(0x20); c < 0x7f; c++ {
		all = append(all, c)
	}
	for _, c := range []struct{ text, want string }{
		{`Hello, World! <a href="x">`, ""},
		{`~!@#$%^&*()_+{}|:"<>?`, ""},
		{"`1234567890-=[]\\;',./", ""},
		{string(all), ""},
		{"line1\nline2\tcol\n", ""},
		{"aAB!\n\r\nb\rc", "aAB!\n\nb\nc"}, // \r\n is one Return, a lone \r one too
		{strings.Repeat("The quick brown fox jumps over the lazy dog. ", 90), ""}, // long: not truncated
	} {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, actions.TypeText{Text: c.text})
		want := c.want
		if want == "" {
			want = c.text
		}
		if got := guestUS(t, f.Events); got != want {
			t.Errorf("typed %q\n guest got %q", c.text, got)
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("typing %q left pressed %v", c.text, s)
		}
	}
}

// TestNoCapsLockToggle: QEMU's VNC server (ui/vnc.c do_key_event,
// lock_key_sync, on by default) presses Caps Lock itself when a letter's
// keysym disagrees in case with the Shift it has seen down. Replaying what
// the player sends through that rule, Caps Lock must never change.
func TestNoCapsLockToggle(t *testing.T) {
	for _, c := range []struct {
		name string
		acts []actions.Action
	}{
		{"ctrl+shift+t", []actions.Action{actions.KeyPress{Keys: actions.MustKeys("ctrl+shift+t")}}},
		{"shift+a", []actions.Action{actions.KeyPress{Keys: actions.MustKeys("shift+a")}}},
		{"ctrl+A", []actions.Action{actions.KeyPress{Keys: actions.MustKeys("ctrl", "A")}}},
		{"typing", []actions.Action{actions.TypeText{Text: "Hello World aBc"}}},
		{"typing with shift held", []actions.Action{
			actions.KeyDown{Keys: actions.MustKeys("shift")}, actions.TypeText{Text: "abc"},
			actions.KeyUp{Keys: actions.MustKeys("shift")}, actions.TypeText{Text: "abc"}}},
		{"key_down t with shift held", []actions.Action{
			actions.KeyDown{Keys: actions.MustKeys("shift")}, actions.KeyDown{Keys: actions.MustKeys("t")},
			actions.KeyUp{Keys: actions.MustKeys("t")}, actions.KeyUp{Keys: actions.MustKeys("shift")}}},
	} {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, c.acts...)
		if n := qemuCapsToggles(f.Keys); n != 0 {
			t.Errorf("%s: QEMU would press Caps Lock %d times; keys sent: %v", c.name, n, f.Keys)
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("%s: left pressed %v", c.name, s)
		}
	}
}

// qemuCapsToggles counts the Caps Lock presses QEMU 7.2's lock_key_sync
// would make for these key events (Caps Lock off at the start).
func qemuCapsToggles(keys []playertest.KeyEvent) int {
	shift, caps, n := 0, false, 0
	for _, k := range keys {
		switch {
		case k.Keysym == 0xffe1 || k.Keysym == 0xffe2: // Shift_L, Shift_R
			if k.Down {
				shift++
			} else if shift > 0 {
				shift--
			}
		case k.Down && ((k.Keysym >= 'a' && k.Keysym <= 'z') || (k.Keysym >= 'A' && k.Keysym <= 'Z')):
			upper := k.Keysym <= 'Z'
			if (caps && upper == (shift > 0)) || (!caps && upper != (shift > 0)) {
				caps = !caps
				n++
			}
		}
	}
	return n
}

func TestKeyDownUpAcrossRuns(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, actions.KeyDown{Keys: actions.MustKeys("shift")})
	run(t, e, noShot, actions.Click{At: pt(1, 1), Modifiers: actions.MustKeys("shift")}) // shift already held: not pressed again
	if keys, _ := e.Held(); strings.Join(keys, ",") != "Shift_L" {
		t.Errorf("held keys %v", keys)
	}
	if !f.Down["Shift_L"] {
		t.Error("the guest does not have Shift down between runs")
	}
	run(t, e, noShot, actions.KeyUp{Keys: actions.MustKeys("shift")})
	checkEvents(t, f.Events,
		"key Shift_L down",
		"ptr 1,1 0x00", "ptr 1,1 0x01", "ptr 1,1 0x00",
		"key Shift_L up")
	if keys, _ := e.Held(); len(keys) != 0 {
		t.Errorf("held keys after key_up %v", keys)
	}
}

func TestMouseDownMoveUp(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, actions.Move{To: actions.Point{X: 10, Y: 10}})
	run(t, e, noShot, actions.ButtonDown{Button: actions.ButtonLeft})
	run(t, e, noShot, actions.Move{To: actions.Point{X: 50, Y: 60}})
	if _, b := e.Held(); len(b) != 1 || b[0] != actions.ButtonLeft {
		t.Errorf("held buttons %v", b)
	}
	run(t, e, noShot, actions.ButtonUp{})
	checkEvents(t, f.Events, "ptr 10,10 0x00", "ptr 10,10 0x01", "ptr 50,60 0x01", "ptr 50,60 0x00")
}

// TestHoldKey: the keys are down for the duration and up afterwards.
func TestHoldKey(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, actions.HoldKey{Keys: actions.MustKeys("shift"), Duration: 1500 * time.Millisecond})
	checkEvents(t, f.Events, "key Shift_L down", "key Shift_L up")
	if held := f.At[1] - f.At[0]; held < 1500*time.Millisecond || held > 1600*time.Millisecond {
		t.Errorf("held %v, want 1.5 s", held)
	}
}

// releaseCases are action lists that press keys and buttons in every way.
func releaseCases() [][]actions.Action {
	return [][]actions.Action{
		{actions.KeyDown{Keys: actions.MustKeys("alt")}, actions.Click{At: pt(5, 5), Count: 2, Modifiers: actions.MustKeys("ctrl+shift")}, actions.TypeText{Text: "AB"}},
		{actions.ButtonDown{At: pt(3, 3), Button: actions.ButtonRight}, actions.Drag{From: pt(1, 1), Via: []actions.Point{{X: 40, Y: 1}}, To: actions.Point{X: 40, Y: 40}, Modifiers: actions.MustKeys("super")}},
		{actions.KeyDown{Keys: actions.MustKeys("ctrl", "A")}, actions.Scroll{At: pt(9, 9), Direction: actions.ScrollDown, Amount: 2, Modifiers: actions.MustKeys("alt")}, actions.KeyUp{Keys: actions.MustKeys("A")}},
		{actions.HoldKey{Keys: actions.MustKeys("shift+F1"), Duration: time.Millisecond}, actions.KeyPress{Keys: actions.MustKeys("ctrl+alt+Delete")}, actions.TypeText{Text: "a!b@\n"}},
		{actions.Move{To: actions.Point{X: 2, Y: 2}}, actions.ButtonDown{}, actions.Move{To: actions.Point{X: 9, Y: 9}}, actions.ButtonUp{}, actions.KeyDown{Keys: actions.MustKeys("shift")}},
	}
}

// TestReleasesAfterError fails the display at each event of each case in
// turn: afterwards the guest has nothing pressed and the executor holds
// nothing, and the error names the action.
func TestReleasesAfterError(t *testing.T) {
	for ci, acts := range releaseCases() {
		total := func() int {
			f := newFake(100, 80)
			e := newTestExecutor(t, f, ScreenshotSize{})
			run(t, e, noShot, acts...)
			return f.N
		}()
		for failAt := 1; failAt <= total; failAt++ {
			f := newFake(100, 80)
			f.FailAt = failAt
			e := newTestExecutor(t, f, ScreenshotSize{})
			res, err := e.Run(context.Background(), acts, noShot)
			if !errors.Is(err, actions.ErrDisplay) || !errors.Is(err, errWire) {
				t.Fatalf("case %d fail at %d: err %v", ci, failAt, err)
			}
			if !strings.Contains(err.Error(), "actions[") {
				t.Errorf("case %d fail at %d: error %q does not name the action", ci, failAt, err)
			}
			if s := f.Stuck(); len(s) != 0 {
				t.Errorf("case %d fail at %d: %v left pressed; guest got %v", ci, failAt, s, f.Events)
			}
			if keys, buttons := e.Held(); len(keys)+len(buttons) != 0 {
				t.Errorf("case %d fail at %d: executor still holds %v %v", ci, failAt, keys, buttons)
			}
			if res.Executed >= len(acts) {
				t.Errorf("case %d fail at %d: executed %d", ci, failAt, res.Executed)
			}
		}
		// Without a failure, Release lets go of whatever the agent held.
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, acts...)
		if err := e.Release(); err != nil {
			t.Fatal(err)
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("case %d: %v left pressed after Release", ci, s)
		}
	}
}

// TestCancelledReleases: a request cancelled mid-action releases what it
// pressed and what the agent held.
func TestCancelledReleases(t *testing.T) {
	for ci, acts := range releaseCases() {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		ctx, cancel := context.WithCancel(context.Background())
		f.OnEvent = func() {
			if f.N == 3 {
				cancel()
			}
		}
		_, err := e.Run(ctx, acts, noShot)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("case %d: err %v", ci, err)
		}
		if s := f.Stuck(); len(s) != 0 {
			t.Errorf("case %d: %v left pressed; guest got %v", ci, s, f.Events)
		}
	}
}

func TestValidatesBeforeSending(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	mv := actions.Move{To: actions.Point{X: 1, Y: 1}}
	cases := []struct {
		acts  []actions.Action
		field string
		kind  error
	}{
		{[]actions.Action{mv, actions.Click{At: pt(1366, 10)}}, "actions[1].x", actions.ErrOutOfBounds},
		{[]actions.Action{mv, actions.Drag{From: pt(0, 800), To: actions.Point{X: 5, Y: 5}}}, "actions[1].from", actions.ErrOutOfBounds},
		{[]actions.Action{mv, actions.Drag{Via: []actions.Point{{X: 1, Y: 1}, {X: 1, Y: 768}}, To: actions.Point{X: 5, Y: 5}}}, "actions[1].via[1]", actions.ErrOutOfBounds},
		{[]actions.Action{actions.Zoom{Region: [4]int{0, 0, 1367, 10}}}, "actions[0].region", actions.ErrOutOfBounds},
		{[]actions.Action{mv, actions.Click{Button: actions.ButtonBack}}, "actions[1].button", actions.ErrUnsupportedButton},
		{[]actions.Action{mv, actions.TypeText{Text: "ok"}, actions.TypeText{Text: "ünicode"}}, "actions[2].text", actions.ErrUntypable},
		{[]actions.Action{actions.KeyPress{}}, "actions[0].keys", actions.ErrUnknownKey},
		{[]actions.Action{mv, actions.Click{Modifiers: actions.MustKeys("a")}}, "actions[1].modifiers", actions.ErrUnknownKey},
		{[]actions.Action{mv, nil}, "actions[1].kind", actions.ErrUnsupportedAction},
		{[]actions.Action{actions.Wait{}}, "actions[0].duration_ms", actions.ErrInvalid},
	}
	for _, c := range cases {
		_, err := e.Run(context.Background(), c.acts, noShot)
		if !errors.Is(err, c.kind) || fielderr.Field(err) != c.field {
			t.Errorf("%v: err %v (field %q), want %v on %s", c.acts, err, fielderr.Field(err), c.kind, c.field)
		}
		if len(f.Events) != 0 {
			t.Errorf("%v: sent %v before failing validation", c.acts, f.Events)
		}
	}
	_, err := e.Run(context.Background(), []actions.Action{actions.Click{At: pt(1366, 10)}}, noShot)
	if !strings.Contains(err.Error(), "[1366, 10] is outside the 1366x768 screenshot") {
		t.Errorf("off-screen message: %v", err)
	}
}

// TestScaledCoordinates: on displays of several sizes, a click at any
// screenshot pixel lands on the native pixel under its centre, and
// cursor_position reports the screenshot pixel back.
func TestScaledCoordinates(t *testing.T) {
	for _, native := range [][2]int{{1920, 1080}, {1280, 800}, {1024, 768}, {2560, 1440}, {800, 600}} {
		f := newFake(native[0], native[1])
		e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
		sw, sh := e.Scaler().ScreenshotSize()
		for _, p := range []actions.Point{{X: 0, Y: 0}, {X: sw - 1, Y: sh - 1}, {X: sw / 2, Y: sh / 2}, {X: sw / 3, Y: sh - 1}, {X: 17, Y: 29}} {
			f.Events = nil
			res := run(t, e, noShot, actions.Click{At: &p}, actions.CursorPosition{})
			wx := (2*p.X + 1) * native[0] / (2 * sw)
			wy := (2*p.Y + 1) * native[1] / (2 * sh)
			if got := presses(f.Events, maskLeft); len(got) != 1 || got[0] != fmt.Sprintf("%d,%d", wx, wy) {
				t.Errorf("%v: click at screenshot %v pressed at %v, want %d,%d", native, p, got, wx, wy)
			}
			if want := fmt.Sprintf("X=%d,Y=%d", p.X, p.Y); res.Text != want {
				t.Errorf("%v: cursor_position after a click at %v = %q", native, p, res.Text)
			}
			if res.Cursor == nil || *res.Cursor != image.Pt(p.X, p.Y) {
				t.Errorf("%v: cursor_position after a click at %v: Cursor %v", native, p, res.Cursor)
			}
		}
	}
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	res := run(t, e, RunOptions{}, actions.Click{At: pt(683, 384)}, actions.CursorPosition{})
	if res.Image != nil {
		t.Errorf("auto policy took a screenshot after cursor_position")
	}
	f.X, f.Y = 1919, 1079
	if res = run(t, e, RunOptions{}, actions.CursorPosition{}); res.Text != "X=1365,Y=767" || res.Cursor == nil || *res.Cursor != image.Pt(1365, 767) {
		t.Errorf("cursor_position at the corner = %q (%v)", res.Text, res.Cursor)
	}
	if res = run(t, e, noShot, actions.Move{To: actions.Point{X: 5, Y: 5}}); res.Cursor != nil {
		t.Errorf("a run without cursor_position has Cursor %v", res.Cursor)
	}
}

// TestPacing checks the pacing properties the guest needs, on a virtual
// clock: key events at least KeyGap apart (PS/2 queue), a switch between
// keyboard and pointer at least DeviceGap, and a triple click's presses
// inside the shortest common double-click time (Xfce, 250 ms).
func TestPacing(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, actions.TypeText{Text: "aB"}, actions.Click{At: pt(1, 1), Count: 3, Modifiers: actions.MustKeys("ctrl")},
		actions.KeyPress{Keys: actions.MustKeys("alt+Tab")}, actions.Scroll{Direction: actions.ScrollDown, Amount: 2})
	p := DefaultPacing
	var pressTimes []time.Duration
	for i := 1; i < len(f.Events); i++ {
		gap := f.At[i] - f.At[i-1]
		prevKey, key := strings.HasPrefix(f.Events[i-1], "key"), strings.HasPrefix(f.Events[i], "key")
		switch {
		case prevKey && key && gap < p.KeyGap:
			t.Errorf("%q after %q: %v apart, want >= %v", f.Events[i], f.Events[i-1], gap, p.KeyGap)
		case prevKey != key && gap < p.DeviceGap:
			t.Errorf("%q after %q: %v apart on a device switch, want >= %v", f.Events[i], f.Events[i-1], gap, p.DeviceGap)
		}
		if strings.HasSuffix(f.Events[i], " 0x01") {
			pressTimes = append(pressTimes, f.At[i])
		}
	}
	if len(pressTimes) != 3 {
		t.Fatalf("presses %v", pressTimes)
	}
	if d := pressTimes[2] - pressTimes[0]; d >= 250*time.Millisecond || d < 2*p.ClickHold {
		t.Errorf("triple click presses span %v", d)
	}
	// A Pacing of zero sends events back to back.
	f2 := newFake(100, 80)
	e2, _ := NewExecutor(f2, ExecutorConfig{Pacing: &Pacing{}})
	start := time.Now()
	run(t, e2, noShot, actions.TypeText{Text: strings.Repeat("x", 500)})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("unpaced typing of 500 characters took %v", d)
	}
}

func decodePNG(t *testing.T, img *Image) image.Image {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(img.Data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := png.Decode(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestScreenshotPolicyAndSettle(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})

	// Input then auto: settle with the quiet time, then a screenshot at the
	// session size.
	res := run(t, e, RunOptions{SettleQuietMS: 80, SettleMaxMS: 900}, actions.Move{To: actions.Point{X: 1, Y: 1}})
	if res.Image == nil || res.Image.Width != 1366 || res.Image.Height != 768 || res.Image.MediaType != "image/png" {
		t.Fatalf("image %+v", res.Image)
	}
	if m := decodePNG(t, res.Image); m.Bounds().Dx() != 1366 {
		t.Errorf("decoded %v", m.Bounds())
	}
	if strings.Join(f.Settles, ";") != "settle 80ms 900ms" || res.SettleMS != 7 {
		t.Errorf("settles %v, settle_ms %v", f.Settles, res.SettleMS)
	}

	// A plain screenshot needs only a fresh frame: quiet 0.
	f.Settles = nil
	res = run(t, e, RunOptions{}, actions.Screenshot{})
	if res.Image == nil || strings.Join(f.Settles, ";") != "settle 0s 2s" {
		t.Errorf("screenshot: image %v settles %v", res.Image != nil, f.Settles)
	}

	// An empty request is a screenshot.
	f.Settles = nil
	if res = run(t, e, RunOptions{}); res.Image == nil {
		t.Error("empty request returned no screenshot")
	}

	// never: no image, but input still settles.
	f.Settles = nil
	res = run(t, e, noShot, actions.Move{To: actions.Point{X: 2, Y: 2}})
	if res.Image != nil || len(f.Settles) != 1 {
		t.Errorf("never: image %v settles %v", res.Image, f.Settles)
	}

	// always after a screenshot that followed the input: no second one.
	f.Settles = nil
	res = run(t, e, RunOptions{Screenshot: ScreenshotAlways}, actions.Move{To: actions.Point{X: 2, Y: 2}}, actions.Screenshot{})
	if res.Image == nil || len(f.Settles) != 1 {
		t.Errorf("always: image %v settles %v", res.Image != nil, f.Settles)
	}

	// no_settle skips Settle.
	f.Settles = nil
	run(t, e, RunOptions{NoSettle: true}, actions.Move{To: actions.Point{X: 3, Y: 3}})
	if len(f.Settles) != 0 {
		t.Errorf("no_settle settled %v", f.Settles)
	}

	// A settle that hits its max is reported.
	f.Settled = 2 * time.Second
	res = run(t, e, RunOptions{}, actions.Move{To: actions.Point{X: 4, Y: 4}})
	if !res.SettleTimedOut {
		t.Error("settle at max not reported")
	}

	// JPEG.
	res = run(t, e, RunOptions{Format: FormatJPEG, JPEGQuality: 60}, actions.Screenshot{})
	if res.Image.MediaType != "image/jpeg" {
		t.Errorf("media type %s", res.Image.MediaType)
	}

	// Zoom returns the zoom, not a screenshot after it.
	res = run(t, e, RunOptions{}, actions.Zoom{Region: [4]int{0, 0, 200, 100}})
	if res.Image == nil || res.Image.Width != 1366 || res.Image.Height != 683 {
		t.Errorf("zoom image %+v", res.Image)
	}
}

func TestRunOptionsValidate(t *testing.T) {
	for _, o := range []RunOptions{
		{SettleQuietMS: -1}, {SettleQuietMS: 20000}, {SettleMaxMS: 70000},
		{SettleQuietMS: 500, SettleMaxMS: 100}, {Screenshot: "sometimes"},
		{Format: "gif"}, {JPEGQuality: 101},
	} {
		if err := o.Validate(); !errors.Is(err, actions.ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestDisplayResize(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	f.W, f.H, f.Img = 1280, 800, coordImage(1280, 800)
	res := run(t, e, RunOptions{}, actions.Screenshot{})
	if res.Image.Width != 1280 || res.Image.Height != 800 {
		t.Errorf("after resize: %dx%d", res.Image.Width, res.Image.Height)
	}
}

func TestPointerUnknown(t *testing.T) {
	f := newFake(100, 80)
	f.Unknown = true
	e := newTestExecutor(t, f, ScreenshotSize{})
	for _, a := range []actions.Action{actions.Click{}, actions.Scroll{Direction: actions.ScrollUp, Amount: 1},
		actions.CursorPosition{}, actions.Drag{To: actions.Point{X: 5, Y: 5}}, actions.ButtonDown{}} {
		_, err := e.Run(context.Background(), []actions.Action{a}, noShot)
		if !errors.Is(err, actions.ErrPointerUnknown) || !strings.Contains(err.Error(), "move the pointer first") {
			t.Errorf("%s: %v", a.Kind(), err)
		}
	}
	if len(f.Events) != 0 {
		t.Errorf("sent %v", f.Events)
	}
	res := run(t, e, noShot, actions.Move{To: actions.Point{X: 10, Y: 10}}, actions.Click{}, actions.CursorPosition{})
	if res.Text != "X=10,Y=10" {
		t.Errorf("cursor_position after move = %q", res.Text)
	}
}

// TestSettleFailureKeepsHeld: a failed settle or capture says nothing
// about the input, which was delivered; what the agent holds stays held.
func TestSettleFailureKeepsHeld(t *testing.T) {
	f := newFake(100, 80)
	f.SettleErr = errors.New("stale")
	e := newTestExecutor(t, f, ScreenshotSize{})
	_, err := e.Run(context.Background(), []actions.Action{actions.KeyDown{Keys: actions.MustKeys("shift")}, actions.Screenshot{}}, RunOptions{})
	if !errors.Is(err, actions.ErrDisplay) {
		t.Fatalf("err %v", err)
	}
	if keys, _ := e.Held(); len(keys) != 1 || !f.Down["Shift_L"] {
		t.Errorf("held %v after a settle failure", keys)
	}
	if err := e.Release(); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, f.Events, "key Shift_L down", "key Shift_L up")
}
