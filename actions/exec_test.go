package actions

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
)

// fakeDisplay is an in-memory Display standing in for the guest: it records
// the key and pointer events it is sent (never the executor's sleeps) and
// keeps the input state the guest would have, so tests assert what the
// guest received and what is still pressed.
type fakeDisplay struct {
	w, h      int
	x, y      int
	buttons   uint8           // the guest's button state
	down      map[string]bool // keys the guest may have down
	img       *image.RGBA
	events    []string
	n         int   // events sent so far
	failAt    int   // fail the failAt'th event (1-based); 0: never
	failErr   error // what it fails with
	settles   []string
	settled   time.Duration // what Settle reports
	settleErr error         // what Settle fails with
	moved     bool          // a pointer event was sent
	unknown   bool          // CursorPos is (-1, -1) until a pointer event, like vnc.Client
	now       time.Duration // virtual clock, advanced by the executor's sleeps
	at        []time.Duration
	onEvent   func() // called after each event
}

var errWire = errors.New("wire broke")

func newFake(w, h int) *fakeDisplay {
	return &fakeDisplay{w: w, h: h, img: coordImage(w, h), settled: 7 * time.Millisecond, down: map[string]bool{}}
}

func (f *fakeDisplay) Size() (int, int)      { return f.w, f.h }
func (f *fakeDisplay) Snapshot() *image.RGBA { return f.img }
func (f *fakeDisplay) CursorPos() (int, int) {
	if f.unknown && !f.moved {
		return -1, -1
	}
	return f.x, f.y
}

func (f *fakeDisplay) event(s string) error {
	f.n++
	f.at = append(f.at, f.now)
	defer func() {
		if f.onEvent != nil {
			f.onEvent()
		}
	}()
	if f.failAt != 0 && f.n == f.failAt {
		f.events = append(f.events, "FAILED "+s)
		if f.failErr != nil {
			return f.failErr
		}
		return errWire
	}
	f.events = append(f.events, s)
	return nil
}

func (f *fakeDisplay) Pointer(x, y int, buttons uint8) error {
	err := f.event(fmt.Sprintf("ptr %d,%d %#02x", x, y, buttons))
	if err != nil {
		f.buttons |= buttons // a press may have arrived; a release may not have
		return err
	}
	f.x, f.y, f.buttons, f.moved = x, y, buttons, true
	return nil
}

func (f *fakeDisplay) Key(keysym uint32, scancode uint16, down bool) error {
	dir := "up"
	if down {
		dir = "down"
	}
	name := keyName(keysym, scancode)
	if err := f.event("key " + name + " " + dir); err != nil {
		if down {
			f.down[name] = true // may have arrived
		}
		return err
	}
	f.down[name] = down
	return nil
}

func (f *fakeDisplay) Settle(ctx context.Context, quiet, max time.Duration) (time.Duration, error) {
	f.settles = append(f.settles, fmt.Sprintf("settle %v %v", quiet, max))
	return f.settled, f.settleErr
}

// stuck returns what the guest may still have pressed.
func (f *fakeDisplay) stuck() []string {
	var out []string
	for k, d := range f.down {
		if d {
			out = append(out, k)
		}
	}
	if f.buttons != 0 {
		out = append(out, fmt.Sprintf("buttons %#x", f.buttons))
	}
	slices.Sort(out)
	return out
}

// keyName names a keysym/scancode pair the way the tests spell it.
func keyName(keysym uint32, scancode uint16) string {
	for c := byte(0x20); c < 0x7f; c++ {
		if k := charKeys[c]; k.Keysym == keysym && k.Scancode == scancode {
			return k.Name
		}
	}
	for _, k := range keyIndex {
		if k.Keysym == keysym && k.Scancode == scancode {
			return k.Name
		}
	}
	return fmt.Sprintf("%#x/%#x", keysym, scancode)
}

func pt(x, y int) *Point { return &Point{X: x, Y: y} }

// newTestExecutor returns an executor on f with the default pacing, whose
// sleeps advance f's virtual clock instead of taking time.
func newTestExecutor(t *testing.T, f *fakeDisplay, size ScreenshotSize) *Executor {
	t.Helper()
	e, err := NewExecutor(f, ExecutorConfig{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	e.pace.sleep = func(ctx context.Context, d time.Duration) error {
		f.now += max(d, 0)
		return ctx.Err()
	}
	return e
}

func run(t *testing.T, e *Executor, opts RunOptions, acts ...Action) Result {
	t.Helper()
	res, err := e.Run(context.Background(), acts, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func checkEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("guest received:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

var noShot = RunOptions{Screenshot: ScreenshotNever}

// presses returns the pointer events that press bit (going from up to down).
func presses(events []string, bit uint8) []string {
	var out []string
	var prev uint8
	for _, ev := range events {
		var x, y int
		var mask uint8
		if _, err := fmt.Sscanf(ev, "ptr %d,%d %v", &x, &y, &mask); err != nil {
			continue
		}
		if mask&bit != 0 && prev&bit == 0 {
			out = append(out, fmt.Sprintf("%d,%d", x, y))
		}
		prev = mask
	}
	return out
}

// keysDownAt returns the keys down when the guest received event i.
func keysDownAt(events []string, i int) []string {
	down := map[string]bool{}
	for _, ev := range events[:i] {
		if f := strings.Fields(ev); f[0] == "key" {
			down[f[1]] = f[2] == "down"
		}
	}
	var out []string
	for k, d := range down {
		if d {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// TestClick: a click of any button, count and modifiers presses the button
// count times where asked, with exactly the modifiers down at each press,
// and leaves nothing pressed.
func TestClick(t *testing.T) {
	for _, c := range []struct {
		click Click
		bit   uint8
		at    string
		mods  []string
	}{
		{Click{At: pt(10, 20)}, maskLeft, "10,20", nil},
		{Click{At: pt(5, 6), Button: ButtonRight, Count: 2}, maskRight, "5,6", nil},
		{Click{At: pt(7, 8), Button: ButtonMiddle, Count: 1}, maskMiddle, "7,8", nil},
		{Click{Count: 3, Modifiers: MustKeys("ctrl+shift")}, maskLeft, "40,30", []string{"Control_L", "Shift_L"}},
		{Click{At: pt(1, 1), Count: 2, Modifiers: MustKeys("alt", "super")}, maskLeft, "1,1", []string{"Alt_L", "Super_L"}},
	} {
		f := newFake(100, 80)
		f.x, f.y = 40, 30
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, c.click)
		p := presses(f.events, c.bit)
		if len(p) != max(c.click.Count, 1) {
			t.Errorf("%+v: %d presses, want %d; guest got %v", c.click, len(p), max(c.click.Count, 1), f.events)
		}
		for i, ev := range f.events {
			if strings.HasPrefix(ev, "ptr") && strings.Contains(ev, fmt.Sprintf("%#02x", c.bit)) {
				if !strings.HasPrefix(ev, "ptr "+c.at+" ") {
					t.Errorf("%+v: press at %q, want %s", c.click, ev, c.at)
				}
				if got := keysDownAt(f.events, i); !slices.Equal(got, c.mods) {
					t.Errorf("%+v: keys down at the press %v, want %v", c.click, got, c.mods)
				}
			}
		}
		if s := f.stuck(); len(s) != 0 {
			t.Errorf("%+v: left pressed %v", c.click, s)
		}
		if len(f.settles) != 1 || f.settles[0] != "settle 150ms 2s" {
			t.Errorf("%+v: settles %v, want one with the defaults", c.click, f.settles)
		}
	}
}

// TestDrag: the button goes down at the start, stays down along a path
// through every via point in steps of at most DragStepPx, and comes up at
// the end, with the modifiers down throughout.
func TestDrag(t *testing.T) {
	for _, d := range []Drag{
		{From: pt(0, 0), To: Point{30, 0}, Modifiers: MustKeys("shift")},
		{From: pt(0, 0), Via: []Point{{100, 0}}, To: Point{100, 100}, Button: ButtonMiddle},
		{To: Point{50, 50}}, // from where the pointer is, to the same point
		{From: pt(199, 0), Via: []Point{{0, 199}, {199, 199}}, To: Point{0, 0}},
	} {
		f := newFake(200, 200)
		f.x, f.y = 50, 50
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, d)
		bit, _ := buttonMask(d.Button)
		from := Point{50, 50}
		if d.From != nil {
			from = *d.From
		}
		var path []Point
		var sawUp bool
		for i, ev := range f.events {
			var x, y int
			var mask uint8
			if _, err := fmt.Sscanf(ev, "ptr %d,%d %v", &x, &y, &mask); err != nil {
				continue
			}
			if mask&bit != 0 {
				if sawUp {
					t.Errorf("%+v: pressed again after the release", d)
				}
				path = append(path, Point{x, y})
				if got := keysDownAt(f.events, i); !slices.Equal(got, KeyNames(d.Modifiers)) {
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
		if s := f.stuck(); len(s) != 0 {
			t.Errorf("%+v: left pressed %v", d, s)
		}
	}
}

// TestScroll: one wheel press and release per click of the amount, with the
// direction's button, where asked.
func TestScroll(t *testing.T) {
	for dir, bit := range map[Direction]uint8{ScrollUp: maskWheelUp, ScrollDown: maskWheelDown} {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, Scroll{At: pt(7, 8), Direction: dir, Amount: 3, Modifiers: MustKeys("ctrl")})
		if p := presses(f.events, bit); strings.Join(p, " ") != "7,8 7,8 7,8" {
			t.Errorf("%s: wheel presses %v; guest got %v", dir, p, f.events)
		}
		if s := f.stuck(); len(s) != 0 {
			t.Errorf("%s: left pressed %v", dir, s)
		}
	}
}

func TestChord(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, KeyPress{Keys: MustKeys("ctrl+shift+t")})
	checkEvents(t, f.events,
		"key Control_L down", "key Shift_L down", "key t down",
		"key t up", "key Shift_L up", "key Control_L up")
	// A key that needs Shift gets it; one already held is not pressed twice.
	f2 := newFake(100, 80)
	e2 := newTestExecutor(t, f2, ScreenshotSize{})
	run(t, e2, noShot, KeyPress{Keys: MustKeys("ctrl", "A")}, KeyPress{Keys: MustKeys("shift+A")})
	checkEvents(t, f2.events,
		"key Control_L down", "key Shift_L down", "key A down", "key A up", "key Shift_L up", "key Control_L up",
		"key Shift_L down", "key A down", "key A up", "key Shift_L up")
}

// guestUS decodes key events the way a guest with a US layout and QEMU's
// scancode path would: by scancode and Shift state, ignoring the keysym.
func guestUS(t *testing.T, events []string) string {
	t.Helper()
	byName := map[string]Key{}
	for c := byte(0x20); c < 0x7f; c++ {
		byName[charKeys[c].Name] = charKeys[c]
	}
	for _, k := range keyIndex {
		byName[k.Name] = k
	}
	layout := map[uint16][2]byte{}
	for _, row := range usASCII {
		v := layout[row.code]
		if row.shift {
			v[1] = row.c
		} else {
			v[0] = row.c
		}
		layout[row.code] = v
	}
	layout[0x39] = [2]byte{' ', ' '}
	var out strings.Builder
	shift := false
	for _, ev := range events {
		f := strings.Fields(ev)
		if len(f) != 3 || f[0] != "key" {
			continue
		}
		k, ok := byName[f[1]]
		if !ok {
			t.Fatalf("unknown key in %q", ev)
		}
		down := f[2] == "down"
		switch {
		case k.Keysym == xkShiftL || k.Keysym == xkShiftR:
			shift = down
		case !down:
		case k.Name == "Return":
			out.WriteByte('\n')
		case k.Name == "Tab":
			out.WriteByte('\t')
		default:
			v, ok := layout[k.Scancode]
			if !ok {
				t.Fatalf("no character for %q", ev)
			}
			if shift {
				out.WriteByte(v[1])
			} else {
				out.WriteByte(v[0])
			}
		}
	}
	if shift {
		t.Error("Shift left down after typing")
	}
	return out.String()
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
		run(t, e, noShot, TypeText{Text: c.text})
		want := c.want
		if want == "" {
			want = c.text
		}
		if got := guestUS(t, f.events); got != want {
			t.Errorf("typed %q\n guest got %q", c.text, got)
		}
		if s := f.stuck(); len(s) != 0 {
			t.Errorf("typing %q left pressed %v", c.text, s)
		}
	}
}

func TestKeyDownUpAcrossRuns(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, KeyDown{Keys: MustKeys("shift")})
	run(t, e, noShot, Click{At: pt(1, 1), Modifiers: MustKeys("shift")}) // shift already held: not pressed again
	if keys, _ := e.Held(); strings.Join(keys, ",") != "Shift_L" {
		t.Errorf("held keys %v", keys)
	}
	if !f.down["Shift_L"] {
		t.Error("the guest does not have Shift down between runs")
	}
	run(t, e, noShot, KeyUp{Keys: MustKeys("shift")})
	checkEvents(t, f.events,
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
	run(t, e, noShot, Move{To: Point{10, 10}})
	run(t, e, noShot, ButtonDown{Button: ButtonLeft})
	run(t, e, noShot, Move{To: Point{50, 60}})
	if _, b := e.Held(); len(b) != 1 || b[0] != ButtonLeft {
		t.Errorf("held buttons %v", b)
	}
	run(t, e, noShot, ButtonUp{})
	checkEvents(t, f.events, "ptr 10,10 0x00", "ptr 10,10 0x01", "ptr 50,60 0x01", "ptr 50,60 0x00")
}

// TestHoldKey: the keys are down for the duration and up afterwards.
func TestHoldKey(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, HoldKey{Keys: MustKeys("shift"), Duration: 1500 * time.Millisecond})
	checkEvents(t, f.events, "key Shift_L down", "key Shift_L up")
	if held := f.at[1] - f.at[0]; held < 1500*time.Millisecond || held > 1600*time.Millisecond {
		t.Errorf("held %v, want 1.5 s", held)
	}
}

// releaseCases are action lists that press keys and buttons in every way.
func releaseCases() [][]Action {
	return [][]Action{
		{KeyDown{Keys: MustKeys("alt")}, Click{At: pt(5, 5), Count: 2, Modifiers: MustKeys("ctrl+shift")}, TypeText{Text: "AB"}},
		{ButtonDown{At: pt(3, 3), Button: ButtonRight}, Drag{From: pt(1, 1), Via: []Point{{40, 1}}, To: Point{40, 40}, Modifiers: MustKeys("super")}},
		{KeyDown{Keys: MustKeys("ctrl", "A")}, Scroll{At: pt(9, 9), Direction: ScrollDown, Amount: 2, Modifiers: MustKeys("alt")}, KeyUp{Keys: MustKeys("A")}},
		{HoldKey{Keys: MustKeys("shift+F1"), Duration: time.Millisecond}, KeyPress{Keys: MustKeys("ctrl+alt+Delete")}, TypeText{Text: "a!b@\n"}},
		{Move{To: Point{2, 2}}, ButtonDown{}, Move{To: Point{9, 9}}, ButtonUp{}, KeyDown{Keys: MustKeys("shift")}},
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
			return f.n
		}()
		for failAt := 1; failAt <= total; failAt++ {
			f := newFake(100, 80)
			f.failAt = failAt
			e := newTestExecutor(t, f, ScreenshotSize{})
			res, err := e.Run(context.Background(), acts, noShot)
			if !errors.Is(err, ErrDisplay) || !errors.Is(err, errWire) {
				t.Fatalf("case %d fail at %d: err %v", ci, failAt, err)
			}
			if !strings.Contains(err.Error(), "actions[") {
				t.Errorf("case %d fail at %d: error %q does not name the action", ci, failAt, err)
			}
			if s := f.stuck(); len(s) != 0 {
				t.Errorf("case %d fail at %d: %v left pressed; guest got %v", ci, failAt, s, f.events)
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
		if s := f.stuck(); len(s) != 0 {
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
		f.onEvent = func() {
			if f.n == 3 {
				cancel()
			}
		}
		_, err := e.Run(ctx, acts, noShot)
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("case %d: err %v", ci, err)
		}
		if s := f.stuck(); len(s) != 0 {
			t.Errorf("case %d: %v left pressed; guest got %v", ci, s, f.events)
		}
	}
}

func TestValidatesBeforeSending(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	mv := Move{To: Point{1, 1}}
	cases := []struct {
		acts  []Action
		field string
		kind  error
	}{
		{[]Action{mv, Click{At: pt(1366, 10)}}, "actions[1].x", ErrOutOfBounds},
		{[]Action{mv, Drag{From: pt(0, 800), To: Point{5, 5}}}, "actions[1].from", ErrOutOfBounds},
		{[]Action{mv, Drag{Via: []Point{{1, 1}, {1, 768}}, To: Point{5, 5}}}, "actions[1].via[1]", ErrOutOfBounds},
		{[]Action{Zoom{Region: [4]int{0, 0, 1367, 10}}}, "actions[0].region", ErrOutOfBounds},
		{[]Action{mv, Click{Button: ButtonBack}}, "actions[1].button", ErrUnsupportedButton},
		{[]Action{mv, TypeText{Text: "ok"}, TypeText{Text: "ünicode"}}, "actions[2].text", ErrUntypable},
		{[]Action{KeyPress{}}, "actions[0].keys", ErrUnknownKey},
		{[]Action{mv, Click{Modifiers: MustKeys("a")}}, "actions[1].modifiers", ErrUnknownKey},
		{[]Action{mv, nil}, "actions[1].kind", ErrUnsupportedAction},
		{[]Action{Wait{}}, "actions[0].duration_ms", ErrInvalid},
	}
	for _, c := range cases {
		_, err := e.Run(context.Background(), c.acts, noShot)
		if !errors.Is(err, c.kind) || fieldOf(err) != c.field {
			t.Errorf("%v: err %v (field %q), want %v on %s", c.acts, err, fieldOf(err), c.kind, c.field)
		}
		if len(f.events) != 0 {
			t.Errorf("%v: sent %v before failing validation", c.acts, f.events)
		}
	}
	_, err := e.Run(context.Background(), []Action{Click{At: pt(1366, 10)}}, noShot)
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
		for _, p := range []Point{{0, 0}, {sw - 1, sh - 1}, {sw / 2, sh / 2}, {sw / 3, sh - 1}, {17, 29}} {
			f.events = nil
			res := run(t, e, noShot, Click{At: &p}, CursorPosition{})
			wx := (2*p.X + 1) * native[0] / (2 * sw)
			wy := (2*p.Y + 1) * native[1] / (2 * sh)
			if got := presses(f.events, maskLeft); len(got) != 1 || got[0] != fmt.Sprintf("%d,%d", wx, wy) {
				t.Errorf("%v: click at screenshot %v pressed at %v, want %d,%d", native, p, got, wx, wy)
			}
			if want := fmt.Sprintf("X=%d,Y=%d", p.X, p.Y); res.Text != want {
				t.Errorf("%v: cursor_position after a click at %v = %q", native, p, res.Text)
			}
		}
	}
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	res := run(t, e, RunOptions{}, Click{At: pt(683, 384)}, CursorPosition{})
	if res.Image != nil {
		t.Errorf("auto policy took a screenshot after cursor_position")
	}
	f.x, f.y = 1919, 1079
	if res = run(t, e, RunOptions{}, CursorPosition{}); res.Text != "X=1365,Y=767" {
		t.Errorf("cursor_position at the corner = %q", res.Text)
	}
}

// TestPacing checks the pacing properties the guest needs, on a virtual
// clock: key events at least KeyGap apart (PS/2 queue), a switch between
// keyboard and pointer at least DeviceGap, and a triple click's presses
// inside the shortest common double-click time (Xfce, 250 ms).
func TestPacing(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, TypeText{Text: "aB"}, Click{At: pt(1, 1), Count: 3, Modifiers: MustKeys("ctrl")},
		KeyPress{Keys: MustKeys("alt+Tab")}, Scroll{Direction: ScrollDown, Amount: 2})
	p := DefaultPacing
	var pressTimes []time.Duration
	for i := 1; i < len(f.events); i++ {
		gap := f.at[i] - f.at[i-1]
		prevKey, key := strings.HasPrefix(f.events[i-1], "key"), strings.HasPrefix(f.events[i], "key")
		switch {
		case prevKey && key && gap < p.KeyGap:
			t.Errorf("%q after %q: %v apart, want >= %v", f.events[i], f.events[i-1], gap, p.KeyGap)
		case prevKey != key && gap < p.DeviceGap:
			t.Errorf("%q after %q: %v apart on a device switch, want >= %v", f.events[i], f.events[i-1], gap, p.DeviceGap)
		}
		if strings.HasSuffix(f.events[i], " 0x01") {
			pressTimes = append(pressTimes, f.at[i])
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
	run(t, e2, noShot, TypeText{Text: strings.Repeat("x", 500)})
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
	res := run(t, e, RunOptions{SettleQuietMS: 80, SettleMaxMS: 900}, Move{To: Point{1, 1}})
	if res.Image == nil || res.Image.Width != 1366 || res.Image.Height != 768 || res.Image.MediaType != "image/png" {
		t.Fatalf("image %+v", res.Image)
	}
	if m := decodePNG(t, res.Image); m.Bounds().Dx() != 1366 {
		t.Errorf("decoded %v", m.Bounds())
	}
	if strings.Join(f.settles, ";") != "settle 80ms 900ms" || res.SettleMS != 7 {
		t.Errorf("settles %v, settle_ms %v", f.settles, res.SettleMS)
	}

	// A plain screenshot needs only a fresh frame: quiet 0.
	f.settles = nil
	res = run(t, e, RunOptions{}, Screenshot{})
	if res.Image == nil || strings.Join(f.settles, ";") != "settle 0s 2s" {
		t.Errorf("screenshot: image %v settles %v", res.Image != nil, f.settles)
	}

	// An empty request is a screenshot.
	f.settles = nil
	if res = run(t, e, RunOptions{}); res.Image == nil {
		t.Error("empty request returned no screenshot")
	}

	// never: no image, but input still settles.
	f.settles = nil
	res = run(t, e, noShot, Move{To: Point{2, 2}})
	if res.Image != nil || len(f.settles) != 1 {
		t.Errorf("never: image %v settles %v", res.Image, f.settles)
	}

	// always after a screenshot that followed the input: no second one.
	f.settles = nil
	res = run(t, e, RunOptions{Screenshot: ScreenshotAlways}, Move{To: Point{2, 2}}, Screenshot{})
	if res.Image == nil || len(f.settles) != 1 {
		t.Errorf("always: image %v settles %v", res.Image != nil, f.settles)
	}

	// no_settle skips Settle.
	f.settles = nil
	run(t, e, RunOptions{NoSettle: true}, Move{To: Point{3, 3}})
	if len(f.settles) != 0 {
		t.Errorf("no_settle settled %v", f.settles)
	}

	// A settle that hits its max is reported.
	f.settled = 2 * time.Second
	res = run(t, e, RunOptions{}, Move{To: Point{4, 4}})
	if !res.SettleTimedOut {
		t.Error("settle at max not reported")
	}

	// JPEG.
	res = run(t, e, RunOptions{Format: FormatJPEG, JPEGQuality: 60}, Screenshot{})
	if res.Image.MediaType != "image/jpeg" {
		t.Errorf("media type %s", res.Image.MediaType)
	}

	// Zoom returns the zoom, not a screenshot after it.
	res = run(t, e, RunOptions{}, Zoom{Region: [4]int{0, 0, 200, 100}})
	if res.Image == nil || res.Image.Width != 1366 || res.Image.Height != 683 {
		t.Errorf("zoom image %+v", res.Image)
	}
	blocks := ClaudeToolResult("t1", res, nil).Content
	if len(blocks) != 1 || blocks[0].OfImage == nil || blocks[0].OfImage.Source.OfBase64 == nil {
		t.Errorf("claude content %+v", blocks)
	}
}

func TestRunOptionsValidate(t *testing.T) {
	for _, o := range []RunOptions{
		{SettleQuietMS: -1}, {SettleQuietMS: 20000}, {SettleMaxMS: 70000},
		{SettleQuietMS: 500, SettleMaxMS: 100}, {Screenshot: "sometimes"},
		{Format: "gif"}, {JPEGQuality: 101},
	} {
		if err := o.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

func TestClaudeContentText(t *testing.T) {
	r := Result{Text: "X=1,Y=2", Image: &Image{MediaType: "image/png", Data: "AA=="}}
	c := ClaudeToolResult("t1", r, nil).Content
	if len(c) != 2 || c[0].OfText == nil || c[0].OfText.Text != "X=1,Y=2" || c[1].OfImage == nil ||
		c[1].OfImage.Source.OfBase64.MediaType != "image/png" || c[1].OfImage.Source.OfBase64.Data != "AA==" {
		t.Errorf("content %+v", c)
	}
}

func TestDisplayResize(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	f.w, f.h, f.img = 1280, 800, coordImage(1280, 800)
	res := run(t, e, RunOptions{}, Screenshot{})
	if res.Image.Width != 1280 || res.Image.Height != 800 {
		t.Errorf("after resize: %dx%d", res.Image.Width, res.Image.Height)
	}
}

func TestPointerUnknown(t *testing.T) {
	f := newFake(100, 80)
	f.unknown = true
	e := newTestExecutor(t, f, ScreenshotSize{})
	for _, a := range []Action{Click{}, Scroll{Direction: ScrollUp, Amount: 1},
		CursorPosition{}, Drag{To: Point{5, 5}}, ButtonDown{}} {
		_, err := e.Run(context.Background(), []Action{a}, noShot)
		if !errors.Is(err, ErrPointerUnknown) || !strings.Contains(err.Error(), "move the pointer first") {
			t.Errorf("%s: %v", a.Kind(), err)
		}
	}
	if len(f.events) != 0 {
		t.Errorf("sent %v", f.events)
	}
	res := run(t, e, noShot, Move{To: Point{10, 10}}, Click{}, CursorPosition{})
	if res.Text != "X=10,Y=10" {
		t.Errorf("cursor_position after move = %q", res.Text)
	}
}

// TestSettleFailureKeepsHeld: a failed settle or capture says nothing
// about the input, which was delivered; what the agent holds stays held.
func TestSettleFailureKeepsHeld(t *testing.T) {
	f := newFake(100, 80)
	f.settleErr = errors.New("stale")
	e := newTestExecutor(t, f, ScreenshotSize{})
	_, err := e.Run(context.Background(), []Action{KeyDown{Keys: MustKeys("shift")}, Screenshot{}}, RunOptions{})
	if !errors.Is(err, ErrDisplay) {
		t.Fatalf("err %v", err)
	}
	if keys, _ := e.Held(); len(keys) != 1 || !f.down["Shift_L"] {
		t.Errorf("held %v after a settle failure", keys)
	}
	if err := e.Release(); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, f.events, "key Shift_L down", "key Shift_L up")
}
