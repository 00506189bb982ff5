package video

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vnc"
)

// screen is a synthetic Frames: a picture the test paints, with damage
// sent on each paint.
type screen struct {
	mu   sync.Mutex
	img  *image.RGBA
	subs []chan vnc.Damage
	n    int
}

func newScreen(w, h int) *screen {
	s := &screen{img: image.NewRGBA(image.Rect(0, 0, w, h))}
	for i := 3; i < len(s.img.Pix); i += 4 {
		s.img.Pix[i] = 255
	}
	return s
}

func (s *screen) Snapshot() *image.RGBA {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *s.img
	c.Pix = append([]byte(nil), s.img.Pix...)
	return &c
}

func (s *screen) Damage() (<-chan vnc.Damage, func()) {
	c := make(chan vnc.Damage, 16)
	s.mu.Lock()
	s.subs = append(s.subs, c)
	s.mu.Unlock()
	return c, func() {}
}

// paint draws a moving bar (a change on every call) and tells subscribers.
func (s *screen) paint() {
	s.mu.Lock()
	b := s.img.Bounds()
	x := s.n % b.Dx()
	s.n += 7
	r := image.Rect(x, 0, min(x+7, b.Dx()), b.Dy())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for xx := r.Min.X; xx < r.Max.X; xx++ {
			s.img.SetRGBA(xx, y, color.RGBA{uint8(s.n), 200, uint8(y), 255})
		}
	}
	subs := s.subs
	s.mu.Unlock()
	for _, c := range subs {
		select {
		case c <- vnc.Damage{Rect: r}:
		default:
		}
	}
}

// close closes the display: every damage channel.
func (s *screen) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.subs {
		close(c)
	}
	s.subs = nil
}

// changeFor paints every 1/60 s for d.
func (s *screen) changeFor(d time.Duration) {
	t := time.NewTicker(time.Second / 60)
	defer t.Stop()
	end := time.After(d)
	for {
		select {
		case <-t.C:
			s.paint()
		case <-end:
			return
		}
	}
}

// probed is what ffprobe reads of a file.
type probed struct {
	codec    string
	w, h     int
	frames   int
	duration float64
}

// probe runs ffprobe on path, counting frames, and fails the test when it
// cannot read the file. ffprobe reads a finished recording on its stdin,
// as a reader of a download would: it cannot seek, so the length it says
// is the one the file declares, not one found by scanning.
func probe(t *testing.T, path string) probed { return probeFrom(t, path, true) }

// probeFile is probe for a file that need not be finished: ffprobe may
// seek in it, to each fragment.
func probeFile(t *testing.T, path string) probed { return probeFrom(t, path, false) }

func probeFrom(t *testing.T, path string, stdin bool) probed {
	t.Helper()
	in := path
	if stdin {
		in = "pipe:0"
	}
	cmd := exec.Command("ffprobe", "-v", "error", "-count_frames",
		"-show_entries", "format=duration:stream=codec_name,width,height,nb_read_frames",
		"-of", "json", "-i", in)
	if stdin {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdin = f
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var v struct {
		Streams []struct {
			Codec  string `json:"codec_name"`
			W      int    `json:"width"`
			H      int    `json:"height"`
			Frames string `json:"nb_read_frames"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v.Streams) != 1 {
		t.Fatalf("ffprobe output %s: %v", out, err)
	}
	p := probed{codec: v.Streams[0].Codec, w: v.Streams[0].W, h: v.Streams[0].H}
	p.frames, _ = strconv.Atoi(v.Streams[0].Frames)
	p.duration, _ = strconv.ParseFloat(v.Format.Duration, 64)
	return p
}

func needFFmpeg(t testing.TB) {
	for _, bin := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s on this host (scripts/setup-host.sh installs it)", bin)
		}
	}
}

func TestChangingScreenIsRecordedAtMaxFPS(t *testing.T) {
	needFFmpeg(t)
	s := newScreen(321, 241) // odd sides: padded to even
	path := filepath.Join(t.TempDir(), "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{MaxFPS: 10})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	s.changeFor(2 * time.Second)
	span := time.Since(begin).Seconds() // the video lasts until Stop is called
	info, err := r.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := probe(t, path)
	if p.codec != "h264" || p.w != 322 || p.h != 242 {
		t.Errorf("probed %+v, want h264 322x242", p)
	}
	if p.duration < span-0.3 || p.duration > span+0.3 {
		t.Errorf("video lasts %.2fs, recorded for %.2fs", p.duration, span)
	}
	// 60 changes a second, capped at 10 fps: about 20 frames, plus the
	// first and the last.
	if info.Frames < 12 || info.Frames > 23 || p.frames != info.Frames {
		t.Errorf("frames: %d written, %d in the file; want about 20 for 2 s at 10 fps", info.Frames, p.frames)
	}
	if info.Bytes == 0 || info.CPU == 0 || info.Duration < 2*time.Second || info.Path != path {
		t.Errorf("info %+v", info)
	}
	if r.Err() != nil {
		t.Errorf("Err after Stop: %v", r.Err())
	}
	select {
	case <-r.Done():
		t.Error("Done closed by Stop")
	default:
	}
	if again, err := r.Stop(context.Background()); err != nil || again.Frames != info.Frames {
		t.Errorf("second Stop: %+v %v", again, err)
	}
}

func TestStillScreenWritesNoFrames(t *testing.T) {
	needFFmpeg(t)
	s := newScreen(200, 100)
	path := filepath.Join(t.TempDir(), "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	time.Sleep(2 * time.Second)
	span := time.Since(begin).Seconds() // the video lasts until Stop is called
	info, err := r.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p := probe(t, path)
	// The first picture, and the same once more at Stop so the video
	// lasts until then.
	if info.Frames != 2 || p.frames != 2 {
		t.Errorf("still screen: %d frames written, %d in the file; want 2", info.Frames, p.frames)
	}
	if p.codec != "h264" || p.duration < span-0.3 || p.duration > span+0.3 {
		t.Errorf("probed %+v, recorded for %.2fs", p, span)
	}
}

func TestKilledFFmpegLeavesPlayableFile(t *testing.T) {
	needFFmpeg(t)
	s := newScreen(320, 240)
	path := filepath.Join(t.TempDir(), "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.changeFor(5 * time.Second)
	if err := r.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r.Done()
	var fe *FFmpegError
	if !errors.As(r.Err(), &fe) {
		t.Fatalf("Err after kill -9: %v, want an FFmpegError", r.Err())
	}
	info, err := r.Stop(context.Background())
	if !errors.As(err, &fe) || info.Bytes == 0 {
		t.Errorf("Stop after kill: %+v %v", info, err)
	}
	// Fragments are cut at least every second of video: the file holds
	// at least the first 3 of the 5 s.
	p := probeFile(t, path)
	if p.codec != "h264" || p.duration < 3 || p.frames < 25 {
		t.Errorf("after kill -9: %+v, want h264 of at least 3 s", p)
	}
}

func TestDisplayClosedEndsRecording(t *testing.T) {
	needFFmpeg(t)
	s := newScreen(320, 240)
	path := filepath.Join(t.TempDir(), "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.changeFor(time.Second)
	time.Sleep(time.Second)
	s.close()
	<-r.Done()
	if !errors.Is(r.Err(), ErrDisplayClosed) {
		t.Fatalf("Err: %v, want ErrDisplayClosed", r.Err())
	}
	info, err := r.Stop(context.Background())
	if !errors.Is(err, ErrDisplayClosed) {
		t.Errorf("Stop: %v", err)
	}
	p := probe(t, path)
	if p.codec != "h264" || p.frames != info.Frames || p.duration < 1.7 {
		t.Errorf("probed %+v, info %+v; want the 2 s up to the close", p, info)
	}
}

func TestMissingFFmpeg(t *testing.T) {
	s := newScreen(10, 10)
	_, err := Start(context.Background(), s, filepath.Join(t.TempDir(), "x.mp4"), Options{FFmpeg: "/nonexistent/ffmpeg"})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start without ffmpeg: %v", err)
	}
}

func TestResizedScreenKeepsFirstSize(t *testing.T) {
	needFFmpeg(t)
	s := newScreen(320, 240)
	path := filepath.Join(t.TempDir(), "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.changeFor(500 * time.Millisecond)
	s.mu.Lock()
	s.img = image.NewRGBA(image.Rect(0, 0, 640, 200))
	s.mu.Unlock()
	s.changeFor(500 * time.Millisecond)
	if _, err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := probe(t, path); p.w != 320 || p.h != 240 {
		t.Errorf("probed %+v, want 320x240", p)
	}
}

// TestDiskFullEndsRecording fills a 2 MiB tmpfs with noise (which H.264
// cannot shrink much): ffmpeg fails its write, and the recording ends with
// an error that says ENOSPC rather than a panic or a hang.
func TestDiskFullEndsRecording(t *testing.T) {
	needFFmpeg(t)
	dir, err := os.MkdirTemp("/var/lib", "deskfarm-test-video-")
	if err != nil {
		t.Skipf("no /var/lib scratch dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s := newScreen(320, 240)
	path := filepath.Join(dir, "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{MaxFPS: 30})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second / 60)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				s.noise()
			}
		}
	}()
	select {
	case <-r.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("2 MiB of noise did not fill the disk within 2 minutes")
	}
	close(stop)
	if !errors.Is(r.Err(), syscall.ENOSPC) {
		t.Errorf("Err: %v, want ENOSPC", r.Err())
	}
	if _, err := r.Stop(context.Background()); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Stop: %v, want ENOSPC", err)
	}
}

// noise fills the picture with pseudo-random pixels and tells subscribers.
func (s *screen) noise() {
	s.mu.Lock()
	x := uint32(s.n*2654435761 + 1)
	s.n++
	for i := range s.img.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		s.img.Pix[i] = byte(x)
	}
	subs := s.subs
	s.mu.Unlock()
	for _, c := range subs {
		select {
		case c <- vnc.Damage{Rect: s.img.Bounds()}:
		default:
		}
	}
}

// TestStoppedFileDeclaresItsLength records 5 MB of noise, more than
// ffprobe reads to guess: on a pipe, which cannot seek to the end, it
// says the length the file declares. A fragmented MP4 declares none, and
// ffprobe guessed 3.2 s for this 5.2 s one; the remux at Stop declares it.
func TestStoppedFileDeclaresItsLength(t *testing.T) {
	needFFmpeg(t)
	s := newScreen(640, 480)
	path := filepath.Join(t.TempDir(), "rec.mp4")
	r, err := Start(context.Background(), s, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	for time.Since(begin) < 5*time.Second {
		s.noise()
		time.Sleep(time.Second / 20)
	}
	span := time.Since(begin).Seconds()
	info, err := r.Stop(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "default=nw=1:nk=1", "-i", "pipe:0")
	cmd.Stdin = f
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	dur, _ := strconv.ParseFloat(string(bytes.TrimSpace(out)), 64)
	if info.Bytes < 5e6 || dur < span-0.3 || dur > span+0.3 {
		t.Errorf("%d bytes, ffprobe on a pipe says %.2fs, recorded for %.2fs", info.Bytes, dur, span)
	}
}
