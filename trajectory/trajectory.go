package trajectory

import (
	"context"
	"encoding/json"
	"errors"
	"image"
	"io"
	"log/slog"
	"time"

	"github.com/deskfarm/deskfarm/actions"
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
	// are removed (default 20 GiB).
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

// Manager owns the recorders and the store.
type Manager struct{}

// New opens the store (finishing as interrupted any trajectory a previous
// run left recording, and applying budget and retention) and returns its
// manager.
func New(cfg Config) (*Manager, error) { panic("not yet") }

// Run ends recordings whose episodes end (eps), prunes by age, and
// returns when ctx ends, after finishing every recorder.
func (m *Manager) Run(ctx context.Context, eps Episodes) error { panic("not yet") }

// Start begins recording m.VM; ErrRecording if it already is.
func (m *Manager) Start(ctx context.Context, meta Meta) (api.TrajectoryInfo, error) {
	panic("not yet")
}

// Stop ends the VM's recording (reason, e.g. "stopped", "episode ended")
// and returns its info once written; ErrNotRecording if none.
func (m *Manager) Stop(ctx context.Context, vm, reason string) (api.TrajectoryInfo, error) {
	panic("not yet")
}

// Recorder returns the VM's recorder, nil when it is not being recorded.
func (m *Manager) Recorder(vm string) *Recorder { panic("not yet") }

// List lists the trajectories, newest first.
func (m *Manager) List() api.TrajectoryList { panic("not yet") }

// Get returns a trajectory with its steps.
func (m *Manager) Get(id string) (api.Trajectory, error) { panic("not yet") }

// Open opens one of a trajectory's files by its name relative to its
// deskfarm/ directory (a screenshot, recording.mp4); names outside it
// are ErrInvalid.
func (m *Manager) Open(id, name string) (io.ReadSeekCloser, time.Time, error) {
	panic("not yet")
}

// Export writes the trajectory as a tar or a zip (api.ExportTar,
// api.ExportZip) to w: OSWorld's layout at the root, deskfarm's files
// under deskfarm/. A trajectory still recording is exported as it is.
func (m *Manager) Export(ctx context.Context, id, format string, w io.Writer) error {
	panic("not yet")
}

// SetResult records a client's score (result.txt).
func (m *Manager) SetResult(id string, result float64) error { panic("not yet") }

// Delete removes a finished trajectory.
func (m *Manager) Delete(id string) error { panic("not yet") }

// Recorder records one VM's steps.
type Recorder struct{}

// ID is the trajectory's id.
func (r *Recorder) ID() string { panic("not yet") }

// Begin marks the start of an agent's step: the picture now is its
// before. Call End with what happened; a Pending that is never ended is
// dropped.
func (r *Recorder) Begin() *Pending { panic("not yet") }

// Pending is a step begun and not yet ended.
type Pending struct{}

// Call is what an agent's step did, as the web layer saw it.
type Call struct {
	Kind string // api.Kind*
	Tool string
	// Request and Response are the bodies exactly as sent and returned;
	// the recorder replaces AfterImage's base64 in Response by its hash.
	Request  json.RawMessage
	Response json.RawMessage
	// Actions are the neutral actions played, in the coordinates of
	// ScreenshotSize.
	Actions        []actions.Action
	Status         int
	IsError        bool
	Error          *api.ErrorBody
	ModelResponse  string
	Settle         time.Duration
	Duration       time.Duration
	ScreenshotSize image.Point
	// AfterImage is the image the agent got (PNG or JPEG bytes), nil if
	// none: then the recorder takes the after picture itself.
	AfterImage []byte
	Exec       *api.StepExec
	File       *api.StepFile
	// FileData is a file step's contents, kept only with KeepFiles.
	FileData []byte
}

// End records the step. It never blocks on the disk: when the recorder's
// queue is full the step is kept without its pictures (Dropped says so).
func (p *Pending) End(c Call) { panic("not yet") }
