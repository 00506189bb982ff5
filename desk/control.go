package desk

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"sync"
	"time"
)

// Grant is a person's control of a VM: while Token is current, takeover
// input with it reaches the guest and agents' actions are refused.
type Grant struct {
	Token string
	Since time.Time
}

// control is a desk's human-control state: at most one grant, and the
// input the person holds down on each takeover connection.
type control struct {
	disp Display
	log  *slog.Logger
	vm   string

	mu    sync.Mutex
	grant *Grant
	conns map[*Takeover]struct{}
}

func (c *control) init(vm string, disp Display, log *slog.Logger) {
	c.vm, c.disp, c.log = vm, disp, log
	c.conns = map[*Takeover]struct{}{}
}

// TakeControl grants control of the VM to a person, replacing any earlier
// grant (taking over from another browser tab is one more explicit step,
// not an error); what the replaced person held is released. It is the one
// way control is taken: web decides who may call it (a read-only viewer may
// not).
func (d *Desk) TakeControl() (Grant, error) {
	if err := d.Err(); err != nil {
		return Grant{}, err
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return Grant{}, fmt.Errorf("take control of vm %s: %w", d.VM, err)
	}
	g := Grant{Token: hex.EncodeToString(b), Since: time.Now()}
	d.ctl.set(&g, "replaced")
	d.log.Info("human took control", "vm", d.VM, "op", "control")
	return g, nil
}

// ReleaseControl hands the VM back to the agent and releases what the
// person held. It reports whether a person held control.
func (d *Desk) ReleaseControl() bool {
	had := d.ctl.set(nil, "handed back")
	if had {
		d.log.Info("control handed back to the agent", "vm", d.VM, "op", "control")
	}
	return had
}

// Human reports whether a person holds control, and since when.
func (d *Desk) Human() (since time.Time, ok bool) {
	d.ctl.mu.Lock()
	defer d.ctl.mu.Unlock()
	if d.ctl.grant == nil {
		return time.Time{}, false
	}
	return d.ctl.grant.Since, true
}

// ValidControl reports whether token is the VM's current control token.
func (d *Desk) ValidControl(token string) bool { return d.ctl.valid(token) }

func (c *control) valid(token string) bool {
	if token == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grant != nil && subtle.ConstantTimeCompare([]byte(c.grant.Token), []byte(token)) == 1
}

// set replaces the grant and releases every key and button people hold.
// It reports whether there was a grant.
func (c *control) set(g *Grant, why string) bool {
	c.mu.Lock()
	had := c.grant != nil
	c.grant = g
	conns := c.connsLocked()
	c.mu.Unlock()
	c.release(conns, why)
	return had
}

// releaseBefore ends a grant made before at (a reset at 'at' invalidates it;
// a grant made since is the person's answer to the reset and stays) and
// releases held input. It reports whether a grant ended.
func (c *control) releaseBefore(at time.Time) bool {
	c.mu.Lock()
	ended := c.grant != nil && c.grant.Since.Before(at)
	if ended {
		c.grant = nil
	}
	conns := c.connsLocked()
	c.mu.Unlock()
	c.release(conns, "reset")
	return ended
}

// clear ends the grant without sending input: the display is closing.
func (c *control) clear() {
	c.mu.Lock()
	c.grant = nil
	c.mu.Unlock()
}

func (c *control) connsLocked() []*Takeover {
	out := make([]*Takeover, 0, len(c.conns))
	for t := range c.conns {
		out = append(out, t)
	}
	return out
}

func (c *control) release(conns []*Takeover, why string) {
	for _, t := range conns {
		if err := t.release(); err != nil {
			c.log.Warn("release human input", "vm", c.vm, "op", "control", "why", why, "err", err)
		}
	}
}

// Takeover is one takeover connection's input path (the RFB server noVNC
// talks to). Input passes only while the connection's control token is the
// VM's current one; it tracks the keys and buttons the person holds so
// that they are released when the connection closes, control is handed
// back or taken by someone else, or the VM resets.
type Takeover struct {
	c     *control
	d     *Desk
	token string

	mu      sync.Mutex
	keys    map[uint32]bool // keysyms held down
	buttons uint8
	at      image.Point // last pointer position
	closed  bool
}

// Takeover opens a takeover connection's input path with a control token;
// "" opens a read-only one. A token that is not current is refused with
// ErrNotInControl. Close it when the connection ends.
func (d *Desk) Takeover(token string) (*Takeover, error) {
	if err := d.Err(); err != nil {
		return nil, err
	}
	if token != "" && !d.ctl.valid(token) {
		return nil, fmt.Errorf("takeover of vm %s: %w (take control again)", d.VM, ErrNotInControl)
	}
	t := &Takeover{c: &d.ctl, d: d, token: token}
	d.ctl.mu.Lock()
	d.ctl.conns[t] = struct{}{}
	d.ctl.mu.Unlock()
	return t, nil
}

// InControl reports whether the connection's input reaches the guest now.
func (t *Takeover) InControl() bool { return t.c.valid(t.token) }

// Key presses or releases a key (an X keysym) for the person in control.
// Without control it sends nothing and returns ErrNotInControl; the RFB
// server drops the message.
func (t *Takeover) Key(keysym uint32, down bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || !t.InControl() {
		return ErrNotInControl
	}
	if err := t.c.disp.Key(keysym, 0, down); err != nil {
		return err
	}
	t.d.in.key(keysym, down)
	if t.keys == nil {
		t.keys = map[uint32]bool{}
	}
	if down {
		t.keys[keysym] = true
	} else {
		delete(t.keys, keysym)
	}
	if down {
		ev := Event{Time: time.Now(), Source: SourceHuman, Kind: "key_down"}
		if keysym >= 0x20 && keysym <= 0x7e {
			ev.Text = string(rune(keysym))
		} else {
			ev.Keys = []string{fmt.Sprintf("keysym 0x%x", keysym)}
		}
		t.d.Record(ev)
	}
	return nil
}

// Pointer moves the pointer with a button mask for the person in control;
// see Key.
func (t *Takeover) Pointer(x, y int, buttons uint8) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || !t.InControl() {
		return ErrNotInControl
	}
	if err := t.c.disp.Pointer(x, y, buttons); err != nil {
		return err
	}
	t.d.in.pointer(x, y, buttons)
	pressed := buttons &^ t.buttons
	t.buttons, t.at = buttons&0x7, image.Pt(x, y) // wheel bits are clicks, not holds
	if pressed != 0 {
		x0, y0 := x, y
		t.d.Record(Event{Time: time.Now(), Source: SourceHuman, Kind: "button_down", X: &x0, Y: &y0, Button: buttonName(pressed)})
	}
	return nil
}

// Held returns the keysyms and button mask the connection holds down.
func (t *Takeover) Held() (keysyms []uint32, buttons uint8) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.keys {
		keysyms = append(keysyms, k)
	}
	return keysyms, t.buttons
}

// Close releases what the connection holds and ends it.
func (t *Takeover) Close() error {
	err := t.release()
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.c.mu.Lock()
	delete(t.c.conns, t)
	t.c.mu.Unlock()
	return err
}

// release lets go of every key and button the connection holds.
func (t *Takeover) release() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for k := range t.keys {
		err := t.c.disp.Key(k, 0, false)
		if err == nil {
			t.d.in.key(k, false)
		}
		errs = append(errs, err)
	}
	clear(t.keys)
	if t.buttons != 0 {
		err := t.c.disp.Pointer(t.at.X, t.at.Y, 0)
		if err == nil {
			t.d.in.pointer(t.at.X, t.at.Y, 0)
		}
		errs = append(errs, err)
		t.buttons = 0
	}
	return errors.Join(errs...)
}

func buttonName(mask uint8) string {
	switch {
	case mask&1 != 0:
		return "left"
	case mask&2 != 0:
		return "middle"
	case mask&4 != 0:
		return "right"
	}
	return "wheel"
}
