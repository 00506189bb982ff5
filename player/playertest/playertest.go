// Package playertest is the fake desktop the player's and the vocabularies'
// unit tests play onto: an in-memory Display and GuestInput that record the
// key and pointer events they are sent and keep the input state the guest
// would have, so a test asserts what the guest received and what is still
// pressed. It imports only the action model, so the player's own tests can
// use it.
package playertest

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/color"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/internal/keytest"
)

// Display is an in-memory player.Display standing in for the guest. It
// records the events it is sent (never the executor's sleeps, which Sleep
// turns into advances of its virtual clock).
type Display struct {
	W, H      int
	X, Y      int
	Buttons   uint8           // the guest's button state
	Down      map[string]bool // keys the guest may have down
	Img       *image.RGBA
	Events    []string
	Keys      []KeyEvent // every key event sent, in order
	N         int        // events sent so far
	FailAt    int        // fail the FailAt'th event (1-based); 0: never
	FailErr   error      // what it fails with; nil means ErrWire
	Settles   []string
	Settled   time.Duration // what Settle reports
	SettleErr error         // what Settle fails with
	Moved     bool          // a pointer event was sent
	Unknown   bool          // CursorPos is (-1, -1) until a pointer event, like vnc.Client
	Now       time.Duration // virtual clock, advanced by Sleep
	At        []time.Duration
	OnEvent   func() // called after each event
}

// ErrWire is what a Display's failing event returns by default.
var ErrWire = errors.New("wire broke")

// New returns a w x h display showing CoordImage.
func New(w, h int) *Display {
	return &Display{W: w, H: h, Img: CoordImage(w, h), Settled: 7 * time.Millisecond, Down: map[string]bool{}}
}

// Size returns the display's size.
func (f *Display) Size() (int, int) { return f.W, f.H }

// Snapshot returns the image.
func (f *Display) Snapshot() *image.RGBA { return f.Img }

// CursorPos returns the pointer, or (-1, -1) while Unknown and unmoved.
func (f *Display) CursorPos() (int, int) {
	if f.Unknown && !f.Moved {
		return -1, -1
	}
	return f.X, f.Y
}

// Event records s, failing it if it is the FailAt'th.
func (f *Display) Event(s string) error {
	f.N++
	f.At = append(f.At, f.Now)
	defer func() {
		if f.OnEvent != nil {
			f.OnEvent()
		}
	}()
	if f.FailAt != 0 && f.N == f.FailAt {
		f.Events = append(f.Events, "FAILED "+s)
		if f.FailErr != nil {
			return f.FailErr
		}
		return ErrWire
	}
	f.Events = append(f.Events, s)
	return nil
}

// Pointer records "ptr x,y mask".
func (f *Display) Pointer(x, y int, buttons uint8) error {
	err := f.Event(fmt.Sprintf("ptr %d,%d %#02x", x, y, buttons))
	if err != nil {
		f.Buttons |= buttons // a press may have arrived; a release may not have
		return err
	}
	f.X, f.Y, f.Buttons, f.Moved = x, y, buttons, true
	return nil
}

// KeyEvent is one key event as sent, keysym and all.
type KeyEvent struct {
	Keysym   uint32
	Scancode uint16
	Down     bool
}

// Key records "key NAME down|up", and the event in Keys.
func (f *Display) Key(keysym uint32, scancode uint16, down bool) error {
	dir := "up"
	if down {
		dir = "down"
	}
	name := KeyName(keysym, scancode)
	f.Keys = append(f.Keys, KeyEvent{Keysym: keysym, Scancode: scancode, Down: down})
	if err := f.Event("key " + name + " " + dir); err != nil {
		if down {
			f.Down[name] = true // may have arrived
		}
		return err
	}
	f.Down[name] = down
	return nil
}

// Settle records "settle quiet max" and returns Settled, SettleErr.
func (f *Display) Settle(ctx context.Context, quiet, max time.Duration) (time.Duration, error) {
	f.Settles = append(f.Settles, fmt.Sprintf("settle %v %v", quiet, max))
	return f.Settled, f.SettleErr
}

// Sleep advances the virtual clock instead of sleeping (for
// player.ExecutorConfig.Sleep).
func (f *Display) Sleep(ctx context.Context, d time.Duration) error {
	f.Now += max(d, 0)
	return ctx.Err()
}

// Stuck returns what the guest may still have pressed.
func (f *Display) Stuck() []string {
	var out []string
	for k, d := range f.Down {
		if d {
			out = append(out, k)
		}
	}
	if f.Buttons != 0 {
		out = append(out, fmt.Sprintf("buttons %#x", f.Buttons))
	}
	slices.Sort(out)
	return out
}

// Guest is a GuestInput that records what it is asked into its display's
// event list, so tests see the order of display and guest input as the
// guest would.
type Guest struct {
	F         *Display
	Clipboard string
	Fail      error
}

// TypeText records "guest type TEXT".
func (g *Guest) TypeText(ctx context.Context, text string) error {
	if g.Fail != nil {
		return g.Fail
	}
	return g.F.Event("guest type " + text)
}

// Button records "guest button N x,y xCOUNT".
func (g *Guest) Button(ctx context.Context, button, x, y, count int) error {
	if g.Fail != nil {
		return g.Fail
	}
	return g.F.Event(fmt.Sprintf("guest button %d %d,%d x%d", button, x, y, count))
}

// ClipboardGet returns Clipboard.
func (g *Guest) ClipboardGet(ctx context.Context) (string, error) { return g.Clipboard, g.Fail }

// ClipboardSet sets Clipboard.
func (g *Guest) ClipboardSet(ctx context.Context, text string) error {
	if g.Fail != nil {
		return g.Fail
	}
	g.Clipboard = text
	return nil
}

// KeyName names a keysym/scancode pair the way the tests spell it.
func KeyName(keysym uint32, scancode uint16) string {
	for _, k := range actions.AllKeys() {
		if k.Keysym == keysym && k.Scancode == scancode {
			return k.Name
		}
	}
	return fmt.Sprintf("%#x/%#x", keysym, scancode)
}

// Pt returns a *Point.
func Pt(x, y int) *actions.Point { return &actions.Point{X: x, Y: y} }

// CheckEvents fails t unless got is want.
func CheckEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("guest received:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// MaskLeft is the RFB pointer mask of the left button.
const MaskLeft uint8 = 1

// Presses returns the pointer events that press bit (going from up to down).
func Presses(events []string, bit uint8) []string {
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

// KeysDownAt returns the keys down when the guest received event i.
func KeysDownAt(events []string, i int) []string {
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

// GuestUS decodes key events the way a guest with a US layout and QEMU's
// scancode path would: by scancode and Shift state, ignoring the keysym.
func GuestUS(t *testing.T, events []string) string {
	t.Helper()
	byName := map[string]actions.Key{}
	for _, k := range actions.AllKeys() {
		byName[k.Name] = k
	}
	layout := map[uint16][2]byte{}
	for _, row := range keytest.USASCII {
		v := layout[row.Code]
		if row.Shift {
			v[1] = row.C
		} else {
			v[0] = row.C
		}
		layout[row.Code] = v
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
		case k.IsShift():
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

// CoordImage returns an image whose pixel (x, y) encodes x and y.
func CoordImage(w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(x), uint8(x >> 8), uint8(y), 255})
		}
	}
	return img
}
