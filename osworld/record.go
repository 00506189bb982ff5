package osworld

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Defaults of FFmpeg.
const (
	// DefaultRecordFPS is the recording's frame rate. OSWorld's x11grab
	// records at 30; 10 keeps one 1080p encoder per VM affordable on a
	// small host (raw RGBA in: 8 MB per frame), and a recording is for a
	// person reviewing a run, not for a model.
	DefaultRecordFPS = 10
	// stopTimeout bounds ffmpeg's finishing the file once its input ends.
	stopTimeout = 2 * time.Minute
)

var (
	errRecording    = errors.New("recording already in progress")
	errNotRecording = errors.New("no recording in progress")
)

// FFmpeg encodes recordings with the host's ffmpeg (Debian's package):
// raw RGBA frames go in on a pipe at a fixed rate, H.264 in an mp4 comes
// out.
type FFmpeg struct {
	// Path is the ffmpeg binary; default "ffmpeg" on PATH.
	Path string
	// FPS is the frame rate; default DefaultRecordFPS.
	FPS int
	// Dir holds the file while recording; default os.TempDir().
	Dir string
}

func (f *FFmpeg) fps() int {
	if f.FPS > 0 {
		return f.FPS
	}
	return DefaultRecordFPS
}

// args is ffmpeg's command line for w x h RGBA frames on stdin. libx264's
// yuv420p needs even sides: the pad filter adds a row or column when odd.
func (f *FFmpeg) args(w, h int, out string) []string {
	return []string{"-hide_banner", "-loglevel", "error", "-nostdin",
		"-f", "rawvideo", "-pix_fmt", "rgba", "-s", strconv.Itoa(w) + "x" + strconv.Itoa(h),
		"-framerate", strconv.Itoa(f.fps()), "-i", "pipe:0",
		"-an", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
		"-movflags", "+faststart", "-y", out}
}

// recording is a Handler's one recording slot.
type recording struct {
	enc *FFmpeg
	mu  sync.Mutex
	cur *recSession
}

type recSession struct {
	cmd    *exec.Cmd
	dir    string
	out    string
	stderr bytes.Buffer
	stop   chan struct{}
	fed    chan error // the feeder's end: nil, or why it stopped early
	exited chan struct{}
	err    error // ffmpeg's exit, set before exited closes
}

func (r *recording) start(f Frames, log *slog.Logger) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil {
		return errRecording
	}
	first := f.Snapshot()
	w, h := first.Bounds().Dx(), first.Bounds().Dy()
	dir, err := os.MkdirTemp(r.enc.Dir, "deskfarm-osworld-rec-")
	if err != nil {
		return fmt.Errorf("recording dir: %w", err)
	}
	s := &recSession{dir: dir, out: filepath.Join(dir, "recording.mp4"), stop: make(chan struct{}),
		fed: make(chan error, 1), exited: make(chan struct{})}
	bin := r.enc.Path
	if bin == "" {
		bin = "ffmpeg"
	}
	s.cmd = exec.Command(bin, r.enc.args(w, h, s.out)...)
	s.cmd.Stderr = &s.stderr
	stdin, err := s.cmd.StdinPipe()
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	go func() { s.fed <- feed(f, first, w, h, r.enc.fps(), stdin, s.stop, log) }()
	r.cur = s
	return nil
}

// feed writes frames to ffmpeg at fps until stop closes, then closes its
// input. It writes by the clock, not by ticks delivered: when ffmpeg falls
// behind, the frames it missed are written again (the picture it has), so
// the video spans the recorded time.
func feed(f Frames, first *image.RGBA, w, h, fps int, out io.WriteCloser, stop <-chan struct{}, log *slog.Logger) error {
	defer out.Close()
	dmg, cancel := f.Damage()
	defer cancel()
	frame := fit(first, w, h)
	dirty := false
	start := time.Now()
	written := 0
	tick := time.NewTicker(time.Second / time.Duration(fps))
	defer tick.Stop()
	for {
		stopping := false
		select {
		case _, ok := <-dmg:
			if ok {
				dirty = true
				continue
			}
			dmg = nil // the display closed: keep the last picture
			continue
		case <-tick.C:
		case <-stop:
			stopping = true
		}
		if dirty {
			frame = fit(f.Snapshot(), w, h)
			dirty = false
		}
		due := int(time.Since(start)*time.Duration(fps)/time.Second) + 1
		for ; written < due; written++ {
			if _, err := out.Write(frame.Pix); err != nil {
				return fmt.Errorf("write frame to ffmpeg: %w", err)
			}
		}
		if stopping {
			log.Debug("recording input ended", "op", "end_recording", "frames", written)
			return nil
		}
	}
}

// fit returns img as a w x h RGBA with a tight stride, cropped or padded
// with black when the screen changed size mid-recording.
func fit(img *image.RGBA, w, h int) *image.RGBA {
	b := img.Bounds()
	if b.Min == (image.Point{}) && b.Dx() == w && b.Dy() == h && img.Stride == 4*w {
		return img
	}
	out := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(out, out.Bounds(), image.Black, image.Point{}, draw.Src)
	draw.Draw(out, out.Bounds(), img, b.Min, draw.Src)
	return out
}

// stop ends the recording and returns the mp4.
func (r *recording) stop(ctx context.Context) ([]byte, error) {
	r.mu.Lock()
	s := r.cur
	r.cur = nil
	r.mu.Unlock()
	if s == nil {
		return nil, errNotRecording
	}
	defer os.RemoveAll(s.dir)
	close(s.stop)
	feedErr := <-s.fed
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		s.cmd.Process.Kill()
		<-s.exited
		return nil, fmt.Errorf("ffmpeg did not finish within %v", stopTimeout)
	case <-ctx.Done():
		s.cmd.Process.Kill()
		<-s.exited
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, fmt.Errorf("Recording failed: ffmpeg: %w: %s (input: %v)", s.err, bytes.TrimSpace(s.stderr.Bytes()), feedErr)
	}
	b, err := os.ReadFile(s.out)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("Recording failed. The output file is missing or empty. ffmpeg stderr: %s", bytes.TrimSpace(s.stderr.Bytes()))
	}
	return b, nil
}

// abort kills a recording in progress and removes its files.
func (r *recording) abort() {
	r.mu.Lock()
	s := r.cur
	r.cur = nil
	r.mu.Unlock()
	if s == nil {
		return
	}
	close(s.stop)
	<-s.fed
	s.cmd.Process.Kill()
	<-s.exited
	os.RemoveAll(s.dir)
}
