package osworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/video"
)

// Defaults of FFmpeg.
const (
	// DefaultRecordFPS caps the recording's frame rate while the screen
	// changes; a still screen adds no frames (package video), so a
	// recording follows the screen's pace up to it. OSWorld's x11grab
	// records at 30 whatever the screen does. 25 is full-motion video; what
	// it costs over trajectories' 10 is in docs/benchmarks.md
	// (BenchmarkVideoCPU).
	DefaultRecordFPS = 25
	// stopTimeout bounds ffmpeg's finishing the file once its input ends.
	stopTimeout = 2 * time.Minute
)

var (
	errRecording    = errors.New("recording already in progress")
	errNotRecording = errors.New("no recording in progress")
)

// FFmpeg encodes recordings with the host's ffmpeg (Debian's package)
// through package video: H.264 in an MP4 that follows the screen.
type FFmpeg struct {
	// Path is the ffmpeg binary; default "ffmpeg" on PATH.
	Path string
	// FPS caps the frame rate; default DefaultRecordFPS.
	FPS int
	// Dir holds the file while recording; default os.TempDir().
	Dir string
}

// recording is a Handler's one recording slot.
type recording struct {
	enc *FFmpeg
	mu  sync.Mutex
	cur *recSession
}

type recSession struct {
	rec *video.Recording
	dir string
	out string
}

func (r *recording) start(ctx context.Context, f Frames, vm string, log *slog.Logger) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return errRecording
	}
	dir, err := os.MkdirTemp(r.enc.Dir, "deskfarm-osworld-rec-")
	if err != nil {
		return fmt.Errorf("recording dir: %w", err)
	}
	s := &recSession{dir: dir, out: filepath.Join(dir, "recording.mp4")}
	fps := r.enc.FPS
	if fps <= 0 {
		fps = DefaultRecordFPS
	}
	s.rec, err = video.Start(ctx, f, s.out, video.Options{FFmpeg: r.enc.Path, MaxFPS: fps, Log: log, VM: vm})
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	r.cur = s
	return nil
}

// stop ends the recording and returns the mp4. A recording whose display
// closed mid-way returns the video up to the close.
func (r *recording) stop(ctx context.Context) ([]byte, error) {
	r.mu.Lock()
	s := r.cur
	r.cur = nil
	r.mu.Unlock()
	if s == nil {
		return nil, errNotRecording
	}
	defer os.RemoveAll(s.dir)
	ctx, cancel := context.WithTimeout(ctx, stopTimeout)
	defer cancel()
	if _, err := s.rec.Stop(ctx); err != nil && !errors.Is(err, video.ErrDisplayClosed) {
		return nil, fmt.Errorf("Recording failed: %w", err)
	}
	b, err := os.ReadFile(s.out)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("Recording failed. The output file is missing or empty: %v", err)
	}
	return b, nil
}

// abort stops a recording in progress and removes its files.
func (r *recording) abort() {
	r.mu.Lock()
	s := r.cur
	r.cur = nil
	r.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	s.rec.Stop(ctx)
	os.RemoveAll(s.dir)
}
