package trajectory

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/video"
)

// What a recording runs beside its writer: a watch on the screen's damage
// (so a still screen's snapshot is reused, and a closed screen ends the
// recording), the video (package video) and the person's input
// (demonstration.go).

// a11yTimeout bounds reading one accessibility tree.
const a11yTimeout = 20 * time.Second

type media struct {
	damageCancel func()
	video        *video.Recording
	videoStopped chan struct{} // closed when stopVideo begins
	demo         *demoFeed
}

func (r *Recorder) videoPath() string { return filepath.Join(r.dir, videoFile) }

// startMedia starts the damage watch, the video and the demonstration
// feed; before the writer runs.
func (r *Recorder) startMedia() {
	c, cancel := r.screen.Damage()
	r.media.damageCancel = cancel
	go func() {
		for range c {
			r.dirty.Store(true)
		}
		r.dirty.Store(true)
		select {
		case <-r.quit:
		default:
			r.stop("screen closed")
		}
	}()
	r.startVideo()
	r.startDemo()
}

// startVideo records the screen into recording.mp4 unless NoVideo; a
// missing ffmpeg leaves the trajectory without a video (info.Video empty)
// and says so in the log.
func (r *Recorder) startVideo() {
	if r.meta.Options.NoVideo {
		return
	}
	bin, err := exec.LookPath(r.m.cfg.FFmpeg)
	if err != nil {
		r.log.Warn("trajectory without video: no ffmpeg", "id", r.id, "ffmpeg", r.m.cfg.FFmpeg, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec, err := video.Start(ctx, r.screen, r.videoPath(), video.Options{FFmpeg: bin, Log: r.log, VM: r.meta.VM})
	if err != nil {
		r.log.Warn("trajectory without video", "id", r.id, "err", err)
		return
	}
	r.media.video = rec
	r.media.videoStopped = make(chan struct{})
	r.info.Video = videoFile
	go func() {
		select {
		case <-rec.Done():
		case <-r.media.videoStopped:
			return
		}
		err := rec.Err()
		if err == nil {
			return
		}
		r.log.Warn("trajectory video ended early", "id", r.id, "err", err)
		if errors.Is(err, syscall.ENOSPC) {
			r.fail(err)
		}
	}()
}

// stopVideo finishes the video; nil without one.
func (r *Recorder) stopVideo(ctx context.Context) *video.Info {
	if r.media.damageCancel != nil {
		r.media.damageCancel()
	}
	if r.media.video == nil {
		return nil
	}
	close(r.media.videoStopped)
	info, err := r.media.video.Stop(ctx)
	if err != nil {
		r.log.Warn("trajectory video", "id", r.id, "err", err)
	}
	return &info
}

// a11y keeps the accessibility tree after the step, with A11y on a farm
// that reads them. Reading one takes the guest a second or more, so it is
// read only when no later step waits for the writer (the tree is then the
// screen just after the step, and a backlog never grows from it); a tree
// that is skipped or cannot be read is left out (the step names none), a
// tree that cannot be written stops the recording.
func (r *Recorder) a11y(s *api.TrajectoryStep) error {
	if !r.meta.Options.A11y || r.m.cfg.A11y == nil {
		return nil
	}
	r.mu.Lock()
	backlog := len(r.queue)
	r.mu.Unlock()
	if backlog > 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), a11yTimeout)
	defer cancel()
	tree, err := r.m.cfg.A11y(ctx, r.meta.VM)
	if err != nil {
		r.log.Debug("trajectory: no accessibility tree", "id", r.id, "step", s.Step, "err", err)
		return nil
	}
	name, n, err := r.pics.keep("a11y", tree, ".xml")
	if err != nil {
		return err
	}
	r.written.Add(n)
	s.A11yTree = name
	return nil
}
