package trajectory

// Demonstrations: a person's takeover input, as the desk played it (RFB key
// and pointer events, desk.HumanInputs), becomes the neutral actions an
// agent would have sent for the same effect, so that a demonstration is a
// trajectory like any other and replays through the same executor.
//
// The events are raw: a click is a pointer event with a button bit set and
// one without it, text is a key down and up per character with Shift held
// around capitals, a wheel notch is a press and release of button 4-7
// (noVNC sends one per 50 px of wheel delta). The Coalescer folds them:
//
//   - a press and release of left, middle or right within Slop pixels is a
//     Click at the press; another within DoubleClick at the same place
//     raises its Count (to 3), so a click waits DoubleClick before it is
//     complete;
//   - a press, a move beyond Slop and the release is a Drag from the press
//     through the moves to the release;
//   - wheel notches in one direction at one place are one Scroll whose
//     Amount counts them;
//   - printable keys, Shift allowed, are one TypeText until another kind of
//     input or a pause of TextPause;
//   - any other key, and a printable key with Ctrl, Alt, Super or Meta held,
//     is a KeyPress of the held modifiers and the key as sent; a modifier pressed
//     and released alone is a KeyPress of it (Super opens a menu), except
//     Shift, which alone changes nothing;
//   - moves without a button are not actions (the next action says where).
//
// Positions are the events', native pixels. Times are the events' own, so
// a capture replays to the same actions.

import (
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/desk"
)

// Coalescing thresholds.
const (
	// Slop is how far (pixels, each axis) the pointer may move between a
	// press and its release, or between the clicks of a double click, and
	// still be one place. GTK's default double-click distance is 5.
	Slop = 5
	// DoubleClick is the most time between a click's release and the next
	// press for them to be one double (or triple) click. GTK's and X's
	// default double-click time is 400 ms.
	DoubleClick = 400 * time.Millisecond
	// TextPause ends typed text: the next character starts a new action.
	TextPause = time.Second
	// ScrollPause ends a scroll: the next notch starts a new action.
	ScrollPause = 500 * time.Millisecond
)

// RFB pointer mask bits (RFC 6143 7.5.5): buttons 1-3, wheel 4-7.
const (
	maskLeft   = 1 << 0
	maskMiddle = 1 << 1
	maskRight  = 1 << 2
	maskButton = maskLeft | maskMiddle | maskRight
	maskWheel  = 0xf << 3
)

// Coalescer turns a person's raw input into neutral actions. It is not safe
// for concurrent use: one goroutine feeds it (the recorder's).
type Coalescer struct {
	buttons uint8         // the mask last seen
	at      actions.Point // the pointer, last seen

	mods     []actions.Key // modifiers held, in press order
	modsUsed bool          // something was done with the held modifiers

	held *heldPress // the button held, if any

	// open is the action still growing: typed text, a click that may
	// become a double click, a scroll; last is its latest event's time.
	open openKind
	last time.Time
	text []byte
	clk  actions.Click
	scr  actions.Scroll
}

type openKind int

const (
	openNone openKind = iota
	openText
	openClick
	openScroll
)

// heldPress is a button held down.
type heldPress struct {
	button  actions.Button
	mask    uint8
	from    actions.Point
	mods    []actions.Key
	again   bool // the press continues the open click (a double click)
	drag    bool // moved beyond Slop
	via     []actions.Point
	flushed bool // Flush played its ButtonDown: the release is a ButtonUp
}

// NewCoalescer returns a Coalescer with nothing held.
func NewCoalescer() *Coalescer { return &Coalescer{} }

// Feed takes one event and returns the actions it completed (often none).
func (c *Coalescer) Feed(in desk.HumanInput) []actions.Action {
	if in.Key {
		return c.key(in)
	}
	return c.pointer(in)
}

// Flush returns what is pending (typed text, a held drag) as of now, e.g.
// after a pause of 1 s or at the end. A button still held comes out as
// the ButtonDown (and Move) so far; its release will be a ButtonUp.
func (c *Coalescer) Flush(now time.Time) []actions.Action {
	out := c.close(nil)
	if p := c.held; p != nil && !p.flushed {
		p.flushed = true
		out = append(out, actions.ButtonDown{At: atPoint(p.from), Button: p.button})
		if p.drag {
			out = append(out, actions.Move{To: c.at})
		}
	}
	return out
}

// Pending reports whether Flush would return anything, and the time after
// which it should be called: the pause that ends the open text, click or
// scroll. A held button is not pending: it waits for its release (or the
// last Flush, at the end), and so does a click whose next press is held.
func (c *Coalescer) Pending() (time.Time, bool) {
	switch c.open {
	case openText:
		return c.last.Add(TextPause), true
	case openClick:
		if c.held != nil && c.held.again {
			return time.Time{}, false // the next click of it is held: its release says
		}
		return c.last.Add(DoubleClick), true
	case openScroll:
		return c.last.Add(ScrollPause), true
	}
	return time.Time{}, false
}

// close appends the open action to out and clears it.
func (c *Coalescer) close(out []actions.Action) []actions.Action {
	switch c.open {
	case openText:
		out = append(out, actions.TypeText{Text: string(c.text)})
		c.text = c.text[:0]
	case openClick:
		out = append(out, c.clk)
	case openScroll:
		out = append(out, c.scr)
	}
	c.open = openNone
	if c.held != nil {
		c.held.again = false // the press held now is a click of its own
	}
	return out
}

func (c *Coalescer) key(in desk.HumanInput) []actions.Action {
	k, known := keyOfKeysym(in.Keysym)
	if known && k.IsModifier() {
		return c.modifier(k, in.Down)
	}
	if !in.Down {
		return nil // the press was the action
	}
	c.modsUsed = true
	if r, ok := keysymRune(in.Keysym); ok && !c.chording() {
		var out []actions.Action
		// The cap is counted in bytes, at least the characters: a
		// TypeText stays within actions.MaxTextRunes.
		if c.open != openText || in.Time.Sub(c.last) > TextPause || len(c.text)+utf8.RuneLen(r) > actions.MaxTextRunes {
			out = c.close(nil)
		}
		c.open, c.last = openText, in.Time
		c.text = utf8.AppendRune(c.text, r)
		return out
	}
	if !known {
		return nil // a keysym no neutral key names (an IME's, a dead key): not replayable
	}
	return append(c.close(nil), actions.KeyPress{Keys: c.chord(k)})
}

// modifier tracks a modifier key; one pressed and released with nothing
// done under it is a KeyPress of the modifiers held (not of Shift alone).
func (c *Coalescer) modifier(k actions.Key, down bool) []actions.Action {
	i := indexOfKey(c.mods, k)
	if down {
		if i < 0 {
			if len(c.mods) == 0 {
				c.modsUsed = false
			}
			c.mods = append(c.mods, k)
		}
		return nil
	}
	if i < 0 {
		return nil // released without our seeing the press (subscribed since)
	}
	var out []actions.Action
	if !c.modsUsed && !allShiftKeys(c.mods) {
		c.modsUsed = true
		out = append(c.close(nil), actions.KeyPress{Keys: append([]actions.Key(nil), c.mods...)})
	}
	c.mods = append(c.mods[:i], c.mods[i+1:]...)
	return out
}

// chording reports whether a modifier other than Shift is held: a
// printable key is then a shortcut, not text.
func (c *Coalescer) chording() bool {
	for _, m := range c.mods {
		if !m.IsShift() {
			return true
		}
	}
	return false
}

// chord is the KeyPress keys for k pressed with the held modifiers, k
// being the keysym the person sent: under Shift a letter stays the capital
// (ctrl+shift+T). Lower-cased, it would replay as Shift with a lower-case
// keysym, which QEMU's VNC server takes for Caps Lock being on and
// "corrects" by pressing Caps Lock (ui/vnc.c, lock-key sync).
func (c *Coalescer) chord(k actions.Key) []actions.Key {
	keys := append(make([]actions.Key, 0, len(c.mods)+1), c.mods...)
	if len(keys) >= actions.MaxChordKeys {
		keys = keys[:actions.MaxChordKeys-1]
	}
	return append(keys, k)
}

func (c *Coalescer) pointer(in desk.HumanInput) []actions.Action {
	p := actions.Point{X: in.X, Y: in.Y}
	prev := c.buttons
	c.buttons, c.at = in.Buttons, p
	var out []actions.Action
	if h := c.held; h != nil && p != h.lastPoint() {
		if !h.drag && farApart(p, h.from) {
			h.drag = true
		}
		if h.drag {
			h.via = appendVia(h.via, p)
		}
	}
	if h := c.held; h != nil && in.Buttons&h.mask == 0 {
		out = c.release(out, in.Time, p)
	}
	for bit := uint8(maskLeft); bit <= 1<<6; bit <<= 1 {
		if in.Buttons&bit == 0 || prev&bit != 0 {
			continue
		}
		c.modsUsed = true
		if bit&maskWheel != 0 {
			out = c.wheel(out, in.Time, p, bit)
		} else if c.held == nil {
			out = c.press(out, in.Time, p, bit)
		}
		// A second button pressed while one is held is not an action of
		// its own: the neutral model has no chord of buttons.
	}
	return out
}

func (c *Coalescer) press(out []actions.Action, at time.Time, p actions.Point, bit uint8) []actions.Action {
	b := buttonOfMask(bit)
	h := &heldPress{button: b, mask: bit, from: p, mods: c.heldMods()}
	if c.open == openClick && c.clk.Button == b && c.clk.Count < actions.MaxClickCount &&
		at.Sub(c.last) <= DoubleClick && !farApart(p, *c.clk.At) && sameKeysyms(c.clk.Modifiers, h.mods) {
		h.again = true
	} else {
		out = c.close(out)
	}
	c.held = h
	return out
}

func (c *Coalescer) release(out []actions.Action, at time.Time, p actions.Point) []actions.Action {
	h := c.held
	c.held = nil
	switch {
	case h.flushed:
		return append(c.close(out), actions.ButtonUp{At: &p, Button: h.button})
	case h.drag:
		via := h.via
		if n := len(via); n > 0 && via[n-1] == p {
			via = via[:n-1]
		}
		return append(c.close(out), actions.Drag{From: atPoint(h.from), Via: thinVia(via), To: p, Button: h.button, Modifiers: h.mods})
	case h.again:
		c.clk.Count++
		c.last = at
		if c.clk.Count == actions.MaxClickCount {
			out = c.close(out)
		}
		return out
	}
	out = c.close(out) // a click pending when Flush ran in the press
	c.open, c.last = openClick, at
	c.clk = actions.Click{At: atPoint(h.from), Button: h.button, Count: 1, Modifiers: h.mods}
	return out
}

func (c *Coalescer) wheel(out []actions.Action, at time.Time, p actions.Point, bit uint8) []actions.Action {
	dir := map[uint8]actions.Direction{1 << 3: actions.ScrollUp, 1 << 4: actions.ScrollDown,
		1 << 5: actions.ScrollLeft, 1 << 6: actions.ScrollRight}[bit]
	mods := c.heldMods()
	if c.open == openScroll && c.scr.Direction == dir && !farApart(p, *c.scr.At) && sameKeysyms(c.scr.Modifiers, mods) &&
		at.Sub(c.last) <= ScrollPause && c.scr.Amount < actions.MaxScrollAmount {
		c.scr.Amount++
		c.last = at
		return out
	}
	out = c.close(out)
	c.open, c.last = openScroll, at
	c.scr = actions.Scroll{At: atPoint(p), Direction: dir, Amount: 1, Modifiers: mods}
	return out
}

// heldMods returns a copy of the held modifiers, nil when none, and marks
// them used.
func (c *Coalescer) heldMods() []actions.Key {
	if len(c.mods) == 0 {
		return nil
	}
	c.modsUsed = true
	return append([]actions.Key(nil), c.mods...)
}

func (h *heldPress) lastPoint() actions.Point {
	if n := len(h.via); n > 0 {
		return h.via[n-1]
	}
	return h.from
}

// appendVia adds a drag's point, halving the path when it grows past twice
// what a Drag carries so a long drag holds bounded memory.
func appendVia(via []actions.Point, p actions.Point) []actions.Point {
	via = append(via, p)
	if len(via) >= 2*actions.MaxDragVia {
		via = thinVia(via)
	}
	return via
}

// thinVia keeps every other point until at most actions.MaxDragVia remain,
// keeping the last (the path's end before the release).
func thinVia(via []actions.Point) []actions.Point {
	for len(via) > actions.MaxDragVia {
		out := via[:0:0]
		for i := len(via) - 1; i >= 0; i -= 2 {
			out = append(out, via[i])
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		via = out
	}
	return via
}

func farApart(a, b actions.Point) bool { return absDemo(a.X-b.X) > Slop || absDemo(a.Y-b.Y) > Slop }

func absDemo(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func atPoint(p actions.Point) *actions.Point { return &p }

func buttonOfMask(bit uint8) actions.Button {
	switch bit {
	case maskMiddle:
		return actions.ButtonMiddle
	case maskRight:
		return actions.ButtonRight
	}
	return actions.ButtonLeft
}

func indexOfKey(keys []actions.Key, k actions.Key) int {
	for i, m := range keys {
		if m.Keysym == k.Keysym {
			return i
		}
	}
	return -1
}

func allShiftKeys(keys []actions.Key) bool {
	for _, k := range keys {
		if !k.IsShift() {
			return false
		}
	}
	return true
}

func sameKeysyms(a, b []actions.Key) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Keysym != b[i].Keysym {
			return false
		}
	}
	return true
}

// keysymKeys maps X keysyms to the neutral keys (actions.AllKeys: the US
// layout's characters and the named keys).
var keysymKeys = func() map[uint32]actions.Key {
	m := map[uint32]actions.Key{}
	for _, k := range actions.AllKeys() {
		m[k.Keysym] = k
	}
	return m
}()

func keyOfKeysym(keysym uint32) (actions.Key, bool) {
	k, ok := keysymKeys[keysym]
	return k, ok
}

// keysymRune returns the character a keysym types: printable ASCII and
// Latin-1 keysyms are their code (keysymdef.h), Unicode keysyms are
// 0x01000000 plus the code point. TypeText types ASCII over the display
// and the rest through the guest's session.
func keysymRune(keysym uint32) (rune, bool) {
	var r rune
	switch {
	case keysym >= 0x20 && keysym <= 0x7e, keysym >= 0xa0 && keysym <= 0xff:
		r = rune(keysym)
	case keysym >= 0x01000100 && keysym <= 0x0110ffff:
		r = rune(keysym - 0x01000000)
	default:
		return 0, false
	}
	return r, unicode.IsPrint(r)
}
