package trajectory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/images/tiny/screen"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
)

// oneDisplay is the Desks of a test with one real VM display and no
// takeover.
type oneDisplay struct{ d desk.Display }

func (o oneDisplay) Screen(context.Context, string) (Screen, error) { return o.d, nil }

func (o oneDisplay) HumanInputs(ctx context.Context, vm string) (<-chan desk.HumanInput, func(), error) {
	c := make(chan desk.HumanInput)
	return c, func() { close(c) }, nil
}

// TestE2ERecordTinyVM records clicks on the tiny image's real screen
// (through its VNC display, as a desk has it) with the video: the export's
// step PNGs are the pictures taken after each click and show the guest's
// marker where the click landed (and the befores do not), and its
// recording.mp4 is H.264 that ffprobe gives a duration.
func TestE2ERecordTinyVM(t *testing.T) {
	testenv.RequireVM(t, "tiny")
	needVideo(t)
	vms := testenv.Manager(t, "tiny")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vm, err := vms.Create(ctx, vmm.CreateOptions{Image: "tiny", MemoryMiB: 256, VCPUs: 1})
	if err != nil {
		t.Fatalf("create tiny vm: %v", err)
	}
	disp, err := desk.DialVNC(ctx, vm, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer disp.Close()
	// The guest's /init may not read input yet when the VM is ready: click
	// until a marker shows, before recording.
	warm := image.Pt(vm.Width/2, vm.Height-vm.Height/8)
	for i := 0; !hasMarker(disp.Snapshot(), warm); i++ {
		if i == 30 {
			t.Fatal("the guest drew no marker for 30 clicks")
		}
		for _, b := range []uint8{0, 1, 0} {
			disp.Pointer(warm.X, warm.Y, b)
		}
		disp.Settle(ctx, 200*time.Millisecond, 5*time.Second)
	}
	m, err := New(Config{Dir: t.TempDir(), Desks: oneDisplay{disp}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, Meta{ID: "ep-tiny", Episode: "ep-tiny", VM: vm.ID, Image: "tiny", ScreenshotSize: "native"}); err != nil {
		t.Fatal(err)
	}
	r := m.Recorder(vm.ID)
	points := []image.Point{{vm.Width / 4, vm.Height / 2}, {vm.Width / 2, vm.Height / 2}, {3 * vm.Width / 4, vm.Height / 2}}
	var shots [][]byte
	for _, p := range points {
		step := r.Begin()
		for _, b := range []uint8{0, 1, 0} {
			if err := disp.Pointer(p.X, p.Y, b); err != nil {
				t.Fatal(err)
			}
		}
		settle, err := disp.Settle(ctx, 200*time.Millisecond, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		shot, _, err := player.Encode(disp.Snapshot(), player.EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		shots = append(shots, shot)
		step.End(Call{Kind: api.KindActions, Tool: api.ToolNeutral,
			Request: json.RawMessage(fmt.Sprintf(`{"tool":"neutral","input":[{"kind":"click","x":%d,"y":%d}]}`, p.X, p.Y)),
			Actions: []actions.Action{actions.Click{At: &actions.Point{X: p.X, Y: p.Y}}},
			Status:  200, Settle: settle, ScreenshotSize: image.Pt(vm.Width, vm.Height), AfterImage: shot})
	}
	fin, err := m.Stop(ctx, vm.ID, "stopped")
	if err != nil {
		t.Fatal(err)
	}
	if fin.Steps != 3 || fin.Video != videoFile || fin.VideoSeconds <= 0 {
		t.Fatalf("finished: %+v", fin)
	}
	tr, err := m.Get("ep-tiny")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := m.Export(ctx, "ep-tiny", api.ExportTar, &buf); err != nil {
		t.Fatal(err)
	}
	_, files := readArchive(t, api.ExportTar, buf.Bytes())
	for i, s := range tr.StepList {
		got := files[fmt.Sprintf("step_%d_%s.png", s.Step, s.Time.Format(osworldTime))]
		if !bytes.Equal(got, shots[i]) {
			t.Errorf("step %d: the export's picture is %d bytes, not the %d taken", s.Step, len(got), len(shots[i]))
			continue
		}
		after, _ := png.Decode(bytes.NewReader(got))
		before, err := png.Decode(bytes.NewReader(files["deskfarm/"+s.Screenshots.Before]))
		if err != nil {
			t.Fatalf("step %d before: %v", s.Step, err)
		}
		if !hasMarker(after, points[i]) || hasMarker(before, points[i]) {
			t.Errorf("step %d: marker at %v after %v, before %v", s.Step, points[i], hasMarker(after, points[i]), hasMarker(before, points[i]))
		}
	}
	mp4 := filepath.Join(t.TempDir(), videoFile)
	os.WriteFile(mp4, files[videoFile], 0o644)
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
		"-show_entries", "stream=codec_name,nb_read_frames:format=duration", "-of", "json", mp4).Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var probe struct {
		Streams []struct {
			Codec  string `json:"codec_name"`
			Frames string `json:"nb_read_frames"`
		}
		Format struct{ Duration string }
	}
	json.Unmarshal(out, &probe)
	dur, _ := strconv.ParseFloat(probe.Format.Duration, 64)
	if len(probe.Streams) != 1 || probe.Streams[0].Codec != "h264" || dur <= 0 {
		t.Errorf("ffprobe: %s", out)
	}
	t.Logf("video: %s s, %s frames, %d bytes; trajectory %d bytes", probe.Format.Duration, probe.Streams[0].Frames, len(files[videoFile]), fin.Bytes)
}

// hasMarker reports whether img shows the tiny guest's left-click marker
// at p, by a corner of it (the cursor may cover its centre).
func hasMarker(img image.Image, p image.Point) bool {
	c := screen.MarkerRect(p).Min
	want := screen.MarkerColor(screen.ButtonLeft)
	r, g, b, _ := img.At(c.X, c.Y).RGBA()
	return uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(b>>8) == want.B
}
