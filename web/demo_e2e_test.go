package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/images/tiny/screen"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// A person's takeover in the browser (noVNC in Chromium, driven with the
// input events a mouse and keyboard produce) reaches desk.HumanInputs
// subscribers, and the trajectory recorder's coalescer turns it into the
// neutral actions the person meant: a click at the clicked point, the
// typed text as one action, a shortcut, a scroll, a drag, a double click.
// Played back as an agent's actions on the VM reset to the same start,
// they give the guest the same input: its log of buttons, wheel and keys
// and its typed text are the person's.
//
// With DESKFARM_TAKEOVER_CAPTURE=FILE the raw events are written to FILE
// (JSON lines of desk.HumanInput): trajectory/testdata holds one such
// capture for the coalescer's unit tests.
func TestE2ETakeoverDemonstrationReachesSubscribers(t *testing.T) {
	t.Setenv("DESKFARM_NOVNC_DIR", noVNCDir(t))
	if _, err := os.Stat(filepath.Join(noVNCDir(t), "core", "rfb.js")); err != nil {
		testenv.Unavailable(t, "noVNC is not installed (run `make novnc`)")
	}
	m := testenv.Manager(t, "tiny")
	pool := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: pool}))
	t.Cleanup(func() { srv.Close(); pool.Close() })
	vm, err := m.Create(context.Background(), vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := &tinyAPI{t: t, m: m, srv: srv, vm: vm}
	d, err := pool.Get(context.Background(), vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	ins, cancel := d.HumanInputs()
	defer cancel()

	start := time.Now()
	a.inputLog() // from an empty log
	ctx := browser(t)
	do(t, ctx, 20*time.Second, chromedp.Navigate(srv.URL+"/vms/"+vm.ID))
	poll(t, ctx, 20*time.Second, `window.deskfarm !== undefined && window.deskfarm.stats.frames > 0`)
	do(t, ctx, 10*time.Second, chromedp.Click(chromedp.CSS(`#take`)))
	poll(t, ctx, 20*time.Second, `document.getElementById('mode').textContent.startsWith('YOU HAVE CONTROL')`)

	p := person{t: t, ctx: ctx}
	click := image.Pt(300, 200)
	p.moveTo(image.Pt(200, 150), click)
	p.click(click, input.MouseButtonLeft)
	time.Sleep(1200 * time.Millisecond)
	p.typeText("hello world")
	p.key("Enter", "Enter", 13, 0)
	time.Sleep(1200 * time.Millisecond)
	p.ctrl("l", false)
	time.Sleep(1200 * time.Millisecond)
	p.typeText("Hello, World!")
	time.Sleep(300 * time.Millisecond)
	p.ctrl("t", true)
	time.Sleep(1200 * time.Millisecond)
	wheel := image.Pt(600, 500)
	p.moveTo(click, wheel)
	for range 3 {
		p.wheel(wheel, 100) // one notch of a mouse wheel in Chromium
		time.Sleep(80 * time.Millisecond)
	}
	time.Sleep(1200 * time.Millisecond)
	from, to := image.Pt(400, 300), image.Pt(700, 450)
	p.moveTo(wheel, from)
	p.drag(from, to)
	time.Sleep(1200 * time.Millisecond)
	dbl := image.Pt(900, 600)
	p.moveTo(to, dbl)
	p.click(dbl, input.MouseButtonLeft)
	time.Sleep(120 * time.Millisecond)
	p.click(dbl, input.MouseButtonLeft)
	time.Sleep(1200 * time.Millisecond)
	right := image.Pt(1000, 300)
	p.moveTo(dbl, right)
	p.click(right, input.MouseButtonRight)

	// The last event is the right button's release; then hand back, which
	// closes the takeover connection.
	var got []desk.HumanInput
	deadline := time.After(20 * time.Second)
	for len(got) == 0 || !(got[len(got)-1].Buttons == 0 && !got[len(got)-1].Key && seenRight(got)) {
		select {
		case in, ok := <-ins:
			if !ok {
				t.Fatalf("subscription closed after %d events", len(got))
			}
			got = append(got, in)
		case <-deadline:
			t.Fatalf("the right click's release never arrived; got %d events", len(got))
		}
	}
	if !markerNear(a.screenshot("format=png"), screen.ButtonRight, right) {
		t.Errorf("the takeover's right click at %v left no marker in the guest", right)
	}
	if path := os.Getenv("DESKFARM_TAKEOVER_CAPTURE"); path != "" {
		writeCapture(t, path, got)
	}

	c := trajectory.NewCoalescer()
	var acts []actions.Action
	for _, in := range got {
		acts = append(acts, c.Feed(in)...)
	}
	acts = append(acts, c.Flush(got[len(got)-1].Time)...)
	want := []string{
		"click left x1 at (300,200)",
		`type "hello world"`,
		"key Return",
		"key Control_L+l",
		`type "Hello, World!"`,
		"key Control_L+Shift_L+T",
		"scroll down 3 at (600,500)",
		"drag left (400,300)->(700,450)",
		"click left x2 at (900,600)",
		"click right x1 at (1000,300)",
	}
	var desc []string
	ok := len(acts) == len(want)
	for i, a := range acts {
		desc = append(desc, describe(a))
		ok = ok && i < len(want) && sameDescription(desc[i], want[i])
	}
	if !ok {
		t.Errorf("the takeover coalesced to\n\t%s\nwant (points within a pixel: noVNC scales the canvas)\n\t%s",
			strings.Join(desc, "\n\t"), strings.Join(want, "\n\t"))
	}

	// Replay: what the guest saw of the person, then of the agent playing
	// the actions on the VM reset to its start.
	personKeys, personPointer := inputLines(a.inputLog())
	personText := a.guestText()
	do(t, ctx, 10*time.Second, chromedp.Click(chromedp.CSS(`#giveback`)))
	poll(t, ctx, 10*time.Second, `document.getElementById('mode').textContent.startsWith('watching')`)
	if _, err := m.Reset(context.Background(), vm.ID); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := pool.WaitReset(wctx, vm.ID, start); err != nil {
		t.Fatal(err)
	}
	a.inputLog()
	if text := a.guestText(); text != "" {
		t.Fatalf("the reset left text %q", text)
	}
	body, err := json.Marshal(map[string]any{"screenshot_size": "native", "actions": acts})
	if err != nil {
		t.Fatal(err)
	}
	a.act(string(body), 200)
	agentKeys, agentPointer := inputLines(a.inputLog())
	if text := a.guestText(); text != personText {
		t.Errorf("replayed, the guest's text is %q; the person's was %q", text, personText)
	}
	for _, c := range []struct {
		what          string
		agent, person []string
	}{{"keyboard", agentKeys, personKeys}, {"pointer buttons and wheel", agentPointer, personPointer}} {
		if !slices.Equal(c.agent, c.person) {
			t.Errorf("replayed, the guest's %s input was\n\t%s\nthe person's\n\t%s",
				c.what, strings.Join(c.agent, "\n\t"), strings.Join(c.person, "\n\t"))
		}
	}
}

// inputLines splits the guest's input log by device, keyboard and
// pointer: each device's events keep their order, but the guest reads the
// two devices apart, so lines of one can overtake the other's. Pointer
// motion is left out: the path between targets is the person's hand, not
// an action.
func inputLines(log []string) (keys, pointer []string) {
	for _, l := range log {
		switch {
		case l == "", strings.HasPrefix(l, "motion "):
		case strings.HasPrefix(l, "button "), strings.HasPrefix(l, "wheel "), strings.HasPrefix(l, "hwheel "):
			pointer = append(pointer, l)
		default:
			keys = append(keys, l)
		}
	}
	return keys, pointer
}

// sameDescription compares descriptions, numbers in parentheses within 1.
func sameDescription(got, want string) bool {
	num := regexp.MustCompile(`\(\d+,\d+\)`)
	if num.ReplaceAllString(got, "()") != num.ReplaceAllString(want, "()") {
		return false
	}
	g, w := num.FindAllString(got, -1), num.FindAllString(want, -1)
	for i := range g {
		var gx, gy, wx, wy int
		fmt.Sscanf(g[i], "(%d,%d)", &gx, &gy)
		fmt.Sscanf(w[i], "(%d,%d)", &wx, &wy)
		if absInt(gx-wx) > 1 || absInt(gy-wy) > 1 {
			return false
		}
	}
	return true
}

func seenRight(ins []desk.HumanInput) bool {
	return slices.ContainsFunc(ins, func(in desk.HumanInput) bool { return in.Buttons&4 != 0 })
}

func describe(a actions.Action) string {
	switch a := a.(type) {
	case actions.Click:
		return fmt.Sprintf("click %s x%d at (%d,%d)", a.Button, a.Count, a.At.X, a.At.Y)
	case actions.TypeText:
		return fmt.Sprintf("type %q", a.Text)
	case actions.KeyPress:
		return "key " + strings.Join(actions.KeyNames(a.Keys), "+")
	case actions.Scroll:
		return fmt.Sprintf("scroll %s %d at (%d,%d)", a.Direction, a.Amount, a.At.X, a.At.Y)
	case actions.Drag:
		return fmt.Sprintf("drag %s (%d,%d)->(%d,%d)", a.Button, a.From.X, a.From.Y, a.To.X, a.To.Y)
	}
	return fmt.Sprintf("%T %+v", a, a)
}

func writeCapture(t *testing.T, path string, ins []desk.HumanInput) {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, in := range ins {
		if err := enc.Encode(in); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d events to %s", len(ins), path)
}

// person drives Chromium's input the way a mouse and keyboard do: moves
// between targets, presses and releases with the buttons mask, key downs
// and ups with a person's typing gaps, modifiers pressed as keys of their
// own. Points are guest pixels (vncPoint maps them onto the canvas).
type person struct {
	t   *testing.T
	ctx context.Context
}

func (p person) mouse(typ input.DispatchMouseEventType, at image.Point, b input.MouseButton, buttons int64) {
	p.t.Helper()
	x, y := vncPoint(p.t, p.ctx, at)
	ev := &input.DispatchMouseEventParams{Type: typ, X: x, Y: y, Button: b, Buttons: buttons}
	if typ == chromedp.MousePressed || typ == chromedp.MouseReleased {
		ev.ClickCount = 1
	}
	do(p.t, p.ctx, 10*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.DispatchMouseEvent, *ev)
		return err
	}))
}

// wheelEvent is Input.dispatchMouseEvent for a wheel: the protocol wants
// both deltas, which input.DispatchMouseEventParams omits when zero.
type wheelEvent struct {
	Type   string  `json:"type"`
	X      float64 `json:"x"`
	Y      float64 `json:"y"`
	DeltaX float64 `json:"deltaX"`
	DeltaY float64 `json:"deltaY"`
}

var dispatchWheel = cdp.Command[wheelEvent, cdp.Empty]{Method: input.CommandDispatchMouseEvent}

// wheel turns the wheel by dy CSS pixels (positive: down).
func (p person) wheel(at image.Point, dy float64) {
	p.t.Helper()
	x, y := vncPoint(p.t, p.ctx, at)
	do(p.t, p.ctx, 10*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, dispatchWheel, wheelEvent{Type: string(chromedp.MouseWheel), X: x, Y: y, DeltaY: dy})
		return err
	}))
}

// moveTo moves the pointer in ten steps, as a hand does.
func (p person) moveTo(from, to image.Point) {
	for i := 1; i <= 10; i++ {
		at := from.Add(to.Sub(from).Mul(i).Div(10))
		p.mouse(chromedp.MouseMoved, at, "", 0)
		time.Sleep(20 * time.Millisecond)
	}
}

func (p person) click(at image.Point, b input.MouseButton) {
	mask := map[input.MouseButton]int64{input.MouseButtonLeft: 1, input.MouseButtonRight: 2}[b]
	p.mouse(chromedp.MousePressed, at, b, mask)
	time.Sleep(90 * time.Millisecond)
	p.mouse(chromedp.MouseReleased, at, b, 0)
}

func (p person) drag(from, to image.Point) {
	p.mouse(chromedp.MousePressed, from, input.MouseButtonLeft, 1)
	for i := 1; i <= 15; i++ {
		time.Sleep(25 * time.Millisecond)
		p.mouse(chromedp.MouseMoved, from.Add(to.Sub(from).Mul(i).Div(15)), input.MouseButtonLeft, 1)
	}
	time.Sleep(80 * time.Millisecond)
	p.mouse(chromedp.MouseReleased, to, input.MouseButtonLeft, 0)
}

func (p person) dispatch(ev *input.DispatchKeyEventParams) {
	p.t.Helper()
	do(p.t, p.ctx, 10*time.Second, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *ev)
		return err
	}))
}

// typeText types s key by key, ~70 ms apart, holding the left Shift key
// for the characters that need it.
func (p person) typeText(s string) {
	for _, r := range s {
		evs := kb.Encode(r)
		shifted := evs[0].Modifiers&int64(kb.ModifierShift) != 0
		if shifted {
			p.dispatch(shiftKey(input.DispatchKeyEventTypeRawKeyDown))
			time.Sleep(40 * time.Millisecond)
		}
		for _, ev := range evs {
			p.dispatch(ev)
		}
		if shifted {
			time.Sleep(30 * time.Millisecond)
			p.dispatch(shiftKey(input.DispatchKeyEventTypeKeyUp))
		}
		time.Sleep(70 * time.Millisecond)
	}
}

func shiftKey(typ input.DispatchKeyEventType) *input.DispatchKeyEventParams {
	ev := &input.DispatchKeyEventParams{Type: typ, Key: "Shift", Code: "ShiftLeft",
		WindowsVirtualKeyCode: 16, NativeVirtualKeyCode: 16, Location: 1}
	if typ != input.DispatchKeyEventTypeKeyUp {
		ev.Modifiers = int64(kb.ModifierShift)
	}
	return ev
}

// key presses and releases a named key (DOM key and code).
func (p person) key(key, code string, vk int64, mods int64) {
	down := &input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Key: key, Code: code,
		WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk, Modifiers: mods}
	p.dispatch(down)
	time.Sleep(60 * time.Millisecond)
	up := *down
	up.Type = input.DispatchKeyEventTypeKeyUp
	p.dispatch(&up)
}

// ctrl holds the left Control key (and Shift, with shift) around a
// letter key.
func (p person) ctrl(letter string, shift bool) {
	mods := int64(kb.ModifierCtrl)
	ctl := &input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeRawKeyDown, Key: "Control", Code: "ControlLeft",
		WindowsVirtualKeyCode: 17, NativeVirtualKeyCode: 17, Location: 1, Modifiers: mods}
	p.dispatch(ctl)
	time.Sleep(120 * time.Millisecond)
	key := letter
	if shift {
		sh := shiftKey(input.DispatchKeyEventTypeRawKeyDown)
		mods |= sh.Modifiers
		sh.Modifiers = mods
		p.dispatch(sh)
		time.Sleep(80 * time.Millisecond)
		key = strings.ToUpper(letter)
	}
	p.key(key, "Key"+strings.ToUpper(letter), int64(strings.ToUpper(letter)[0]), mods)
	time.Sleep(100 * time.Millisecond)
	if shift {
		p.dispatch(shiftKey(input.DispatchKeyEventTypeKeyUp))
		time.Sleep(50 * time.Millisecond)
	}
	up := *ctl
	up.Type, up.Modifiers = input.DispatchKeyEventTypeKeyUp, 0
	p.dispatch(&up)
}
