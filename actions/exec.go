package actions

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"math"
	"sync"
	"time"
)

// Settle defaults: after the actions of a request the executor waits for the
// screen to settle (Display.Settle) instead of sleeping a fixed time.
//
// DefaultSettleQuiet is how long the framebuffer must stay unchanged. It must
// be longer than the gaps between the repaints of one reaction (QEMU's VNC
// checks for dirty areas on a 30 ms timer that lengthens by 50 ms per idle
// check until input resets it, and a TCG guest repaints a menu or a dialog in
// several passes tens of ms apart), and well below a blinking text cursor's
// half period (~500-600 ms in GTK and xterm) and a clock's tick, or it would
// never see quiet. 150 ms sits between: a click that repaints settles in
// roughly one round trip + 150 ms.
//
// DefaultSettleMax caps the wait at the reference demo's fixed 2.0 s sleep, so
// a screen that never settles (video, a spinner) costs no more than the demo
// does and a quiet one costs far less.
const (
	DefaultSettleQuiet = 150 * time.Millisecond
	DefaultSettleMax   = 2 * time.Second
)

// Pacing spaces the input events of one action. The values are what the
// guest's input path needs, not politeness:
type Pacing struct {
	// ClickHold is the time between a button's press and release in a click.
	// Per-device queues keep them apart anyway; a short hold keeps toolkits
	// that debounce from merging them.
	ClickHold time.Duration
	// ClickGap is the time from one click's release to the next press of a
	// double or triple click. Press-to-press (ClickHold+ClickGap, 65 ms) and a
	// whole triple click (~145 ms) stay well inside the usual double-click
	// times (GTK/Qt 400 ms, Xfce 250 ms) even if a busy TCG guest stretches
	// them.
	ClickGap time.Duration
	// DragHold is waited after pressing the button before the first move, and
	// after the last move before releasing (drop targets need motion events
	// and an XDND round trip to accept a drop).
	DragHold time.Duration
	// DragStep is the time between intermediate drag moves.
	DragStep time.Duration
	// DragStepPx is the largest distance between intermediate drag moves, in
	// native pixels (a drag segment gets between 3 and 60 moves).
	DragStepPx int
	// ScrollGap is the time between wheel clicks.
	ScrollGap time.Duration
	// KeyGap is the time between two consecutive key events. QEMU's PS/2
	// keyboard (QEMU >= 6.1) queues only 16 bytes and drops keys when full;
	// VNC key events reach it as fast as the socket delivers them, and the
	// guest drains one byte per interrupt. 4 ms per event lets the guest stall
	// for ~60 ms without losing a key; 1000 lowercase characters take ~8 s
	// (the demo's xdotool --delay 12 takes 12 s).
	KeyGap time.Duration
	// DeviceGap is waited when switching between keyboard and pointer events
	// (they reach the guest through different devices, a PS/2 keyboard and a
	// virtio tablet, with no ordering between them), so a modifier is down
	// before the click it modifies and the click lands before the release.
	DeviceGap time.Duration
}

// DefaultPacing is the pacing used when ExecutorConfig.Pacing is nil.
var DefaultPacing = Pacing{
	ClickHold:  15 * time.Millisecond,
	ClickGap:   50 * time.Millisecond,
	DragHold:   50 * time.Millisecond,
	DragStep:   10 * time.Millisecond,
	DragStepPx: 24,
	ScrollGap:  15 * time.Millisecond,
	KeyGap:     4 * time.Millisecond,
	DeviceGap:  20 * time.Millisecond,
}

const (
	minDragSteps = 3
	maxDragSteps = 60
)

// Pointer button mask bits (see Display.Pointer).
const (
	maskLeft       uint8 = 1 << 0
	maskMiddle     uint8 = 1 << 1
	maskRight      uint8 = 1 << 2
	maskWheelUp    uint8 = 1 << 3
	maskWheelDown  uint8 = 1 << 4
	maskWheelLeft  uint8 = 1 << 5
	maskWheelRight uint8 = 1 << 6
)

// ScreenshotPolicy says when Run returns a screenshot.
type ScreenshotPolicy string

// Screenshot policies.
const (
	// ScreenshotAuto (the default) takes a screenshot after the actions unless
	// the last one was an observation (screenshot, zoom, cursor_position);
	// an empty action list is a plain screenshot. This is what the reference
	// demo returns for each action.
	ScreenshotAuto ScreenshotPolicy = "auto"
	// ScreenshotAlways takes one after the actions unless the last action was
	// a screenshot.
	ScreenshotAlways ScreenshotPolicy = "always"
	// ScreenshotNever returns only what screenshot and zoom actions capture.
	ScreenshotNever ScreenshotPolicy = "never"
)

// RunOptions are per-request options of Run. The zero value is the default.
type RunOptions struct {
	// SettleQuietMS is the quiet time of the settle wait (Display.Settle);
	// 0 means DefaultSettleQuiet. 1-10000.
	SettleQuietMS int `json:"settle_quiet_ms,omitempty"`
	// SettleMaxMS caps the settle wait; 0 means DefaultSettleMax. 1-60000,
	// and at least SettleQuietMS.
	SettleMaxMS int `json:"settle_max_ms,omitempty"`
	// NoSettle skips settling entirely: screenshots show whatever the mirror
	// holds at that instant.
	NoSettle bool `json:"no_settle,omitempty"`
	// Screenshot is the screenshot policy; "" means auto.
	Screenshot ScreenshotPolicy `json:"screenshot,omitempty"`
	// Format is the image encoding; "" means png.
	Format ImageFormat `json:"format,omitempty"`
	// JPEGQuality is the JPEG quality, 1-100; 0 means DefaultJPEGQuality.
	JPEGQuality int `json:"jpeg_quality,omitempty"`
}

// Validate checks the options.
func (o RunOptions) Validate() error {
	if o.SettleQuietMS < 0 || o.SettleQuietMS > 10000 {
		return fieldErr("settle_quiet_ms", nil, fmt.Sprintf("must be 1 to 10000 (0 means %d), got %d",
			DefaultSettleQuiet.Milliseconds(), o.SettleQuietMS))
	}
	if o.SettleMaxMS < 0 || o.SettleMaxMS > 60000 {
		return fieldErr("settle_max_ms", nil, fmt.Sprintf("must be 1 to 60000 (0 means %d), got %d",
			DefaultSettleMax.Milliseconds(), o.SettleMaxMS))
	}
	if q, m := o.quiet(), o.max(); q > m {
		return fieldErr("settle_max_ms", nil, fmt.Sprintf("%d ms is shorter than the quiet time %d ms", m.Milliseconds(), q.Milliseconds()))
	}
	switch o.Screenshot {
	case "", ScreenshotAuto, ScreenshotAlways, ScreenshotNever:
	default:
		return fieldErr("screenshot", nil, fmt.Sprintf("must be auto, always or never, got %q", o.Screenshot))
	}
	return o.encodeOptions().Validate()
}

func (o RunOptions) quiet() time.Duration {
	if o.SettleQuietMS == 0 {
		return DefaultSettleQuiet
	}
	return time.Duration(o.SettleQuietMS) * time.Millisecond
}

func (o RunOptions) max() time.Duration {
	if o.SettleMaxMS == 0 {
		return DefaultSettleMax
	}
	return time.Duration(o.SettleMaxMS) * time.Millisecond
}

func (o RunOptions) encodeOptions() EncodeOptions {
	return EncodeOptions{Format: o.Format, Quality: o.JPEGQuality}
}

// Result is what a Run returns, in the shape of a Claude tool_result: text
// and/or one image (see ClaudeContent).
type Result struct {
	// Text holds the output of cursor_position actions ("X=12,Y=34"), one
	// line each.
	Text string `json:"text,omitempty"`
	// Image is the last image captured: a zoom, an explicit screenshot, or
	// the screenshot the policy takes after the actions. Screenshots are at
	// the session's screenshot size.
	Image *Image `json:"image,omitempty"`
	// Executed counts the actions that completed.
	Executed int `json:"executed"`
	// Settle is the total time spent in Display.Settle.
	Settle time.Duration `json:"-"`
	// SettleMS is Settle in milliseconds.
	SettleMS float64 `json:"settle_ms"`
	// SettleTimedOut reports that a settle wait hit its maximum (the screen
	// kept changing).
	SettleTimedOut bool `json:"settle_timed_out,omitempty"`
}

// ContentBlock is one block of a Claude tool_result's content.
type ContentBlock struct {
	Type   string       `json:"type"` // "text" or "image"
	Text   string       `json:"text,omitempty"`
	Source *ImageSource `json:"source,omitempty"`
}

// ImageSource is a base64 image in a Claude content block.
type ImageSource struct {
	Type      string `json:"type"` // "base64"
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// ClaudeContent returns the result as the content of a Claude tool_result:
// a text block if there is text, then an image block if there is an image.
func (r *Result) ClaudeContent() []ContentBlock {
	var c []ContentBlock
	if r.Text != "" {
		c = append(c, ContentBlock{Type: "text", Text: r.Text})
	}
	if r.Image != nil {
		c = append(c, ContentBlock{Type: "image", Source: &ImageSource{
			Type: "base64", MediaType: r.Image.MediaType, Data: r.Image.Data,
		}})
	}
	return c
}

// ExecutorConfig configures an Executor.
type ExecutorConfig struct {
	// Size is the session's screenshot size policy; the zero value is native.
	Size ScreenshotSize
	// Pacing overrides DefaultPacing.
	Pacing *Pacing
	// Logger receives debug lines; nil means slog.Default().
	Logger *slog.Logger
}

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
	d      Display
	size   ScreenshotSize
	pacing Pacing
	log    *slog.Logger

	mu      sync.Mutex
	scaler  *Scaler
	buttons uint8 // held by button_down
	keys    []Key // held by key_down, in press order
	lastDev device
	idle    time.Duration                                    // paused since the last event
	sleep   func(ctx context.Context, d time.Duration) error // replaced in tests
}

type device int

const (
	devNone device = iota
	devPointer
	devKeyboard
)

// NewExecutor returns an executor for d. The screenshot size is computed from
// the display's current size and recomputed if the display is resized.
func NewExecutor(d Display, cfg ExecutorConfig) (*Executor, error) {
	e := &Executor{d: d, size: cfg.Size, pacing: DefaultPacing, log: cfg.Logger, sleep: sleepCtx}
	if cfg.Pacing != nil {
		e.pacing = *cfg.Pacing
	}
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

// Scaler returns the current scaler (screenshot size and coordinate mapping).
func (e *Executor) Scaler() *Scaler {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.scaler
}

// Held returns the keys and buttons held across requests.
func (e *Executor) Held() (keys []string, buttons []Button) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, k := range e.keys {
		keys = append(keys, k.Name)
	}
	for _, b := range []Button{ButtonLeft, ButtonMiddle, ButtonRight} {
		if bit, _ := buttonMask(b); e.buttons&bit != 0 {
			buttons = append(buttons, b)
		}
	}
	return keys, buttons
}

// Release releases every key and button held across requests.
func (e *Executor) Release() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.releaseAll()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// step is an Action resolved for playing: native coordinates, parsed keys.
type step struct {
	kind   Kind
	at     *image.Point // native; nil means the pointer's position
	from   *image.Point
	via    []image.Point
	button uint8 // button or wheel mask bit
	count  int
	mods   []Key
	keys   []Key // chord keys, or the typed sequence
	dur    time.Duration
	region [4]int
	width  int
	height int
}

func (st *step) observation() bool {
	return st.kind == KindScreenshot || st.kind == KindZoom || st.kind == KindCursorPosition
}

// Run validates all actions and maps their coordinates first (nothing is
// sent if any is invalid or off-screen), then plays them in order, settles,
// and captures what the options ask for. On a failure while playing it
// returns the partial Result with the error, which names the action.
func (e *Executor) Run(ctx context.Context, acts []Action, opts RunOptions) (Result, error) {
	var res Result
	if err := opts.Validate(); err != nil {
		return res, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	start := time.Now()
	e.log.Debug("actions run started", "actions", len(acts))
	e.refreshScaler()
	steps, err := e.plan(acts)
	if err != nil {
		return res, err
	}
	e.lastDev, e.idle = devNone, 0
	inputFailed := false
	err = e.play(ctx, steps, opts, &res, &inputFailed)
	if inputFailed {
		if rerr := e.releaseAll(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release held input: %w", rerr))
		}
	}
	res.SettleMS = float64(res.Settle.Microseconds()) / 1000
	e.log.Debug("actions run finished", "actions", len(acts), "executed", res.Executed,
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
func (e *Executor) plan(acts []Action) ([]step, error) {
	steps := make([]step, len(acts))
	for i := range acts {
		prefix := fmt.Sprintf("actions[%d].", i)
		st, err := e.planOne(&acts[i])
		if err != nil {
			return nil, withPrefix(prefix, err)
		}
		steps[i] = st
	}
	return steps, nil
}

func (e *Executor) planOne(a *Action) (step, error) {
	st := step{kind: a.Kind}
	if err := a.Validate(); err != nil {
		return st, err
	}
	native := func(field string, p Point) (*image.Point, error) {
		x, y, err := e.scaler.ToNative(p.X, p.Y)
		if err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = field
			}
			return nil, err
		}
		return &image.Point{X: x, Y: y}, nil
	}
	var err error
	if a.At != nil {
		if st.at, err = native("x", *a.At); err != nil {
			return st, err
		}
	}
	switch a.Kind {
	case KindClick, KindButtonDown, KindButtonUp, KindDrag:
		if st.button, err = buttonMask(a.Button); err != nil {
			return st, err
		}
		st.count = max(a.Count, 1)
	case KindScroll:
		st.button = wheelMask(a.Direction)
		st.count = a.Amount
	}
	if a.From != nil {
		if st.from, err = native("from", *a.From); err != nil {
			return st, err
		}
	}
	for i, p := range a.Via {
		v, err := native(fmt.Sprintf("via[%d]", i), p)
		if err != nil {
			return st, err
		}
		st.via = append(st.via, *v)
	}
	if st.mods, err = parseModifiers(a.Modifiers); err != nil {
		return st, withPrefix("modifiers", err)
	}
	switch a.Kind {
	case KindKey, KindKeyDown, KindKeyUp, KindHoldKey:
		if st.keys, err = parseKeyList(a.Keys); err != nil {
			return st, withPrefix("keys", err)
		}
	case KindType:
		for i, r := range a.Text {
			if r == '\r' && i+1 < len(a.Text) && a.Text[i+1] == '\n' {
				continue // \r\n is one Return
			}
			k, err := KeyForRune(r)
			if err != nil {
				return st, withPrefix("text", err)
			}
			st.keys = append(st.keys, k)
		}
	case KindZoom:
		if st.region, err = checkRegion(a.Region); err != nil {
			return st, err
		}
		if _, err := e.scaler.RegionToNative(st.region); err != nil {
			return st, err
		}
		st.width, st.height = a.Width, a.Height
	}
	st.dur = time.Duration(a.DurationMS) * time.Millisecond
	return st, nil
}

func buttonMask(b Button) (uint8, error) {
	switch b {
	case "", ButtonLeft:
		return maskLeft, nil
	case ButtonMiddle:
		return maskMiddle, nil
	case ButtonRight:
		return maskRight, nil
	case ButtonBack, ButtonForward:
		return 0, fieldErr("button", ErrUnsupportedButton, fmt.Sprintf(
			"%s is X button %d, which the VNC pointer event of this display cannot carry "+
				"(it has buttons 1-7: left, middle, right and the wheel); for history navigation "+
				"press alt+Left or alt+Right", b, map[Button]int{ButtonBack: 8, ButtonForward: 9}[b]))
	}
	return 0, fieldErr("button", nil, fmt.Sprintf("must be left, middle, right, back or forward, got %q", b))
}

func wheelMask(d Direction) uint8 {
	switch d {
	case ScrollUp:
		return maskWheelUp
	case ScrollDown:
		return maskWheelDown
	case ScrollLeft:
		return maskWheelLeft
	}
	return maskWheelRight
}

// play runs the steps, then settles and captures per the options.
// inputFailed is set when an input step fails (as opposed to a settle or a
// capture, after which the input state is still known).
func (e *Executor) play(ctx context.Context, steps []step, opts RunOptions, res *Result, inputFailed *bool) error {
	dirty := false // input sent (or time waited) since the last settle
	settle := func() error {
		if opts.NoSettle {
			dirty = false
			return nil
		}
		quiet := opts.quiet()
		if !dirty {
			quiet = 0 // only a fresh frame is needed
		}
		d, err := e.d.Settle(ctx, quiet, opts.max())
		res.Settle += d
		if d >= opts.max() {
			res.SettleTimedOut = true
		}
		dirty = false
		if err != nil {
			return fmt.Errorf("settle: %w: %w", ErrDisplay, err)
		}
		return nil
	}
	var lastShot bool // the last capture is a screenshot taken after the last input
	for i := range steps {
		st := &steps[i]
		if err := ctx.Err(); err != nil {
			*inputFailed = true // cancelled between steps: the agent's plan is cut short
			return fmt.Errorf("actions[%d] (%s): %w", i, st.kind, err)
		}
		var err error
		switch st.kind {
		case KindCursorPosition:
			var p image.Point
			if p, err = e.pos(nil); err == nil {
				sx, sy := e.scaler.FromNative(p.X, p.Y)
				if res.Text != "" {
					res.Text += "\n"
				}
				res.Text += fmt.Sprintf("X=%d,Y=%d", sx, sy)
			}
		case KindScreenshot, KindZoom:
			if err = settle(); err == nil {
				res.Image, err = e.capture(st, opts)
				lastShot = st.kind == KindScreenshot
			}
		default:
			dirty = true
			lastShot = false
			if err = e.input(ctx, st); err != nil {
				*inputFailed = true
			}
		}
		if err != nil {
			return fmt.Errorf("actions[%d] (%s): %w", i, st.kind, err)
		}
		res.Executed = i + 1
	}
	policy := opts.Screenshot
	if policy == "" {
		policy = ScreenshotAuto
	}
	take := false
	switch policy {
	case ScreenshotAuto:
		take = len(steps) == 0 || !steps[len(steps)-1].observation()
	case ScreenshotAlways:
		take = !lastShot || len(steps) == 0
	}
	if dirty || take {
		if err := settle(); err != nil {
			return err
		}
	}
	if take {
		img, err := e.capture(&step{kind: KindScreenshot}, opts)
		if err != nil {
			return err
		}
		res.Image = img
	}
	return nil
}

// capture takes a screenshot or a zoom from the display's snapshot.
func (e *Executor) capture(st *step, opts RunOptions) (*Image, error) {
	snap := e.d.Snapshot()
	if snap == nil {
		return nil, fmt.Errorf("snapshot: %w: no framebuffer yet", ErrDisplay)
	}
	if nw, nh := e.scaler.Native(); snap.Rect.Dx() != nw || snap.Rect.Dy() != nh {
		e.refreshScaler()
		if nw, nh := e.scaler.Native(); snap.Rect.Dx() != nw || snap.Rect.Dy() != nh {
			return nil, fmt.Errorf("snapshot is %dx%d but the display reports %dx%d: %w",
				snap.Rect.Dx(), snap.Rect.Dy(), nw, nh, ErrDisplay)
		}
	}
	var img *image.RGBA
	if st.kind == KindZoom {
		var err error
		if img, err = e.scaler.Zoom(snap, st.region, st.width, st.height); err != nil {
			return nil, err
		}
	} else {
		img = e.scaler.Screenshot(snap)
	}
	return encodeImage(img, opts.encodeOptions())
}

// pressed is what one action has pressed for itself and must release.
type pressed struct {
	keys    []Key
	buttons uint8
}

// input plays one input step. Keys and buttons it presses for itself are
// released before it returns, whatever happens.
func (e *Executor) input(ctx context.Context, st *step) (err error) {
	var own pressed
	defer func() {
		if rerr := e.releasePressed(ctx, &own); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release: %w", rerr))
		}
	}()
	p := e.pacing
	switch st.kind {
	case KindMove:
		return e.pointer(ctx, *st.at, e.buttons)

	case KindButtonDown, KindButtonUp:
		pos, err := e.pos(st.at)
		if err != nil {
			return err
		}
		if st.at != nil {
			if err := e.pointer(ctx, pos, e.buttons); err != nil {
				return err
			}
		}
		if st.kind == KindButtonDown {
			e.buttons |= st.button // recorded first: a failed press is still released
			return e.pointer(ctx, pos, e.buttons)
		}
		if err := e.pointer(ctx, pos, e.buttons&^st.button); err != nil {
			return err // still recorded as held: released again on the error path
		}
		e.buttons &^= st.button
		return nil

	case KindClick:
		pos, err := e.approach(ctx, &own, st.at, st.mods)
		if err != nil {
			return err
		}
		for i := 0; i < st.count; i++ {
			if i > 0 {
				if err := e.pause(ctx, p.ClickGap); err != nil {
					return err
				}
			}
			own.buttons |= st.button
			if err := e.pointer(ctx, pos, e.buttons|st.button); err != nil {
				return err
			}
			if err := e.pause(ctx, p.ClickHold); err != nil {
				return err
			}
			if err := e.pointer(ctx, pos, e.buttons&^st.button); err != nil {
				return err
			}
			own.buttons &^= st.button
			e.buttons &^= st.button // a click ends an explicit hold of its button
		}
		return nil

	case KindDrag:
		start, err := e.approach(ctx, &own, st.from, st.mods)
		if err != nil {
			return err
		}
		own.buttons |= st.button
		if err := e.pointer(ctx, start, e.buttons|st.button); err != nil {
			return err
		}
		if err := e.pause(ctx, p.DragHold); err != nil {
			return err
		}
		for _, q := range dragPath(start, st.via, *st.at, p.DragStepPx) {
			if err := e.pointer(ctx, q, e.buttons|st.button); err != nil {
				return err
			}
			if err := e.pause(ctx, p.DragStep); err != nil {
				return err
			}
		}
		if err := e.pause(ctx, p.DragHold); err != nil {
			return err
		}
		if err := e.pointer(ctx, *st.at, e.buttons&^st.button); err != nil {
			return err
		}
		own.buttons &^= st.button
		e.buttons &^= st.button
		return nil

	case KindScroll:
		pos, err := e.approach(ctx, &own, st.at, st.mods)
		if err != nil {
			return err
		}
		for i := 0; i < st.count; i++ {
			if i > 0 {
				if err := e.pause(ctx, p.ScrollGap); err != nil {
					return err
				}
			}
			if err := e.pointer(ctx, pos, e.buttons|st.button); err != nil {
				return err
			}
			if err := e.pointer(ctx, pos, e.buttons); err != nil {
				return err
			}
		}
		return nil

	case KindKey:
		return e.pressChord(ctx, &own, st.keys)

	case KindHoldKey:
		if err := e.pressChord(ctx, &own, st.keys); err != nil {
			return err
		}
		return e.pause(ctx, st.dur)

	case KindKeyDown:
		for _, k := range st.keys {
			if k.Shift && !e.shiftHeld(nil) {
				if err := e.holdKey(ctx, shiftKey); err != nil {
					return err
				}
			}
			if err := e.holdKey(ctx, k); err != nil {
				return err
			}
		}
		return nil

	case KindKeyUp:
		for i := len(st.keys) - 1; i >= 0; i-- {
			k := st.keys[i]
			if err := e.unholdKey(ctx, k); err != nil {
				return err
			}
			if k.Shift {
				if err := e.unholdIfHeld(ctx, shiftKey); err != nil {
					return err
				}
			}
		}
		return nil

	case KindType:
		shifted := false // Shift pressed by this action for the current run of characters
		for _, k := range st.keys {
			if k.Shift && !shifted && !e.shiftHeld(nil) {
				if err := e.press(ctx, &own, shiftKey); err != nil {
					return err
				}
				shifted = true
			} else if !k.Shift && shifted {
				if err := e.releaseOwn(ctx, &own, shiftKey); err != nil {
					return err
				}
				shifted = false
			}
			if err := e.tap(ctx, &own, k); err != nil {
				return err
			}
		}
		return nil

	case KindWait:
		return e.pause(ctx, st.dur)
	}
	return fmt.Errorf("%w: kind %q cannot be played", ErrInvalid, st.kind)
}

// dragPath returns the intermediate and final points of a drag from start
// through via to end: each segment split into steps of at most stepPx
// (between minDragSteps and maxDragSteps per segment).
// approach moves the pointer to at (nil: where it is) without changing the
// buttons, then presses the modifiers an action holds: the first half of a
// click, scroll or drag.
func (e *Executor) approach(ctx context.Context, own *pressed, at *image.Point, mods []Key) (image.Point, error) {
	pos, err := e.pos(at)
	if err != nil {
		return pos, err
	}
	if err := e.pointer(ctx, pos, e.buttons); err != nil {
		return pos, err
	}
	return pos, e.pressAll(ctx, own, mods)
}

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

// pos returns p, or the pointer's position when p is nil.
func (e *Executor) pos(p *image.Point) (image.Point, error) {
	if p != nil {
		return *p, nil
	}
	x, y := e.d.CursorPos()
	if x < 0 || y < 0 {
		return image.Point{}, fmt.Errorf("%w: no pointer event was sent in this session yet, so where "+
			"the pointer is cannot be known; give a coordinate or move the pointer first", ErrPointerUnknown)
	}
	return image.Point{X: x, Y: y}, nil
}

// pressChord presses keys in order, adding Shift_L before a key that needs it
// unless a Shift is already down. own records them for release in reverse.
func (e *Executor) pressChord(ctx context.Context, own *pressed, keys []Key) error {
	for _, k := range keys {
		if k.Shift && !e.shiftHeld(own) {
			if err := e.press(ctx, own, shiftKey); err != nil {
				return err
			}
		}
		if err := e.press(ctx, own, k); err != nil {
			return err
		}
	}
	return nil
}

func (e *Executor) pressAll(ctx context.Context, own *pressed, keys []Key) error {
	for _, k := range keys {
		if err := e.press(ctx, own, k); err != nil {
			return err
		}
	}
	return nil
}

// press presses k for the current action unless it is already down. It is
// recorded before it is sent, so a failed send is still released.
func (e *Executor) press(ctx context.Context, own *pressed, k Key) error {
	if indexKey(e.keys, k) >= 0 || indexKey(own.keys, k) >= 0 {
		return nil
	}
	own.keys = append(own.keys, k)
	return e.key(ctx, k, true)
}

// releaseOwn releases a key the current action pressed. It stays recorded
// until the release is sent.
func (e *Executor) releaseOwn(ctx context.Context, own *pressed, k Key) error {
	i := indexKey(own.keys, k)
	if i < 0 {
		return nil
	}
	if err := e.key(ctx, own.keys[i], false); err != nil {
		return err
	}
	own.keys = append(own.keys[:i], own.keys[i+1:]...)
	return nil
}

// tap presses and releases k (typing), recorded for release in between.
func (e *Executor) tap(ctx context.Context, own *pressed, k Key) error {
	own.keys = append(own.keys, k)
	if err := e.key(ctx, k, true); err != nil {
		return err
	}
	if err := e.key(ctx, k, false); err != nil {
		return err
	}
	own.keys = own.keys[:len(own.keys)-1]
	return nil
}

// releasePressed releases what an action pressed, keys in reverse order and
// then buttons. It keeps going after errors and paces itself even if ctx is
// done. A release that fails is handed to the executor's held set, which
// Run's error path releases again.
func (e *Executor) releasePressed(ctx context.Context, own *pressed) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(own.keys) - 1; i >= 0; i-- {
		k := own.keys[i]
		if err := e.key(ctx, k, false); err != nil {
			errs = append(errs, err)
			if indexKey(e.keys, k) < 0 {
				e.keys = append(e.keys, k)
			}
		}
	}
	own.keys = nil
	if own.buttons != 0 {
		if p, err := e.pos(nil); err == nil { // unknown: no button can be down
			if err := e.pointer(ctx, p, e.buttons); err != nil {
				errs = append(errs, err)
				e.buttons |= own.buttons
			}
		}
		own.buttons = 0
	}
	return errors.Join(errs...)
}

// holdKey presses k and keeps it held across requests.
func (e *Executor) holdKey(ctx context.Context, k Key) error {
	if indexKey(e.keys, k) >= 0 {
		return nil
	}
	e.keys = append(e.keys, k)
	return e.key(ctx, k, true)
}

// unholdKey releases k (as it was pressed, if held), held or not. It stays
// held until the release is sent.
func (e *Executor) unholdKey(ctx context.Context, k Key) error {
	i := indexKey(e.keys, k)
	if i >= 0 {
		k = e.keys[i]
	}
	if err := e.key(ctx, k, false); err != nil {
		return err
	}
	if i >= 0 {
		e.keys = append(e.keys[:i], e.keys[i+1:]...)
	}
	return nil
}

func (e *Executor) unholdIfHeld(ctx context.Context, k Key) error {
	if indexKey(e.keys, k) < 0 {
		return nil
	}
	return e.unholdKey(ctx, k)
}

// releaseAll releases every held key (reverse order) and button.
func (e *Executor) releaseAll() error {
	ctx := context.Background()
	var errs []error
	for i := len(e.keys) - 1; i >= 0; i-- {
		errs = append(errs, e.key(ctx, e.keys[i], false))
	}
	e.keys = nil
	if e.buttons != 0 {
		e.buttons = 0
		if p, err := e.pos(nil); err == nil { // unknown: no button can be down
			errs = append(errs, e.pointer(ctx, p, 0))
		}
	}
	return errors.Join(errs...)
}

// shiftHeld reports whether a Shift key is down, held across requests or
// pressed by the current action (own may be nil).
func (e *Executor) shiftHeld(own *pressed) bool {
	isShift := func(k Key) bool { return k.Keysym == xkShiftL || k.Keysym == xkShiftR }
	for _, k := range e.keys {
		if isShift(k) {
			return true
		}
	}
	if own != nil {
		for _, k := range own.keys {
			if isShift(k) {
				return true
			}
		}
	}
	return false
}

// indexKey finds the physical key k (by scancode, or keysym when there is no
// scancode) in keys.
func indexKey(keys []Key, k Key) int {
	for i, h := range keys {
		if (k.Scancode != 0 && h.Scancode == k.Scancode) || (k.Scancode == 0 && h.Keysym == k.Keysym) {
			return i
		}
	}
	return -1
}

// before paces an event on dev after the previous one: DeviceGap when the
// device changes, KeyGap between key events, less what an action has already
// paused since the last event.
func (e *Executor) before(ctx context.Context, dev device) error {
	var gap time.Duration
	switch {
	case e.lastDev != devNone && e.lastDev != dev:
		gap = e.pacing.DeviceGap
	case dev == devKeyboard && e.lastDev == devKeyboard:
		gap = e.pacing.KeyGap
	}
	gap -= e.idle
	e.lastDev, e.idle = dev, 0
	return e.sleep(ctx, gap)
}

// pause waits d as part of an action's pacing; it counts towards the next
// event's gap.
func (e *Executor) pause(ctx context.Context, d time.Duration) error {
	e.idle += d
	return e.sleep(ctx, d)
}

func (e *Executor) pointer(ctx context.Context, p image.Point, mask uint8) error {
	if err := e.before(ctx, devPointer); err != nil {
		return err
	}
	if err := e.d.Pointer(p.X, p.Y, mask); err != nil {
		return fmt.Errorf("pointer (%d,%d) buttons %#02x: %w: %w", p.X, p.Y, mask, ErrDisplay, err)
	}
	return nil
}

func (e *Executor) key(ctx context.Context, k Key, down bool) error {
	if err := e.before(ctx, devKeyboard); err != nil {
		return err
	}
	if err := e.d.Key(k.Keysym, k.Scancode, down); err != nil {
		dir := "up"
		if down {
			dir = "down"
		}
		return fmt.Errorf("key %s %s: %w: %w", k.Name, dir, ErrDisplay, err)
	}
	return nil
}
