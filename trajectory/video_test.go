package trajectory

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/testenv"
)

// needVideo skips without ffmpeg and ffprobe (Debian's ffmpeg package;
// scripts/setup-host installs it).
func needVideo(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Unavailable(t, fmt.Sprintf("no %s: %v", bin, err))
		}
	}
}

// TestVideo records a video beside the steps: info names it and its
// length, and the export's recording.mp4 (root and deskfarm/) is an H.264
// file ffprobe reads with a duration.
func TestVideo(t *testing.T) {
	needVideo(t)
	m, d := newTestManager(t, Config{})
	s := d.screen("vm-v")
	info, err := m.Start(context.Background(), Meta{ID: "ep-v", Episode: "ep-v", VM: "vm-v"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Video != "recording.mp4" {
		t.Fatalf("info.video = %q", info.Video)
	}
	r := m.Recorder("vm-v")
	for i := range 5 {
		claudeStep(t, r, s, color.RGBA{uint8(40 * i), 0, 0, 255}, 10*i, 10)
	}
	fin, err := m.Stop(context.Background(), "vm-v", "stopped")
	if err != nil {
		t.Fatal(err)
	}
	if fin.VideoSeconds <= 0 || fin.Video != "recording.mp4" {
		t.Errorf("finished info: video %q, %v s", fin.Video, fin.VideoSeconds)
	}
	var buf bytes.Buffer
	if err := m.Export(context.Background(), "ep-v", api.ExportTar, &buf); err != nil {
		t.Fatal(err)
	}
	_, files := readArchive(t, api.ExportTar, buf.Bytes())
	mp4 := files["recording.mp4"]
	if len(mp4) == 0 || !bytes.Equal(mp4, files["deskfarm/recording.mp4"]) {
		t.Fatalf("recording.mp4: %d bytes at the root, %d under deskfarm/", len(mp4), len(files["deskfarm/recording.mp4"]))
	}
	p := filepath.Join(t.TempDir(), "recording.mp4")
	os.WriteFile(p, mp4, 0o644)
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=codec_name,width,height:format=duration", "-of", "json", p).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var probe struct {
		Streams []struct {
			Codec         string `json:"codec_name"`
			Width, Height int
		}
		Format struct{ Duration string }
	}
	json.Unmarshal(out, &probe)
	dur, _ := strconv.ParseFloat(probe.Format.Duration, 64)
	if len(probe.Streams) != 1 || probe.Streams[0].Codec != "h264" || probe.Streams[0].Width != 1280 || dur <= 0 {
		t.Errorf("ffprobe: %s", out)
	}
}

// TestNoFFmpeg: without ffmpeg the trajectory records without a video and
// its info says none.
func TestNoFFmpeg(t *testing.T) {
	m, d := newTestManager(t, Config{FFmpeg: "/nonexistent/ffmpeg"})
	info, err := m.Start(context.Background(), Meta{ID: "ep-n", VM: "vm-n"})
	if err != nil {
		t.Fatal(err)
	}
	claudeStep(t, m.Recorder("vm-n"), d.screen("vm-n"), color.RGBA{1, 2, 3, 255}, 1, 1)
	fin, err := m.Stop(context.Background(), "vm-n", "stopped")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	m.Export(context.Background(), "ep-n", api.ExportZip, &buf)
	names, _ := readArchive(t, api.ExportZip, buf.Bytes())
	if info.Video != "" || fin.Video != "" || fin.Steps != 1 || strings.Contains(strings.Join(names, " "), "mp4") {
		t.Errorf("without ffmpeg: video %q/%q, %d steps, export %v", info.Video, fin.Video, fin.Steps, names)
	}
}

// TestVideoDiskFull: a video that fills the disk stops the recording with
// "disk full" as the steps' writes do; the steps kept stay.
func TestVideoDiskFull(t *testing.T) {
	needVideo(t)
	dir := mountTmpfs(t, "512k")
	m, d := newTestManager(t, Config{Dir: dir})
	s := d.screen("vm-f")
	if _, err := m.Start(context.Background(), Meta{ID: "ep-f", Episode: "ep-f", VM: "vm-f"}); err != nil {
		t.Fatal(err)
	}
	r := m.Recorder("vm-f")
	p := r.Begin()
	p.End(Call{Kind: api.KindExec, Request: json.RawMessage(`{"argv":["true"]}`), Status: 200,
		Exec: &api.StepExec{Argv: []string{"true"}}})
	waitKept(t, r, 1)
	// Noise compresses badly: ffmpeg's fragments fill 512 KiB in seconds.
	noise := image.NewRGBA(image.Rect(0, 0, 1280, 800))
	deadline := time.After(2 * time.Minute)
	for stopped := false; !stopped; {
		rand.Read(noise.Pix)
		for i := 3; i < len(noise.Pix); i += 4 {
			noise.Pix[i] = 255
		}
		frame := image.NewRGBA(noise.Rect)
		copy(frame.Pix, noise.Pix)
		s.set(frame)
		select {
		case <-r.done:
			stopped = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("the video did not fill 512 KiB in two minutes")
		}
	}
	tr, err := m.Get("ep-f")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped: %s", tr.Stopped)
	if !strings.HasPrefix(tr.Stopped, "disk full: ") || tr.State != api.TrajectoryFinished || len(tr.StepList) != 1 || tr.StepList[0].Exec == nil {
		t.Errorf("after the video filled the disk: %+v, steps %+v", tr.TrajectoryInfo, tr.StepList)
	}
}
