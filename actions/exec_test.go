package actions

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	"image/png"
	"strings"
	"testing"
	"time"
)

// fakeDisplay is an in-memory Display that records what it is sent: the
// protocol edge only. Real-VM tests live with the lead.
type fakeDisplay struct {
	w, h      int
	x, y      int
	buttons   uint8
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
}

var errWire = errors.New("wire broke")

func newFake(w, h int) *fakeDisplay {
	return &fakeDisplay{w: w, h: h, img: coordImage(w, h), settled: 7 * time.Millisecond}
}

func (f *fakeDisplay) Size() (int, int)      { return f.w, f.h }
func (f *fakeDisplay) Snapshot() *image.RGBA { return f.img }
func (f *fakeDisplay) CursorPos() (int, int) {
	if f.unknown && !f.moved {
		return -1, -1
	}
	return f.x, f.y
}

func (f *fakeDisplay) fail() error {
	f.n++
	if f.failAt != 0 && f.n == f.failAt {
		if f.failErr != nil {
			return f.failErr
		}
		return errWire
	}
	return nil
}

func (f *fakeDisplay) Pointer(x, y int, buttons uint8) error {
	if err := f.fail(); err != nil {
		f.events = append(f.events, fmt.Sprintf("FAILED ptr %d,%d %#02x", x, y, buttons))
		return err
	}
	f.x, f.y, f.buttons, f.moved = x, y, buttons, true
	f.events = append(f.events, fmt.Sprintf("ptr %d,%d %#02x", x, y, buttons))
	return nil
}

func (f *fakeDisplay) Key(keysym uint32, scancode uint16, down bool) error {
	dir := "up"
	if down {
		dir = "down"
	}
	name := keyName(keysym, scancode)
	if err := f.fail(); err != nil {
		f.events = append(f.events, "FAILED key "+name+" "+dir)
		return err
	}
	f.events = append(f.events, "key "+name+" "+dir)
	return nil
}

func (f *fakeDisplay) Settle(ctx context.Context, quiet, max time.Duration) (time.Duration, error) {
	f.settles = append(f.settles, fmt.Sprintf("settle %v %v", quiet, max))
	f.events = append(f.events, "settle")
	return f.settled, f.settleErr
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

// newTestExecutor returns an executor on f whose sleeps are recorded as
// events instead of slept.
func newTestExecutor(t *testing.T, f *fakeDisplay, size ScreenshotSize) *Executor {
	t.Helper()
	e, err := NewExecutor(f, ExecutorConfig{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	e.sleep = func(ctx context.Context, d time.Duration) error {
		if d > 0 {
			f.events = append(f.events, "sleep "+d.String())
		}
		return ctx.Err()
	}
	return e
}

// inputEvents returns the recorded events without sleeps and settles.
func inputEvents(f *fakeDisplay) []string {
	var out []string
	for _, e := range f.events {
		if !strings.HasPrefix(e, "sleep") && e != "settle" {
			out = append(out, e)
		}
	}
	return out
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
		t.Errorf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

var noShot = RunOptions{Screenshot: ScreenshotNever}

func TestRunClick(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, ClickAt(pt(10, 20), ButtonLeft, 1))
	checkEvents(t, f.events,
		"ptr 10,20 0x00",
		"ptr 10,20 0x01",
		"sleep 15ms",
		"ptr 10,20 0x00",
		"settle")
	if f.settles[0] != "settle 150ms 2s" {
		t.Errorf("settle args %v, want the defaults", f.settles)
	}
}

func TestRunDoubleClickPacing(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, ClickAt(pt(5, 6), ButtonRight, 2))
	checkEvents(t, f.events,
		"ptr 5,6 0x00",
		"ptr 5,6 0x04", "sleep 15ms", "ptr 5,6 0x00",
		"sleep 50ms",
		"ptr 5,6 0x04", "sleep 15ms", "ptr 5,6 0x00",
		"settle")
}

func TestRunTripleClickHereWithModifiers(t *testing.T) {
	f := newFake(100, 80)
	f.x, f.y = 40, 30
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, ClickAt(nil, ButtonLeft, 3, "ctrl+shift"))
	checkEvents(t, f.events,
		"ptr 40,30 0x00",
		"sleep 20ms", // device switch: pointer -> keyboard
		"key Control_L down",
		"sleep 4ms",
		"key Shift_L down",
		"sleep 20ms",
		"ptr 40,30 0x01", "sleep 15ms", "ptr 40,30 0x00",
		"sleep 50ms",
		"ptr 40,30 0x01", "sleep 15ms", "ptr 40,30 0x00",
		"sleep 50ms",
		"ptr 40,30 0x01", "sleep 15ms", "ptr 40,30 0x00",
		"sleep 20ms",
		"key Shift_L up",
		"sleep 4ms",
		"key Control_L up",
		"settle")
}

func TestRunDrag(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, Action{Kind: KindDrag, From: pt(0, 0), At: pt(30, 0), Modifiers: []string{"shift"}})
	checkEvents(t, inputEvents(f),
		"ptr 0,0 0x00",
		"key Shift_L down",
		"ptr 0,0 0x01",
		"ptr 10,0 0x01",
		"ptr 20,0 0x01",
		"ptr 30,0 0x01",
		"ptr 30,0 0x00",
		"key Shift_L up")
	// Via points and a long segment split into <= 24 px steps.
	f2 := newFake(200, 200)
	e2 := newTestExecutor(t, f2, ScreenshotSize{})
	run(t, e2, noShot, Action{Kind: KindDrag, From: pt(0, 0), Via: []Point{{100, 0}}, At: pt(100, 100), Button: ButtonMiddle})
	ev := inputEvents(f2)
	if ev[1] != "ptr 0,0 0x02" || ev[len(ev)-1] != "ptr 100,100 0x00" || ev[len(ev)-2] != "ptr 100,100 0x02" {
		t.Errorf("drag events %v", ev)
	}
	sawVia := false
	for _, s := range ev {
		if s == "ptr 100,0 0x02" {
			sawVia = true
		}
	}
	if !sawVia || len(ev) != 2+5+5+1 {
		t.Errorf("drag through via: %d events %v", len(ev), ev)
	}
}

func TestRunDragFromPointer(t *testing.T) {
	f := newFake(100, 80)
	f.x, f.y = 50, 50
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, Action{Kind: KindDrag, At: pt(50, 50)})
	checkEvents(t, inputEvents(f), "ptr 50,50 0x00", "ptr 50,50 0x01", "ptr 50,50 0x01", "ptr 50,50 0x00")
}

func TestRunScrollWithModifiers(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, Action{Kind: KindScroll, At: pt(7, 8), Direction: ScrollDown, Amount: 2, Modifiers: []string{"ctrl"}})
	checkEvents(t, f.events,
		"ptr 7,8 0x00",
		"sleep 20ms",
		"key Control_L down",
		"sleep 20ms",
		"ptr 7,8 0x10", "ptr 7,8 0x00",
		"sleep 15ms",
		"ptr 7,8 0x10", "ptr 7,8 0x00",
		"sleep 20ms",
		"key Control_L up",
		"settle")
	for dir, bit := range map[Direction]string{ScrollUp: "0x08", ScrollLeft: "0x20", ScrollRight: "0x40"} {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, Action{Kind: KindScroll, Direction: dir, Amount: 1})
		checkEvents(t, inputEvents(f), "ptr 0,0 0x00", "ptr 0,0 "+bit, "ptr 0,0 0x00")
	}
}

func TestRunChord(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, KeyChord("ctrl+shift+t"))
	checkEvents(t, f.events,
		"key Control_L down", "sleep 4ms",
		"key Shift_L down", "sleep 4ms",
		"key t down", "sleep 4ms",
		"key t up", "sleep 4ms",
		"key Shift_L up", "sleep 4ms",
		"key Control_L up",
		"settle")
	// A key that needs Shift gets it; one already held is not pressed twice.
	f2 := newFake(100, 80)
	e2 := newTestExecutor(t, f2, ScreenshotSize{})
	run(t, e2, noShot, KeyChord("ctrl", "A"), KeyChord("shift+A"))
	checkEvents(t, inputEvents(f2),
		"key Control_L down", "key Shift_L down", "key A down", "key A up", "key Shift_L up", "key Control_L up",
		"key Shift_L down", "key A down", "key A up", "key Shift_L up")
}

func TestRunTypeShift(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, TypeText("aAB!\n\r\nb"))
	checkEvents(t, inputEvents(f),
		"key a down", "key a up",
		"key Shift_L down",
		"key A down", "key A up",
		"key B down", "key B up",
		"key exclam down", "key exclam up",
		"key Shift_L up",
		"key Return down", "key Return up",
		"key Return down", "key Return up", // \r\n is one Return
		"key b down", "key b up")
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

func TestRunTypeExact(t *testing.T) {
	all := make([]byte, 0, 95)
	for c := byte(0x20); c < 0x7f; c++ {
		all = append(all, c)
	}
	for _, text := range []string{
		`Hello, World! <a href="x">`,
		`~!@#$%^&*()_+{}|:"<>?`,
		"`1234567890-=[]\\;',./",
		string(all),
		"line1\nline2\tcol\n",
		strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200), // long: not truncated
	} {
		f := newFake(100, 80)
		e := newTestExecutor(t, f, ScreenshotSize{})
		run(t, e, noShot, TypeText(text))
		if got := guestUS(t, f.events); got != text {
			t.Errorf("typed %q\n guest got %q", text, got)
		}
	}
}

func TestRunKeyDownUpAcrossRuns(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, Action{Kind: KindKeyDown, Keys: []string{"shift"}})
	run(t, e, noShot, ClickAt(pt(1, 1), ButtonLeft, 1, "shift")) // shift already held: not pressed again
	if keys, _ := e.Held(); strings.Join(keys, ",") != "Shift_L" {
		t.Errorf("held keys %v", keys)
	}
	run(t, e, noShot, Action{Kind: KindKeyUp, Keys: []string{"shift"}})
	checkEvents(t, inputEvents(f),
		"key Shift_L down",
		"ptr 1,1 0x00", "ptr 1,1 0x01", "ptr 1,1 0x00",
		"key Shift_L up")
	if keys, _ := e.Held(); len(keys) != 0 {
		t.Errorf("held keys after key_up %v", keys)
	}
}

func TestRunMouseDownMoveUp(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, MoveTo(10, 10))
	run(t, e, noShot, Action{Kind: KindButtonDown, Button: ButtonLeft})
	run(t, e, noShot, MoveTo(50, 60))
	if _, b := e.Held(); len(b) != 1 || b[0] != ButtonLeft {
		t.Errorf("held buttons %v", b)
	}
	run(t, e, noShot, Action{Kind: KindButtonUp})
	checkEvents(t, inputEvents(f), "ptr 10,10 0x00", "ptr 10,10 0x01", "ptr 50,60 0x01", "ptr 50,60 0x00")
}

func TestRunHoldKey(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	run(t, e, noShot, Action{Kind: KindHoldKey, Keys: []string{"shift"}, DurationMS: 1500}, Action{Kind: KindWait, DurationMS: 250})
	checkEvents(t, f.events, "key Shift_L down", "sleep 1.5s", "key Shift_L up", "sleep 250ms", "settle")
}

// TestRunReleasesAfterError fails the display at each event of a click with
// modifiers in turn and checks nothing stays pressed.
func TestRunReleasesAfterError(t *testing.T) {
	acts := []Action{
		{Kind: KindKeyDown, Keys: []string{"alt"}}, // held on purpose; released too after a failure
		ClickAt(pt(5, 5), ButtonLeft, 2, "ctrl+shift"),
		TypeText("AB"),
	}
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
			t.Fatalf("fail at %d: err %v", failAt, err)
		}
		if !strings.Contains(err.Error(), "actions[") {
			t.Errorf("fail at %d: error %q does not name the action", failAt, err)
		}
		down := map[string]bool{}
		for _, ev := range f.events {
			fs := strings.Fields(ev)
			if fs[0] == "key" {
				down[fs[1]] = fs[2] == "down"
			}
			if fs[0] == "FAILED" && fs[1] == "key" && fs[3] == "down" {
				down[fs[2]] = true // may or may not have arrived: must be released
			}
		}
		for k, d := range down {
			if d {
				t.Errorf("fail at %d: %s left down; events %v", failAt, k, f.events)
			}
		}
		if f.buttons != 0 {
			t.Errorf("fail at %d: buttons %#x left down; events %v", failAt, f.buttons, f.events)
		}
		if keys, buttons := e.Held(); len(keys)+len(buttons) != 0 {
			t.Errorf("fail at %d: executor still holds %v %v", failAt, keys, buttons)
		}
		if res.Executed >= len(acts) {
			t.Errorf("fail at %d: executed %d", failAt, res.Executed)
		}
	}
}

func TestRunCancelledReleases(t *testing.T) {
	f := newFake(100, 80)
	e := newTestExecutor(t, f, ScreenshotSize{})
	ctx, cancel := context.WithCancel(context.Background())
	e.sleep = func(c context.Context, d time.Duration) error {
		if d == time.Second {
			cancel()
		}
		return c.Err()
	}
	_, err := e.Run(ctx, []Action{{Kind: KindHoldKey, Keys: []string{"ctrl+shift"}, DurationMS: 1000}}, noShot)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	checkEvents(t, inputEvents(f), "key Control_L down", "key Shift_L down", "key Shift_L up", "key Control_L up")
}

func TestRunValidatesBeforeSending(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	cases := []struct {
		acts  []Action
		field string
		kind  error
	}{
		{[]Action{MoveTo(1, 1), ClickAt(pt(1366, 10), ButtonLeft, 1)}, "actions[1].x", ErrOutOfBounds},
		{[]Action{MoveTo(1, 1), {Kind: KindDrag, From: pt(0, 800), At: pt(5, 5)}}, "actions[1].from", ErrOutOfBounds},
		{[]Action{{Kind: KindZoom, Region: []int{0, 0, 1367, 10}}}, "actions[0].region", ErrOutOfBounds},
		{[]Action{MoveTo(1, 1), ClickAt(nil, ButtonBack, 1)}, "actions[1].button", ErrUnsupportedButton},
		{[]Action{MoveTo(1, 1), TypeText("ok"), TypeText("ünicode")}, "actions[2].text", ErrUntypable},
		{[]Action{KeyChord("ctrl+nope")}, "actions[0].keys", ErrUnknownKey},
		{[]Action{{Kind: "teleport"}}, "actions[0].kind", ErrUnsupportedAction},
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
	_, err := e.Run(context.Background(), []Action{ClickAt(pt(1366, 10), ButtonLeft, 1)}, noShot)
	if !strings.Contains(err.Error(), "[1366, 10] is outside the 1366x768 screenshot") {
		t.Errorf("off-screen message: %v", err)
	}
}

func TestRunScaledCoordinatesAndCursor(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	res := run(t, e, RunOptions{}, ClickAt(pt(683, 384), ButtonLeft, 1), Action{Kind: KindCursorPosition})
	if ev := inputEvents(f); ev[0] != "ptr 960,540 0x00" {
		t.Errorf("click at screenshot 683,384 went to %v", ev[0])
	}
	if res.Text != "X=683,Y=384" {
		t.Errorf("cursor_position = %q", res.Text)
	}
	if res.Image != nil {
		t.Errorf("auto policy took a screenshot after cursor_position")
	}
	f.x, f.y = 1919, 1079
	res = run(t, e, RunOptions{}, Action{Kind: KindCursorPosition})
	if res.Text != "X=1365,Y=767" {
		t.Errorf("cursor_position at the corner = %q", res.Text)
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

func TestRunScreenshotPolicyAndSettle(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})

	// Input then auto: settle with the quiet time, then a screenshot at the
	// session size.
	res := run(t, e, RunOptions{SettleQuietMS: 80, SettleMaxMS: 900}, MoveTo(1, 1))
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
	res = run(t, e, RunOptions{}, Screenshot())
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
	res = run(t, e, noShot, MoveTo(2, 2))
	if res.Image != nil || len(f.settles) != 1 {
		t.Errorf("never: image %v settles %v", res.Image, f.settles)
	}

	// no_settle skips Settle.
	f.settles = nil
	run(t, e, RunOptions{NoSettle: true}, MoveTo(3, 3))
	if len(f.settles) != 0 {
		t.Errorf("no_settle settled %v", f.settles)
	}

	// A settle that hits its max is reported.
	f.settled = 2 * time.Second
	res = run(t, e, RunOptions{}, MoveTo(4, 4))
	if !res.SettleTimedOut {
		t.Error("settle at max not reported")
	}

	// JPEG.
	res = run(t, e, RunOptions{Format: FormatJPEG, JPEGQuality: 60}, Screenshot())
	if res.Image.MediaType != "image/jpeg" {
		t.Errorf("media type %s", res.Image.MediaType)
	}

	// Zoom returns the zoom, not a screenshot after it.
	res = run(t, e, RunOptions{}, Action{Kind: KindZoom, Region: []int{0, 0, 200, 100}})
	if res.Image == nil || res.Image.Width != 1366 || res.Image.Height != 683 {
		t.Errorf("zoom image %+v", res.Image)
	}
	blocks := res.ClaudeContent()
	if len(blocks) != 1 || blocks[0].Type != "image" || blocks[0].Source.Type != "base64" {
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
	c := r.ClaudeContent()
	if len(c) != 2 || c[0].Type != "text" || c[0].Text != "X=1,Y=2" || c[1].Source.MediaType != "image/png" {
		t.Errorf("content %+v", c)
	}
}

func TestRunDisplayResize(t *testing.T) {
	f := newFake(1920, 1080)
	e := newTestExecutor(t, f, ScreenshotSize{Mode: SizeAuto})
	f.w, f.h, f.img = 1280, 800, coordImage(1280, 800)
	res := run(t, e, RunOptions{}, Screenshot())
	if res.Image.Width != 1280 || res.Image.Height != 800 {
		t.Errorf("after resize: %dx%d", res.Image.Width, res.Image.Height)
	}
}

// TestRunRealSleep runs with the real sleeps: a triple click's pacing
// (~145 ms) fits a 400 ms double-click time even on a loaded machine.
func TestRunRealSleep(t *testing.T) {
	f := newFake(100, 80)
	e, err := NewExecutor(f, ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.Run(context.Background(), []Action{ClickAt(pt(1, 1), ButtonLeft, 3)}, noShot); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 400*time.Millisecond || d < 145*time.Millisecond {
		t.Errorf("triple click took %v", d)
	}
}

func TestRunPointerUnknown(t *testing.T) {
	f := newFake(100, 80)
	f.unknown = true
	e := newTestExecutor(t, f, ScreenshotSize{})
	for _, a := range []Action{ClickAt(nil, ButtonLeft, 1), {Kind: KindScroll, Direction: ScrollUp, Amount: 1},
		{Kind: KindCursorPosition}, {Kind: KindDrag, At: pt(5, 5)}, {Kind: KindButtonDown}} {
		_, err := e.Run(context.Background(), []Action{a}, noShot)
		if !errors.Is(err, ErrPointerUnknown) || !strings.Contains(err.Error(), "move the pointer first") {
			t.Errorf("%s: %v", a.Kind, err)
		}
	}
	if ev := inputEvents(f); len(ev) != 0 {
		t.Errorf("sent %v", ev)
	}
	res := run(t, e, noShot, MoveTo(10, 10), ClickAt(nil, ButtonLeft, 1), Action{Kind: KindCursorPosition})
	if res.Text != "X=10,Y=10" {
		t.Errorf("cursor_position after move = %q", res.Text)
	}
}

// TestRunSettleFailureKeepsHeld: a failed settle or capture says nothing
// about the input, which was delivered; what the agent holds stays held.
func TestRunSettleFailureKeepsHeld(t *testing.T) {
	f := newFake(100, 80)
	f.settleErr = errors.New("stale")
	e := newTestExecutor(t, f, ScreenshotSize{})
	_, err := e.Run(context.Background(), []Action{{Kind: KindKeyDown, Keys: []string{"shift"}}, Screenshot()}, RunOptions{})
	if !errors.Is(err, ErrDisplay) {
		t.Fatalf("err %v", err)
	}
	if keys, _ := e.Held(); len(keys) != 1 {
		t.Errorf("held %v after a settle failure", keys)
	}
	checkEvents(t, inputEvents(f), "key Shift_L down")
	if err := e.Release(); err != nil {
		t.Fatal(err)
	}
	checkEvents(t, inputEvents(f), "key Shift_L down", "key Shift_L up")
}
