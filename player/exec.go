package player

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/internal/fielderr"
)

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	// Size is the session's screenshot size policy; the zero value is native.
	Size ScreenshotSize
	// Pacing overrides DefaultPacing.
	Pacing *Pacing
	// Logger receives debug lines; nil means slog.Default().
	Logger *slog.Logger
	// Guest delivers what the display cannot: non-ASCII text, horizontal
	// scroll, back/forward, the clipboard. Nil means the Display's own
	// GuestInput if it implements one, else none (those actions are refused).
	Guest GuestInput
	// Activity makes settles wait for the guest to go idle as well as the
	// screen; nil settles on the screen alone.
	Activity GuestActivity
	// GuestIdle is the vCPU utilisation at or below which the guest counts
	// as idle; 0 means DefaultGuestIdle.
	GuestIdle float64
	// Sleep replaces the pauses of pacing and of wait actions; nil means
	// real sleeps. Tests pass a virtual clock (playertest.Display.Sleep).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Runner plays actions: *Executor implements it. The vocabularies
// (vocab.Call.Run) take a Runner so the desk can put its own session object
// in front.
type Runner interface {
	Run(ctx context.Context, acts []actions.Action, opts RunOptions) (Result, error)
}

var _ Runner = (*Executor)(nil)

// Executor plays actions onto one Display for one session. It owns the
// input state that lasts across requests: buttons and keys the agent holds
// with button_down/key_down (and Claude's left_mouse_down, OSWorld's
// KEY_DOWN). Runs are serialised.
//
// Every key and button an action presses for itself (modifiers of a click,
// the keys of a chord, the Shift of a capital, a drag's button) is released
// before the action returns, also when it fails. If a Run fails while
// playing, everything held is released, including what the agent held on
// purpose: after a failed request the agent cannot know the input state, and
// a stuck key is worse than a lost hold. (A failed settle or capture leaves
// holds alone: the input was delivered.) Call Release when a session ends.
type Executor struct {
	d        Display
	size     ScreenshotSize
	log      *slog.Logger
	guest    GuestInput
	activity GuestActivity
	idle     float64
	now      func() time.Time // tests replace it with a virtual clock

	mu     sync.Mutex
	scaler *Scaler
	pace   *pacer
	in     input
}

// NewExecutor returns an executor for d. The screenshot size is computed from
// the display's current size and recomputed if the display is resized.
func NewExecutor(d Display, cfg ExecutorConfig) (*Executor, error) {
	p := DefaultPacing
	if cfg.Pacing != nil {
		p = *cfg.Pacing
	}
	e := &Executor{d: d, size: cfg.Size, log: cfg.Logger, pace: newPacer(p),
		guest: cfg.Guest, activity: cfg.Activity, idle: cfg.GuestIdle, now: time.Now}
	if e.guest == nil {
		e.guest, _ = d.(GuestInput)
	}
	if e.idle <= 0 {
		e.idle = DefaultGuestIdle
	}
	if cfg.Sleep != nil {
		e.pace.sleep = cfg.Sleep
	}
	e.in = input{d: d, pace: e.pace}
	if e.log == nil {
		e.log = slog.Default()
	}
	w, h := d.Size()
	s, err := NewScaler(w, h, cfg.Size)
	if err != nil {
		return nil, fmt.Errorf("new executor: %w", err)
	}
	e.scaler = s
	return e, nil
}

// HasGuestInput reports whether the executor has a GuestInput, so that
// non-ASCII text, horizontal scroll, back/forward and the clipboard work.
func (e *Executor) HasGuestInput() bool { return e.guest != nil }

// Scaler returns the current scaler (screenshot size and coordinate mapping).
func (e *Executor) Scaler() *Scaler {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.scaler
}

// Held returns the keys and buttons held across requests.
func (e *Executor) Held() (keys []string, buttons []actions.Button) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.in.heldNames()
}

// Release releases every key and button held across requests.
func (e *Executor) Release() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.in.releaseAll()
}

// step is an Action resolved for playing: positions in native pixels, the
// button as a mask bit, typed text as keys.
type step struct {
	act  actions.Action
	at   *image.Point // native; nil means the pointer's position
	from *image.Point
	via  []image.Point
	bit  uint8         // button or wheel mask bit
	keys []actions.Key // the typed sequence of TypeText over the display

	guestText bool // TypeText through GuestInput
	xbutton   int  // X button clicked through GuestInput (6-9); 0: none
}

// Run checks all actions (Validate, MaxActions) and maps their coordinates
// first (nothing is sent if any is invalid or off-screen), then plays them in
// order, settles, and captures what the options ask for. On a failure while
// playing it returns the partial Result with the error, which names the
// action.
func (e *Executor) Run(ctx context.Context, acts []actions.Action, opts RunOptions) (Result, error) {
	var res Result
	if err := opts.Validate(); err != nil {
		return res, err
	}
	if err := actions.CheckCount(len(acts)); err != nil {
		return res, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	e.log.Debug("actions run started", "op", "actions", "actions", len(acts))
	e.refreshScaler()
	steps, err := e.plan(acts)
	if err != nil {
		return res, err
	}
	e.pace.reset()
	inputFailed := false
	err = e.play(ctx, steps, opts, &res, &inputFailed)
	if inputFailed {
		if rerr := e.in.releaseAll(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release held input: %w", rerr))
		}
	}
	res.SettleMS = float64(res.Settle.Microseconds()) / 1000
	e.log.Debug("actions run finished", "op", "actions", "actions", len(acts), "executed", res.Executed,
		"elapsed_ms", time.Since(start).Milliseconds(), "settle_ms", res.SettleMS,
		"settle_timed_out", res.SettleTimedOut, "error", err)
	return res, err
}

// refreshScaler rebuilds the scaler if the display was resized.
func (e *Executor) refreshScaler() {
	w, h := e.d.Size()
	if nw, nh := e.scaler.Native(); nw == w && nh == h {
		return
	}
	s, err := NewScaler(w, h, e.size)
	if err != nil {
		// A fixed size larger than the new display: fall back to native
		// rather than refusing every action.
		e.log.Warn("screenshot size does not fit the resized display; using native size",
			"size", e.size.String(), "width", w, "height", h, "error", err)
		s, _ = NewScaler(w, h, ScreenshotSize{Mode: SizeNative})
		if s == nil {
			return
		}
	}
	ow, oh := e.scaler.ScreenshotSize()
	sw, sh := s.ScreenshotSize()
	e.log.Warn("display resized; screenshot size changed", "width", w, "height", h,
		"old_screenshot", fmt.Sprintf("%dx%d", ow, oh), "screenshot", fmt.Sprintf("%dx%d", sw, sh))
	e.scaler = s
}

// plan validates the actions and resolves them into steps.
func (e *Executor) plan(acts []actions.Action) ([]step, error) {
	steps := make([]step, len(acts))
	for i, a := range acts {
		st, err := e.planOne(a)
		if err != nil {
			return nil, actions.WithPrefix(actions.Elem("actions", i), err)
		}
		steps[i] = st
	}
	return steps, nil
}

func (e *Executor) planOne(a actions.Action) (step, error) {
	st := step{act: a}
	if a == nil {
		return st, actions.Invalid("kind", actions.ErrUnsupportedAction, "nil action")
	}
	if err := a.Validate(); err != nil {
		return st, err
	}
	native := func(field fielderr.Path, p *actions.Point) (*image.Point, error) {
		if p == nil {
			return nil, nil
		}
		x, y, err := e.scaler.ToNative(p.X, p.Y)
		if err != nil {
			return nil, fielderr.Rename(err, func(fielderr.Path) fielderr.Path { return field })
		}
		return &image.Point{X: x, Y: y}, nil
	}
	button := func(b actions.Button) (err error) {
		st.bit, err = buttonMask(b)
		return err
	}
	guestButton := func(b actions.Button) error {
		n := map[actions.Button]int{actions.ButtonBack: XButtonBack, actions.ButtonForward: XButtonForward}[b]
		if e.guest == nil {
			return actions.Invalid("button", actions.ErrUnsupportedButton, fmt.Sprintf(
				"%s is X button %d, which QEMU's VNC pointer event cannot carry; it needs the guest input "+
					"path (the desktop session's agent), which this desk does not have; for history "+
					"navigation press alt+Left or alt+Right", b, n))
		}
		st.xbutton = n
		return nil
	}
	holdable := func(b actions.Button) error {
		if b == actions.ButtonBack || b == actions.ButtonForward {
			return actions.Invalid("button", actions.ErrUnsupportedButton, fmt.Sprintf(
				"%s can be clicked but not held: it reaches the guest only as a whole click", b))
		}
		return button(b)
	}
	var err error
	switch a := a.(type) {
	case actions.Move:
		st.at, err = native(fielderr.Name("x"), &a.To)
	case actions.MoveBy:
		if _, err = e.in.pos(nil); err != nil { // known before anything is sent
			return st, actions.Invalid("dx", actions.ErrPointerUnknown, err.Error())
		}
	case actions.ButtonDown:
		st.at, err = native(fielderr.Name("x"), a.At)
		err = firstErr(err, holdable(a.Button))
	case actions.ButtonUp:
		st.at, err = native(fielderr.Name("x"), a.At)
		err = firstErr(err, holdable(a.Button))
	case actions.Click:
		st.at, err = native(fielderr.Name("x"), a.At)
		if a.Button == actions.ButtonBack || a.Button == actions.ButtonForward {
			err = firstErr(err, guestButton(a.Button))
		} else {
			err = firstErr(err, button(a.Button))
		}
	case actions.Drag:
		if st.at, err = native(fielderr.Name("x"), &a.To); err != nil {
			return st, err
		}
		if st.from, err = native(fielderr.Name("from"), a.From); err != nil {
			return st, err
		}
		for i := range a.Via {
			v, err := native(actions.Elem("via", i), &a.Via[i])
			if err != nil {
				return st, err
			}
			st.via = append(st.via, *v)
		}
		err = holdable(a.Button)
	case actions.Scroll:
		st.at, err = native(fielderr.Name("x"), a.At)
		switch a.Direction {
		case actions.ScrollLeft, actions.ScrollRight:
			if e.guest == nil {
				return st, actions.Invalid("direction", actions.ErrUnsupportedButton, fmt.Sprintf(
					"scrolling %s is X button %d, which QEMU's VNC pointer event cannot carry; it needs the "+
						"guest input path (the desktop session's agent), which this desk does not have; "+
						"shift with a vertical scroll scrolls sideways in most browsers and editors",
					a.Direction, map[actions.Direction]int{actions.ScrollLeft: XButtonWheelLeft, actions.ScrollRight: XButtonWheelRight}[a.Direction]))
			}
			st.xbutton = map[actions.Direction]int{actions.ScrollLeft: XButtonWheelLeft, actions.ScrollRight: XButtonWheelRight}[a.Direction]
		default:
			st.bit = wheelMask(a.Direction)
		}
	case actions.TypeText:
		switch {
		case actions.ASCIITypable(a.Text):
			st.keys, err = textKeys(a.Text)
		case e.guest != nil:
			st.guestText = true
		default:
			err = actions.WithPrefix(fielderr.Name("text"), actions.CheckTypable(a.Text))
		}
	case actions.ClipboardGet, actions.ClipboardSet:
		if e.guest == nil {
			err = actions.Invalid("kind", actions.ErrUnsupportedAction, fmt.Sprintf("%s needs the guest input path "+
				"(the desktop session's agent), which this desk does not have", a.Kind()))
		}
	case actions.Zoom:
		var r image.Rectangle
		if r, err = e.scaler.RegionToNative(a.Region); err == nil {
			w, h := e.scaler.ZoomSize(r.Dx(), r.Dy(), a.Width, a.Height)
			err = actions.CheckZoomArea(w, h)
		}
	}
	return st, err
}

// textKeys returns the key sequence that types text: one key per character,
// \r\n as one Return.
func textKeys(text string) ([]actions.Key, error) {
	keys := make([]actions.Key, 0, len(text))
	for i, r := range text {
		if r == '\r' && i+1 < len(text) && text[i+1] == '\n' {
			continue
		}
		k, err := actions.KeyForRune(r)
		if err != nil {
			return nil, actions.WithPrefix(fielderr.Name("text"), err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// play runs the steps, then settles and captures per the options.
// inputFailed is set when an input step fails (as opposed to a settle or a
// capture, after which the input state is still known).
func (e *Executor) play(ctx context.Context, steps []step, opts RunOptions, res *Result, inputFailed *bool) error {
	c := &capturer{d: e.d, opts: opts, res: res, activity: e.activity, idle: e.idle, now: e.now, log: e.log}
	var lastShot bool // the last capture is a screenshot taken after the last input
	for i := range steps {
		st := &steps[i]
		kind := st.act.Kind()
		if err := ctx.Err(); err != nil {
			*inputFailed = true // cancelled between steps: the agent's plan is cut short
			return &actions.StepError{Index: i, Kind: kind, Err: err}
		}
		var err error
		switch a := st.act.(type) {
		case actions.CursorPosition:
			var p image.Point
			if p, err = e.in.pos(nil); err == nil {
				sx, sy := e.scaler.FromNative(p.X, p.Y)
				if res.Text != "" {
					res.Text += "\n"
				}
				res.Text += fmt.Sprintf("X=%d,Y=%d", sx, sy)
				res.Cursor = &image.Point{X: sx, Y: sy}
			}
		case actions.Screenshot:
			res.Image, err = c.shot(ctx, e, nil)
			lastShot = true
		case actions.ClipboardGet:
			var text string
			if text, err = e.guest.ClipboardGet(ctx); err == nil {
				res.Clipboard = &text
			} else {
				err = fmt.Errorf("%w: %w", actions.ErrGuest, err)
			}
		case actions.ClipboardSet:
			if err = e.guest.ClipboardSet(ctx, a.Text); err != nil {
				err = fmt.Errorf("%w: %w", actions.ErrGuest, err)
			}
		case actions.Zoom:
			res.Image, err = c.shot(ctx, e, &a)
			lastShot = false
		default:
			c.dirty, lastShot = true, false
			if err = e.playInput(ctx, st); err != nil {
				*inputFailed = true
			}
		}
		if err != nil {
			return &actions.StepError{Index: i, Kind: kind, Err: err}
		}
		res.Executed = i + 1
	}
	take := false
	switch opts.Policy() {
	case ScreenshotAuto:
		take = len(steps) == 0 || !actions.IsObservation(steps[len(steps)-1].act)
	case ScreenshotAlways:
		take = !lastShot || len(steps) == 0
	}
	switch {
	case take:
		img, err := c.shot(ctx, e, nil)
		if err != nil {
			return err
		}
		res.Image = img
	case c.dirty:
		return c.settle(ctx)
	}
	return nil
}

// playInput plays one input step through the input state machine. Keys and
// buttons it presses for itself are released before it returns, whatever
// happens.
func (e *Executor) playInput(ctx context.Context, st *step) (err error) {
	in, p := &e.in, e.pace.p
	var own pressed
	defer func() {
		if rerr := in.releasePressed(ctx, &own); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release: %w", rerr))
		}
	}()
	switch a := st.act.(type) {
	case actions.Move:
		return in.pointer(ctx, *st.at, in.buttons)

	case actions.MoveBy:
		pos, err := in.pos(nil)
		if err != nil {
			return err
		}
		// Clamped to the screen, as pyautogui clamps moveRel.
		sx, sy := e.scaler.FromNative(pos.X, pos.Y)
		w, h := e.scaler.ScreenshotSize()
		nx, ny, err := e.scaler.ToNative(min(max(sx+a.DX, 0), w-1), min(max(sy+a.DY, 0), h-1))
		if err != nil {
			return err
		}
		return in.pointer(ctx, image.Point{X: nx, Y: ny}, in.buttons)

	case actions.ButtonDown, actions.ButtonUp:
		pos, err := in.pos(st.at)
		if err != nil {
			return err
		}
		if st.at != nil {
			if err := in.pointer(ctx, pos, in.buttons); err != nil {
				return err
			}
		}
		if _, down := a.(actions.ButtonDown); down {
			return in.holdButton(ctx, pos, st.bit)
		}
		return in.unholdButton(ctx, pos, st.bit)

	case actions.Click:
		pos, err := in.approach(ctx, &own, st.at, a.Modifiers)
		if err != nil {
			return err
		}
		if st.xbutton != 0 {
			return e.guestButton(ctx, st.xbutton, pos, max(a.Count, 1))
		}
		for i := range max(a.Count, 1) {
			if i > 0 {
				if err := e.pace.pause(ctx, p.ClickGap); err != nil {
					return err
				}
			}
			if err := in.pressButton(ctx, &own, pos, st.bit); err != nil {
				return err
			}
			if err := e.pace.pause(ctx, p.ClickHold); err != nil {
				return err
			}
			if err := in.releaseButton(ctx, &own, pos, st.bit); err != nil {
				return err
			}
		}
		return nil

	case actions.Drag:
		start, err := in.approach(ctx, &own, st.from, a.Modifiers)
		if err != nil {
			return err
		}
		if err := in.pressButton(ctx, &own, start, st.bit); err != nil {
			return err
		}
		if err := e.pace.pause(ctx, p.DragHold); err != nil {
			return err
		}
		for _, q := range dragPath(start, st.via, *st.at, p.DragStepPx) {
			if err := in.pointer(ctx, q, in.buttons|own.buttons); err != nil {
				return err
			}
			if err := e.pace.pause(ctx, p.DragStep); err != nil {
				return err
			}
		}
		if err := e.pace.pause(ctx, p.DragHold); err != nil {
			return err
		}
		return in.releaseButton(ctx, &own, *st.at, st.bit)

	case actions.Scroll:
		pos, err := in.approach(ctx, &own, st.at, a.Modifiers)
		if err != nil {
			return err
		}
		if st.xbutton != 0 {
			return e.guestButton(ctx, st.xbutton, pos, a.Amount)
		}
		for i := range a.Amount {
			if i > 0 {
				if err := e.pace.pause(ctx, p.ScrollGap); err != nil {
					return err
				}
			}
			if err := in.pressButton(ctx, &own, pos, st.bit); err != nil {
				return err
			}
			if err := in.releaseButton(ctx, &own, pos, st.bit); err != nil {
				return err
			}
		}
		return nil

	case actions.KeyPress:
		return in.pressChord(ctx, &own, a.Keys)

	case actions.HoldKey:
		if err := in.pressChord(ctx, &own, a.Keys); err != nil {
			return err
		}
		return e.pace.pause(ctx, a.Duration)

	case actions.KeyDown:
		for _, k := range a.Keys {
			if k.Shift && !in.shiftHeld(nil) {
				if err := in.holdKey(ctx, actions.ShiftKey()); err != nil {
					return err
				}
			}
			if err := in.holdKey(ctx, k); err != nil {
				return err
			}
		}
		return nil

	case actions.KeyUp:
		for i := len(a.Keys) - 1; i >= 0; i-- {
			k := a.Keys[i]
			if err := in.unholdKey(ctx, k); err != nil {
				return err
			}
			if k.Shift {
				if err := in.unholdIfHeld(ctx, actions.ShiftKey()); err != nil {
					return err
				}
			}
		}
		return nil

	case actions.TypeText:
		if st.guestText {
			if err := e.pace.before(ctx, devGuest); err != nil {
				return err
			}
			if err := e.guest.TypeText(ctx, a.Text); err != nil {
				return fmt.Errorf("type through the guest: %w: %w", actions.ErrGuest, err)
			}
			return nil
		}
		shifted := false // Shift pressed by this action for the current run of characters
		for _, k := range st.keys {
			if k.Shift && !shifted && !in.shiftHeld(nil) {
				if err := in.press(ctx, &own, actions.ShiftKey()); err != nil {
					return err
				}
				shifted = true
			} else if !k.Shift && shifted {
				if err := in.releaseOwn(ctx, &own, actions.ShiftKey()); err != nil {
					return err
				}
				shifted = false
			}
			if err := in.tap(ctx, &own, k); err != nil {
				return err
			}
		}
		return nil

	case actions.Wait:
		return e.pace.pause(ctx, a.Duration)
	}
	return fmt.Errorf("%w: kind %q cannot be played", actions.ErrInvalid, st.act.Kind())
}

// guestButton clicks X button n count times at native pos through GuestInput,
// after the pointer event that put the pointer there.
func (e *Executor) guestButton(ctx context.Context, n int, pos image.Point, count int) error {
	if err := e.pace.before(ctx, devGuest); err != nil {
		return err
	}
	if err := e.guest.Button(ctx, n, pos.X, pos.Y, count); err != nil {
		return fmt.Errorf("button %d x%d at (%d,%d) through the guest: %w: %w", n, count, pos.X, pos.Y, actions.ErrGuest, err)
	}
	return nil
}

// dragPath returns the intermediate and final points of a drag from start
// through via to end: each segment split into steps of at most stepPx
// (between minDragSteps and maxDragSteps per segment).
func dragPath(start image.Point, via []image.Point, end image.Point, stepPx int) []image.Point {
	if stepPx < 1 {
		stepPx = 1
	}
	var out []image.Point
	prev := start
	for _, q := range append(append([]image.Point(nil), via...), end) {
		d := math.Hypot(float64(q.X-prev.X), float64(q.Y-prev.Y))
		if d == 0 {
			out = append(out, q)
			continue
		}
		n := min(max(int(math.Ceil(d/float64(stepPx))), minDragSteps), maxDragSteps)
		for i := 1; i <= n; i++ {
			out = append(out, image.Point{
				X: prev.X + int(math.Round(float64(q.X-prev.X)*float64(i)/float64(n))),
				Y: prev.Y + int(math.Round(float64(q.Y-prev.Y)*float64(i)/float64(n))),
			})
		}
		prev = q
	}
	return out
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
