// Package video owns screen recordings: a VM's live picture encoded on the
// host by ffmpeg (Debian's package) into H.264 in a fragmented MP4 that
// follows the screen, a frame per change up to MaxFPS and nothing while the
// screen is still, and that stays playable if the process dies mid-way.
// The trajectory recorder and OSWorld's start/end_recording use it.
package video

import (
	"context"
	"image"
	"log/slog"
	"time"

	"github.com/deskfarm/deskfarm/vnc"
)

// Frames is a live picture to record.
type Frames interface {
	// Snapshot is a copy of the framebuffer, cursor included.
	Snapshot() *image.RGBA
	// Damage subscribes to framebuffer changes; the channel closes when
	// the display does.
	Damage() (c <-chan vnc.Damage, cancel func())
}

// Options configure a recording.
type Options struct {
	// FFmpeg is the binary; default "ffmpeg" on PATH.
	FFmpeg string
	// MaxFPS caps the frame rate while the screen changes; default 10.
	MaxFPS int
	// Log gets the recording's events (keys vm, op).
	Log *slog.Logger
	// VM names the recording's VM in logs.
	VM string
}

// Info is what a finished recording holds.
type Info struct {
	Path     string
	Frames   int
	Bytes    int64
	Duration time.Duration
	// CPU is the ffmpeg process's user+system CPU time.
	CPU time.Duration
}

// Recording is one ffmpeg encoding f's picture into a file.
type Recording struct{}

// Start begins recording f into path (created; its directory must exist).
// ctx bounds only the start.
func Start(ctx context.Context, f Frames, path string, o Options) (*Recording, error) {
	panic("video.Start: not yet")
}

// Stop ends the recording: the last picture is held until now, ffmpeg
// finishes the file, and Info says what it holds. ctx bounds the wait.
func (r *Recording) Stop(ctx context.Context) (Info, error) { panic("not yet") }

// Done is closed when the recording ends by itself (the display closed,
// ffmpeg died, the disk filled); Err then says why.
func (r *Recording) Done() <-chan struct{} { panic("not yet") }

// Err is why a recording ended early, nil while it runs.
func (r *Recording) Err() error { panic("not yet") }
