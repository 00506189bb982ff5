package trajectory

import (
	"context"
	"errors"
	"image"
	"log/slog"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/vnc"
)

// Errors.
var (
	// ErrNotFound: no trajectory has that id.
	ErrNotFound = errors.New("no such trajectory")
	// ErrRecording: the VM is already being recorded.
	ErrRecording = errors.New("already recording")
	// ErrNotRecording: the VM is not being recorded.
	ErrNotRecording = errors.New("not recording")
	// ErrInvalid: a bad argument (export format, file name); wrapped in a
	// fielderr.Error naming it.
	ErrInvalid = errors.New("invalid")
)

// Screen is a VM's live picture and pointer: a desk's Display.
type Screen interface {
	// Snapshot is a copy of the framebuffer, cursor included.
	Snapshot() *image.RGBA
	Damage() (c <-chan vnc.Damage, cancel func())
	CursorPos() (x, y int)
}

// Desks opens a VM's screen and its people's input; cmd/deskfarm adapts
// *desk.Pool.
type Desks interface {
	Screen(ctx context.Context, vm string) (Screen, error)
	// HumanInputs subscribes to the input people send through takeover
	// (desk.Desk.HumanInputs).
	HumanInputs(ctx context.Context, vm string) (<-chan desk.HumanInput, func(), error)
}

// A11y reads a VM's accessibility tree (OSWorld's XML), for recordings
// with RecordOptions.A11y; nil on a farm without AT-SPI images.
type A11y func(ctx context.Context, vm string) ([]byte, error)

// Episodes is what the manager watches to end an episode's recording when
// the episode ends; cmd/deskfarm adapts *pool.Manager.
type Episodes interface {
	// Changed is closed at the next change of the pools' episodes.
	Changed() <-chan struct{}
	// Active reports whether the episode still holds its VM.
	Active(id string) bool
}

// Config configures a Manager.
type Config struct {
	// Dir holds the trajectories, one directory each (the state dir's
	// trajectories/).
	Dir string
	// BudgetBytes caps the store: past it the oldest finished trajectories
	// are removed, and a recording that alone exceeds it stops (default
	// 20 GiB; negative: no cap).
	BudgetBytes int64
	// Retention removes finished trajectories older than this (default
	// 7 days; negative keeps them forever).
	Retention time.Duration
	Desks     Desks
	A11y      A11y
	// FFmpeg is the ffmpeg binary for the video; default on PATH.
	FFmpeg string
	Log    *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Meta describes what a recording records.
type Meta struct {
	// ID is the trajectory's id: the episode's, or empty for a VM
	// recording (one is made).
	ID             string
	Episode        string
	VM             string
	Pool           string
	Image          string
	ScreenshotSize string // the episode's default ("WxH", "auto", "native")
	Options        api.RecordOptions
}
