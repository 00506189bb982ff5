package desk

import (
	"context"
	"fmt"
	"image"
	"log/slog"

	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vnc"
)

// Display is what a desk needs from a VM's screen connection. VNCDisplay
// adapts a *vnc.Client; unit tests use a fake.
type Display interface {
	// player.Display: size, snapshot with cursor, input, settle.
	player.Display
	// SnapshotRaw is a copy of the framebuffer without the cursor.
	SnapshotRaw() *image.RGBA
	// Damage subscribes to framebuffer changes; the channel closes when the
	// display does; cancel ends the subscription.
	Damage() (c <-chan vnc.Damage, cancel func())
	// Close ends the connection and every subscription.
	Close() error
}

// FrameSource is a display's picture without its input: what an RFB
// server for takeover reads (its input goes through a Takeover).
type FrameSource interface {
	SnapshotRaw() *image.RGBA
	Damage() (c <-chan vnc.Damage, cancel func())
}

// Frames returns the desk's picture for a takeover RFB server.
func (d *Desk) Frames() FrameSource { return d.disp }

// DialFunc opens the display of a ready VM; ctx bounds the dial.
type DialFunc func(ctx context.Context, vm vmm.VM, log *slog.Logger) (Display, error)

// VNCDisplay is a Display over a vnc.Client.
type VNCDisplay struct{ *vnc.Client }

var (
	_ Display = VNCDisplay{}
	// The client's FrameCache comes with it: every RFB server showing
	// Frames shares encoded full frames (issue 9).
	_ vnc.SharedFrameSource = VNCDisplay{}
)

// Damage subscribes to the client's framebuffer changes.
func (d VNCDisplay) Damage() (<-chan vnc.Damage, func()) {
	s := d.Subscribe()
	return s.C, s.Close
}

// DialVNC is the default DialFunc: the VM's VNC unix socket, with a first
// full frame before it returns.
func DialVNC(ctx context.Context, vm vmm.VM, log *slog.Logger) (Display, error) {
	c, err := vnc.Dial(ctx, vnc.Config{Socket: vm.VNCSocket, VM: vm.ID, Log: log})
	if err != nil {
		return nil, fmt.Errorf("display of vm %s: %w", vm.ID, err)
	}
	return VNCDisplay{c}, nil
}
