// Package video owns screen recordings: a VM's live picture encoded on the
// host by ffmpeg (Debian's package) into H.264 in an MP4 that follows the
// screen, a frame per change up to MaxFPS and nothing while the screen is
// still, and that stays playable if the process dies mid-way. The
// trajectory recorder and OSWorld's start/end_recording use it.
//
// Frames go to ffmpeg raw on a pipe, converted here to YUV 4:2:0 (only the
// rows that changed; yuv.go), and ffmpeg stamps each with the wall clock as
// it reads it, so a frame's time in the video is the time the screen showed
// it, whatever the gaps between frames: variable frame rate, where a still
// minute costs nothing. While recording the file is a fragmented MP4 (a
// kill loses at most the last second); at Stop the picture is written once
// more, so the video lasts until then, and the file is remuxed into a plain
// MP4 whose length any reader sees.
package video

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/deskfarm/deskfarm/vnc"
)

// Defaults of Options.
const (
	// DefaultMaxFPS caps the frame rate while the screen changes: the
	// issue's "at least 10 fps while the screen changes", and what one
	// ultrafast encoder per desktop affords on a small host.
	DefaultMaxFPS = 10
	// keyframeEvery is the video time between forced keyframes: what a
	// seek decodes from. A keyframe of a text page is most of what a
	// typing minute weighs (every 2 s: 19 MB a minute at 1280x800, every
	// 10 s: 6 MB; BenchmarkVideoCPU).
	keyframeEvery = 10 * time.Second
	// fragmentEvery cuts the fragmented MP4 between keyframes too: what a
	// killed ffmpeg loses of a changing screen.
	fragmentEvery = time.Second
	// diskFullBelow is the free space under which a failed ffmpeg is
	// taken as a full disk (ffmpeg says so only in its stderr text).
	diskFullBelow = 1 << 20
)

// ErrDisplayClosed ends a recording whose Frames' damage channel closed:
// the VM's display went away. The file holds the video up to then.
var ErrDisplayClosed = errors.New("video: display closed")

// FFmpegError is an ffmpeg that exited before it was asked to, or that
// failed to finish the file. It wraps syscall.ENOSPC when the disk filled.
type FFmpegError struct {
	Path   string // the file being written
	Err    error  // the process's exit (or the disk's ENOSPC)
	Stderr string // ffmpeg's last words
}

func (e *FFmpegError) Error() string {
	return fmt.Sprintf("ffmpeg writing %s: %v: %s", e.Path, e.Err, e.Stderr)
}

func (e *FFmpegError) Unwrap() error { return e.Err }

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
type Recording struct {
	path   string
	ffmpeg string // the binary
	cmd    *exec.Cmd
	stdin  *os.File // ffmpeg's input pipe
	stderr *tailBuffer
	yuv    *yuvFrame // the picture ffmpeg gets; the feeder's alone
	log    *slog.Logger
	start  time.Time // when ffmpeg took the first frame: video time 0 (under mu)

	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	// remuxOnce guards the plain MP4 written at the first good Stop.
	remuxOnce sync.Once
	exited    chan struct{} // closed when ffmpeg has exited; waitErr set
	waitErr   error
	finished  chan struct{} // closed when feeder and ffmpeg are both done
	done      chan struct{} // closed when the recording ended by itself

	mu       sync.Mutex
	err      error // why it ended early
	frames   int
	last     time.Time // when the last frame was written
	result   error     // the end: nil, or what went wrong
	remuxCPU time.Duration
}

// args is ffmpeg's command line for w x h yuv420p frames on stdin.
//   - -use_wallclock_as_timestamps stamps each frame when ffmpeg reads it;
//     the rawvideo demuxer keeps stamps in 1/framerate units, so the input
//     -framerate 1000 is a millisecond clock, not a rate.
//   - no probing (-probesize 32, -analyzeduration 0): the command line
//     says all there is to know of the input, and ffmpeg's default probe
//     holds back up to 5 s or 5 MB of frames before it writes anything,
//     which a kill then loses.
//   - -fps_mode vfr (ffmpeg 5.1) keeps those stamps, dropping only a frame
//     that lands on its predecessor's millisecond; -r 1000 is again the
//     millisecond, the unit of the encoder's clock and of the length
//     given to the last frame.
//   - frames come in as yuv420p (yuv.go converts them): even sides, an
//     odd screen padded with black; tagged BT.601 limited range, the
//     conversion's.
//   - -tune zerolatency encodes each frame as it comes (no lookahead or
//     frame threads holding frames back), so what the screen showed
//     reaches the file even if the next frame is a minute away.
//   - the fragmented MP4 (empty moov, a moof per keyframe and at least
//     every fragmentEvery, each flushed at once) is playable up to its
//     last complete fragment if ffmpeg dies.
func args(w, h int, out string) []string {
	return []string{"-hide_banner", "-loglevel", "error", "-nostdin",
		"-use_wallclock_as_timestamps", "1", "-probesize", "32", "-analyzeduration", "0", "-fpsprobesize", "0",
		"-f", "rawvideo", "-pix_fmt", "yuv420p", "-s", fmt.Sprintf("%dx%d", w, h),
		"-framerate", "1000", "-i", "pipe:0",
		"-an", "-r", "1000", "-fps_mode", "vfr",
		"-colorspace", "smpte170m", "-color_primaries", "smpte170m", "-color_trc", "smpte170m", "-color_range", "tv",
		"-enc_time_base", "1:1000", "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
		"-force_key_frames", fmt.Sprintf("expr:gte(t,n_forced*%g)", keyframeEvery.Seconds()),
		"-movflags", "+frag_keyframe+empty_moov+default_base_moof",
		"-frag_duration", fmt.Sprint(fragmentEvery.Microseconds()), "-flush_packets", "1", "-f", "mp4", "-y", out}
}

// Start begins recording f into path (created; its directory must exist).
// ctx bounds only the start.
func Start(ctx context.Context, f Frames, path string, o Options) (*Recording, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.FFmpeg == "" {
		o.FFmpeg = "ffmpeg"
	}
	if o.MaxFPS <= 0 {
		o.MaxFPS = DefaultMaxFPS
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	first := f.Snapshot()
	w, h := first.Bounds().Dx(), first.Bounds().Dy()
	if w <= 0 || h <= 0 {
		return nil, fmt.Errorf("record %s: empty screen %dx%d", path, w, h)
	}
	w, h = (w+1)&^1, (h+1)&^1 // 4:2:0 needs even sides
	// Subscribe before the first frame, so no change after it is missed.
	dmg, cancel := f.Damage()
	r := &Recording{path: path, ffmpeg: o.FFmpeg, stderr: &tailBuffer{max: 4096}, yuv: newYUVFrame(w, h),
		log:  o.Log.With("vm", o.VM, "op", "record"),
		stop: make(chan struct{}), exited: make(chan struct{}), finished: make(chan struct{}), done: make(chan struct{})}
	r.cmd = exec.Command(o.FFmpeg, args(w, h, path)...)
	r.cmd.Stderr = r.stderr
	pr, pw, err := os.Pipe()
	if err != nil {
		cancel()
		return nil, fmt.Errorf("record %s: %w", path, err)
	}
	r.cmd.Stdin, r.stdin = pr, pw
	err = r.cmd.Start()
	pr.Close()
	if err != nil {
		cancel()
		pw.Close()
		return nil, fmt.Errorf("record %s: start %s: %w", path, o.FFmpeg, err)
	}
	go func() {
		r.waitErr = r.cmd.Wait()
		close(r.exited)
	}()
	fed := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		defer cancel()
		fed <- r.feed(f, dmg, fit(first, w, h), w, h, time.Second/time.Duration(o.MaxFPS), ready)
	}()
	go r.supervise(fed)
	// ffmpeg stamps a frame when it reads it, and it reads the first only
	// once it has loaded (about 300 ms on a busy 2-core host): until then
	// the video has no time 0, so Start waits for it.
	select {
	case <-ready:
	case <-r.finished:
		return nil, fmt.Errorf("record %s: %w", path, r.result)
	case <-ctx.Done():
		r.cmd.Process.Kill()
		<-r.finished
		return nil, fmt.Errorf("record %s: start: %w", path, ctx.Err())
	}
	r.log.Debug("recording started", "path", path, "size", fmt.Sprintf("%dx%d", w, h), "max_fps", o.MaxFPS)
	return r, nil
}

// feed writes the first frame, then one per change at most every gap,
// until Stop (then the picture once more: the video lasts until now), the
// display closes or ffmpeg goes away. It closes ffmpeg's input.
func (r *Recording) feed(f Frames, dmg <-chan vnc.Damage, first *image.RGBA, w, h int, gap time.Duration, ready chan<- struct{}) error {
	defer r.stdin.Close()
	if err := r.write(first); err != nil {
		return err
	}
	// A frame smaller than the pipe's buffer (64 KiB: a screen under 43,690
	// pixels) is written before ffmpeg reads it: wait until it has.
	for pending(r.stdin) > 0 {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-r.exited:
			return nil
		}
	}
	r.mu.Lock()
	r.start = time.Now()
	r.mu.Unlock()
	close(ready)
	var due <-chan time.Time // armed while a change waits for its turn
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case _, ok := <-dmg:
			if !ok {
				// The last picture stays on screen until the display
				// closed: write it again so the video lasts until then.
				return errors.Join(ErrDisplayClosed, r.write(nil))
			}
			if due != nil {
				continue
			}
			wait := gap - time.Since(r.lastWrite())
			if wait <= 0 {
				if err := r.write(fit(f.Snapshot(), w, h)); err != nil {
					return err
				}
				continue
			}
			timer.Reset(wait)
			due = timer.C
		case <-due:
			due = nil
			if err := r.write(fit(f.Snapshot(), w, h)); err != nil {
				return err
			}
		case <-r.stop:
			return r.write(fit(f.Snapshot(), w, h))
		case <-r.exited:
			return nil
		}
	}
}

// lastWrite is when the last frame was written.
func (r *Recording) lastWrite() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// write sends one frame to ffmpeg; nil repeats the last one.
func (r *Recording) write(img *image.RGBA) error {
	if img != nil {
		r.yuv.update(img)
	}
	if _, err := r.stdin.Write(r.yuv.buf); err != nil {
		return fmt.Errorf("record %s: write frame to ffmpeg: %w", r.path, err)
	}
	r.mu.Lock()
	r.frames++
	r.last = time.Now()
	r.mu.Unlock()
	return nil
}

// supervise waits for the feeder and ffmpeg, and says how the recording
// ended: Done closes when it was not Stop that ended it.
func (r *Recording) supervise(fed <-chan error) {
	feedErr := <-fed
	<-r.exited
	stopped := false
	select {
	case <-r.stop:
		stopped = true
	default:
	}
	var end error
	switch {
	case r.waitErr != nil:
		end = &FFmpegError{Path: r.path, Err: r.waitErr, Stderr: r.stderr.String()}
		if diskFull(filepath.Dir(r.path)) {
			end = &FFmpegError{Path: r.path, Err: fmt.Errorf("%w (%v)", syscall.ENOSPC, r.waitErr), Stderr: r.stderr.String()}
		}
	case errors.Is(feedErr, ErrDisplayClosed):
		end = ErrDisplayClosed
	case feedErr != nil:
		end = feedErr
	case !stopped:
		end = &FFmpegError{Path: r.path, Err: errors.New("exited before its input ended"), Stderr: r.stderr.String()}
	}
	r.mu.Lock()
	r.result = end
	if !stopped {
		r.err = end
	}
	started := !r.start.IsZero()
	r.mu.Unlock()
	if !stopped && started {
		r.log.Warn("recording ended early", "path", r.path, "err", end)
		close(r.done)
	}
	close(r.finished)
}

// Stop ends the recording: the last picture is held until now, ffmpeg
// finishes the file, and Info says what it holds. ctx bounds the wait.
// After an early end (Done closed), Stop returns what the file holds and
// Err. A second Stop returns the same.
func (r *Recording) Stop(ctx context.Context) (Info, error) {
	r.stopOnce.Do(func() { close(r.stop) })
	select {
	case <-r.finished:
	case <-ctx.Done():
		r.cmd.Process.Kill()
		<-r.finished
		info := r.info()
		return info, fmt.Errorf("record %s: stop: %w", r.path, ctx.Err())
	}
	r.mu.Lock()
	ok := r.result == nil
	r.mu.Unlock()
	if ok {
		r.remuxOnce.Do(func() { r.remux(ctx) })
	}
	info := r.info()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.result == nil {
		r.log.Debug("recording stopped", "path", r.path, "frames", info.Frames, "bytes", info.Bytes,
			"duration", info.Duration, "cpu", info.CPU)
	}
	return info, r.result
}

// remux rewrites the finished fragmented file as a plain MP4 with its
// index first (-movflags +faststart): a fragmented file's length is known
// only by reading every fragment, which a reader on a pipe (ffprobe -i
// pipe:0, OSWorld's client saving the answer) or a browser starting to
// play cannot; it guessed 17.5 s for a 39.6 s recording. The fragments
// were for a kill; past Stop they are not needed. If the copy fails (the
// disk filled), the fragmented file stays: it plays.
//
// A sample lasts until the next; the last one's length is its packet's,
// which ffmpeg reads back from fragments as the mean frame length (0.5 s
// after a still 2 s) and would add to the video: setts makes it one tick,
// so the video ends with the picture written at Stop.
func (r *Recording) remux(ctx context.Context) {
	tmp := r.path + ".remux"
	cmd := exec.CommandContext(ctx, r.ffmpeg, "-hide_banner", "-loglevel", "error", "-nostdin",
		"-i", r.path, "-c", "copy", "-bsf:v", "setts=duration=1", "-movflags", "+faststart", "-f", "mp4", "-y", tmp)
	out, err := cmd.CombinedOutput()
	if ps := cmd.ProcessState; ps != nil {
		r.mu.Lock()
		r.remuxCPU = ps.UserTime() + ps.SystemTime()
		r.mu.Unlock()
	}
	if err == nil {
		err = os.Rename(tmp, r.path)
	}
	if err != nil {
		os.Remove(tmp)
		r.log.Warn("recording kept fragmented", "path", r.path, "err", err, "ffmpeg", string(bytes.TrimSpace(out)))
	}
}

func (r *Recording) info() Info {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := Info{Path: r.path, Frames: r.frames}
	if !r.last.IsZero() {
		in.Duration = r.last.Sub(r.start)
	}
	if st, err := os.Stat(r.path); err == nil {
		in.Bytes = st.Size()
	}
	if ps := r.cmd.ProcessState; ps != nil {
		in.CPU = ps.UserTime() + ps.SystemTime() + r.remuxCPU
	}
	return in
}

// Done is closed when the recording ends by itself (the display closed,
// ffmpeg died, the disk filled); Err then says why.
func (r *Recording) Done() <-chan struct{} { return r.done }

// Err is why a recording ended early, nil while it runs.
func (r *Recording) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
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

// pending is how many bytes of a pipe are not yet read (0 when unknown):
// FIONREAD, which Linux spells TIOCINQ, answers on either end of a pipe.
func pending(f *os.File) int {
	n := 0
	if c, err := f.SyscallConn(); err == nil {
		c.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	}
	return n
}

// diskFull reports whether dir's filesystem has (almost) no space left.
func diskFull(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < diskFullBelow
}

// tailBuffer keeps the last max bytes written to it: ffmpeg's stderr.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.b))
}
