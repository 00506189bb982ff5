package player

import (
	"context"
	"errors"
	"fmt"
	"image"

	"github.com/deskfarm/deskfarm/actions"
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

// input is the state machine of what is pressed on the guest. It sends every
// key and pointer event of an Executor (paced by its pacer) and keeps two
// records:
//
//   - held: keys and buttons the agent holds across requests (key_down,
//     button_down); they stay down until released explicitly or by
//     releaseAll.
//   - pressed (one per action): what the action pressed for itself (a
//     click's modifiers, a chord, the Shift of a capital, a drag's button).
//     releasePressed lets them all go before the action returns, whatever
//     happened.
//
// The invariant is that nothing is down on the guest that is in neither
// record: a key is recorded before its press is sent (a failed send may
// still have arrived) and dropped only after its release was sent, and a
// release that fails moves the key into held, which releaseAll retries.
type input struct {
	d       Display
	pace    *pacer
	buttons uint8         // held across requests by button_down
	keys    []actions.Key // held across requests by key_down, in press order
}

// pressed is what one action has pressed for itself and must release.
type pressed struct {
	keys    []actions.Key
	buttons uint8
}

// heldNames returns the keys and buttons held across requests.
func (in *input) heldNames() (keys []string, buttons []actions.Button) {
	for _, k := range in.keys {
		keys = append(keys, k.Name)
	}
	for _, b := range []actions.Button{actions.ButtonLeft, actions.ButtonMiddle, actions.ButtonRight} {
		if bit, _ := buttonMask(b); in.buttons&bit != 0 {
			buttons = append(buttons, b)
		}
	}
	return keys, buttons
}

// pos returns p, or the pointer's position when p is nil.
func (in *input) pos(p *image.Point) (image.Point, error) {
	if p != nil {
		return *p, nil
	}
	x, y := in.d.CursorPos()
	if x < 0 || y < 0 {
		return image.Point{}, fmt.Errorf("%w: no pointer event was sent in this session yet, so where "+
			"the pointer is cannot be known; give a coordinate or move the pointer first", actions.ErrPointerUnknown)
	}
	return image.Point{X: x, Y: y}, nil
}

// pointer sends one pointer event.
func (in *input) pointer(ctx context.Context, p image.Point, mask uint8) error {
	if err := in.pace.before(ctx, devPointer); err != nil {
		return err
	}
	if err := in.d.Pointer(p.X, p.Y, mask); err != nil {
		return fmt.Errorf("pointer (%d,%d) buttons %#02x: %w: %w", p.X, p.Y, mask, actions.ErrDisplay, err)
	}
	return nil
}

// key sends one key event.
func (in *input) key(ctx context.Context, k actions.Key, down bool) error {
	if err := in.pace.before(ctx, devKeyboard); err != nil {
		return err
	}
	if err := in.d.Key(k.Keysym, k.Scancode, down); err != nil {
		dir := "up"
		if down {
			dir = "down"
		}
		return fmt.Errorf("key %s %s: %w: %w", k.Name, dir, actions.ErrDisplay, err)
	}
	return nil
}

// approach moves the pointer to at (nil: where it is) without changing the
// buttons, then presses the modifiers an action holds: the first half of a
// click, scroll or drag.
func (in *input) approach(ctx context.Context, own *pressed, at *image.Point, mods []actions.Key) (image.Point, error) {
	pos, err := in.pos(at)
	if err != nil {
		return pos, err
	}
	if err := in.pointer(ctx, pos, in.buttons); err != nil {
		return pos, err
	}
	for _, k := range mods {
		if err := in.press(ctx, own, k); err != nil {
			return pos, err
		}
	}
	return pos, nil
}

// pressChord presses keys in order, adding Shift_L before a key that needs it
// unless a Shift is already down. own records them for release in reverse.
func (in *input) pressChord(ctx context.Context, own *pressed, keys []actions.Key) error {
	for _, k := range keys {
		if k.Shift && !in.shiftHeld(own) {
			if err := in.press(ctx, own, actions.ShiftKey()); err != nil {
				return err
			}
		}
		if err := in.press(ctx, own, k); err != nil {
			return err
		}
	}
	return nil
}

// press presses k for the current action unless it is already down. It is
// recorded before it is sent, so a failed send is still released.
func (in *input) press(ctx context.Context, own *pressed, k actions.Key) error {
	if indexKey(in.keys, k) >= 0 || indexKey(own.keys, k) >= 0 {
		return nil
	}
	k = shiftCase(k, in.shiftHeld(own))
	own.keys = append(own.keys, k)
	return in.key(ctx, k, true)
}

// releaseOwn releases a key the current action pressed. It stays recorded
// until the release is sent.
func (in *input) releaseOwn(ctx context.Context, own *pressed, k actions.Key) error {
	i := indexKey(own.keys, k)
	if i < 0 {
		return nil
	}
	if err := in.key(ctx, own.keys[i], false); err != nil {
		return err
	}
	own.keys = append(own.keys[:i], own.keys[i+1:]...)
	return nil
}

// tap presses and releases k (typing), recorded for release in between.
func (in *input) tap(ctx context.Context, own *pressed, k actions.Key) error {
	k = shiftCase(k, in.shiftHeld(own))
	own.keys = append(own.keys, k)
	if err := in.key(ctx, k, true); err != nil {
		return err
	}
	if err := in.key(ctx, k, false); err != nil {
		return err
	}
	own.keys = own.keys[:len(own.keys)-1]
	return nil
}

// pressButton presses bit (a button, or a wheel bit) for the current action
// at p, with the held buttons.
func (in *input) pressButton(ctx context.Context, own *pressed, p image.Point, bit uint8) error {
	own.buttons |= bit
	return in.pointer(ctx, p, in.buttons|own.buttons)
}

// releaseButton releases bit at p. A click or drag of a button the agent
// held with button_down ends that hold too.
func (in *input) releaseButton(ctx context.Context, own *pressed, p image.Point, bit uint8) error {
	if err := in.pointer(ctx, p, (in.buttons|own.buttons)&^bit); err != nil {
		return err
	}
	own.buttons &^= bit
	in.buttons &^= bit
	return nil
}

// releasePressed releases what an action pressed, keys in reverse order and
// then buttons. It keeps going after errors and paces itself even if ctx is
// done. A release that fails is handed to the held set, which Run's error
// path releases again.
func (in *input) releasePressed(ctx context.Context, own *pressed) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(own.keys) - 1; i >= 0; i-- {
		k := own.keys[i]
		if err := in.key(ctx, k, false); err != nil {
			errs = append(errs, err)
			if indexKey(in.keys, k) < 0 {
				in.keys = append(in.keys, k)
			}
		}
	}
	own.keys = nil
	if own.buttons != 0 {
		if p, err := in.pos(nil); err == nil { // unknown: no button can be down
			if err := in.pointer(ctx, p, in.buttons); err != nil {
				errs = append(errs, err)
				in.buttons |= own.buttons
			}
		}
		own.buttons = 0
	}
	return errors.Join(errs...)
}

// holdButton presses bit at p and keeps it held across requests. It is
// recorded first: a failed press is still released.
func (in *input) holdButton(ctx context.Context, p image.Point, bit uint8) error {
	in.buttons |= bit
	return in.pointer(ctx, p, in.buttons)
}

// unholdButton releases bit at p; it stays held until the release is sent.
func (in *input) unholdButton(ctx context.Context, p image.Point, bit uint8) error {
	if err := in.pointer(ctx, p, in.buttons&^bit); err != nil {
		return err
	}
	in.buttons &^= bit
	return nil
}

// holdKey presses k and keeps it held across requests.
func (in *input) holdKey(ctx context.Context, k actions.Key) error {
	if indexKey(in.keys, k) >= 0 {
		return nil
	}
	k = shiftCase(k, in.shiftHeld(nil))
	in.keys = append(in.keys, k)
	return in.key(ctx, k, true)
}

// unholdKey releases k (as it was pressed, if held), held or not. It stays
// held until the release is sent.
func (in *input) unholdKey(ctx context.Context, k actions.Key) error {
	i := indexKey(in.keys, k)
	if i >= 0 {
		k = in.keys[i]
	}
	if err := in.key(ctx, k, false); err != nil {
		return err
	}
	if i >= 0 {
		in.keys = append(in.keys[:i], in.keys[i+1:]...)
	}
	return nil
}

func (in *input) unholdIfHeld(ctx context.Context, k actions.Key) error {
	if indexKey(in.keys, k) < 0 {
		return nil
	}
	return in.unholdKey(ctx, k)
}

// releaseAll releases every held key (reverse order) and button, unpaced
// by any context: it is the way out of every failure.
func (in *input) releaseAll() error {
	ctx := context.Background()
	var errs []error
	for i := len(in.keys) - 1; i >= 0; i-- {
		errs = append(errs, in.key(ctx, in.keys[i], false))
	}
	in.keys = nil
	if in.buttons != 0 {
		in.buttons = 0
		if p, err := in.pos(nil); err == nil { // unknown: no button can be down
			errs = append(errs, in.pointer(ctx, p, 0))
		}
	}
	return errors.Join(errs...)
}

// shiftHeld reports whether a Shift key is down, held across requests or
// pressed by the current action (own may be nil).
func (in *input) shiftHeld(own *pressed) bool {
	for _, k := range in.keys {
		if k.IsShift() {
			return true
		}
	}
	if own != nil {
		for _, k := range own.keys {
			if k.IsShift() {
				return true
			}
		}
	}
	return false
}

// shiftCase returns k with the keysym an X server reports for a letter key
// with Shift down (the capital) or up (the small letter); other keys are
// unchanged. QEMU's VNC server (ui/vnc.c, lock_key_sync, on by default)
// takes a letter whose case disagrees with Shift for Caps Lock being on and
// presses Caps Lock to match it: ctrl+shift+t sent as Shift and "t" left
// the guest's Caps Lock on, and the agent's next typing came out in
// capitals. The scancode, which the guest reads, is the same either way.
func shiftCase(k actions.Key, shift bool) actions.Key {
	switch {
	case shift && k.Keysym >= 'a' && k.Keysym <= 'z':
		k.Keysym -= 'a' - 'A'
	case !shift && k.Keysym >= 'A' && k.Keysym <= 'Z':
		k.Keysym += 'a' - 'A'
	}
	return k
}

// indexKey finds the physical key k (by scancode, or keysym when there is no
// scancode) in keys.
func indexKey(keys []actions.Key, k actions.Key) int {
	for i, h := range keys {
		if (k.Scancode != 0 && h.Scancode == k.Scancode) || (k.Scancode == 0 && h.Keysym == k.Keysym) {
			return i
		}
	}
	return -1
}

func buttonMask(b actions.Button) (uint8, error) {
	switch b {
	case "", actions.ButtonLeft:
		return maskLeft, nil
	case actions.ButtonMiddle:
		return maskMiddle, nil
	case actions.ButtonRight:
		return maskRight, nil
	case actions.ButtonBack, actions.ButtonForward:
		return 0, actions.Invalid("button", actions.ErrUnsupportedButton, fmt.Sprintf(
			"%s is X button %d, which the VNC pointer event of this display cannot carry "+
				"(it has buttons 1-7: left, middle, right and the wheel); for history navigation "+
				"press alt+Left or alt+Right", b, map[actions.Button]int{actions.ButtonBack: 8, actions.ButtonForward: 9}[b]))
	}
	return 0, actions.OneOf("button", nil, actions.ButtonNames, fmt.Sprintf("must be left, middle, right, back or forward, got %q", b))
}

func wheelMask(d actions.Direction) uint8 {
	switch d {
	case actions.ScrollUp:
		return maskWheelUp
	case actions.ScrollDown:
		return maskWheelDown
	case actions.ScrollLeft:
		return maskWheelLeft
	}
	return maskWheelRight
}
