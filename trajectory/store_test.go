package trajectory

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/testbuf"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

// noisePNG is n bytes that do not compress, behind PNG's signature: a
// stand-in for a large screenshot where only its size matters.
func noisePNG(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	copy(b, "\x89PNG\r\n\x1a\n")
	return b
}

// shotStep ends a step whose answer carries shot.
func shotStep(r *Recorder, shot []byte) {
	p := r.Begin()
	p.End(Call{Kind: api.KindActions, Tool: api.ToolNeutral,
		Request:  json.RawMessage(`{"tool":"neutral","input":[{"kind":"screenshot"}]}`),
		Response: json.RawMessage(fmt.Sprintf(`{"screenshot":{"data":%q}}`, base64.StdEncoding.EncodeToString(shot))),
		Actions:  []actions.Action{actions.Screenshot{}}, Status: 200, ScreenshotSize: image.Pt(1280, 800), AfterImage: shot})
}

func ids(l api.TrajectoryList) []string {
	var out []string
	for _, t := range l.Trajectories {
		out = append(out, t.ID)
	}
	return out
}

// TestRestartInterrupted: a trajectory a previous run left recording is
// interrupted at New, with the steps it had written, and exports.
func TestRestartInterrupted(t *testing.T) {
	m1, d := newTestManager(t, Config{})
	if _, err := m1.Start(context.Background(), Meta{ID: "ep-r", Episode: "ep-r", VM: "vm-r", Options: api.RecordOptions{NoVideo: true}}); err != nil {
		t.Fatal(err)
	}
	r := m1.Recorder("vm-r")
	shot := claudeStep(t, r, d.screen("vm-r"), color.RGBA{0, 200, 0, 255}, 1, 2)
	waitKept(t, r, 1)

	if _, err := m1.Start(context.Background(), Meta{ID: "ep-r", VM: "vm-other"}); !errors.Is(err, ErrRecording) {
		t.Errorf("Start of a trajectory id recording on another VM: %v", err)
	}
	m2, _ := newTestManager(t, Config{Dir: m1.cfg.Dir})
	l := m2.List()
	if len(l.Trajectories) != 1 {
		t.Fatalf("List after restart = %+v", l)
	}
	info := l.Trajectories[0]
	if info.ID != "ep-r" || info.State != api.TrajectoryInterrupted || info.EndReason != "server stopped" ||
		info.Steps != 1 || info.EndedAt == nil || info.Bytes == 0 {
		t.Fatalf("after restart: %+v", info)
	}
	var buf bytes.Buffer
	if err := m2.Export(context.Background(), "ep-r", api.ExportTar, &buf); err != nil {
		t.Fatal(err)
	}
	_, files := readArchive(t, api.ExportTar, buf.Bytes())
	tr, _ := m2.Get("ep-r")
	if png := files["step_1_"+tr.StepList[0].Time.Format(osworldTime)+".png"]; !bytes.Equal(png, shot) {
		t.Errorf("the interrupted trajectory's step 1 exports %d bytes, want the agent's %d", len(png), len(shot))
	}
	if _, err := m2.Start(context.Background(), Meta{ID: "ep-r", VM: "vm-other"}); !errors.Is(err, ErrRecording) {
		t.Errorf("Start over an existing trajectory: %v", err)
	}
}

// TestBudget: past the budget the oldest finished trajectory goes; a
// recording that alone exceeds it stops, saying so.
func TestBudget(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	const shotBytes = 100 << 10
	m, _ := newTestManager(t, Config{BudgetBytes: 250 << 10, Now: clk.Now})
	record := func(id string, steps int) *Recorder {
		t.Helper()
		if _, err := m.Start(context.Background(), Meta{ID: id, VM: "vm-" + id, Options: api.RecordOptions{NoVideo: true}}); err != nil {
			t.Fatal(err)
		}
		r := m.Recorder("vm-" + id)
		for range steps {
			shotStep(r, noisePNG(shotBytes))
		}
		clk.add(time.Minute)
		return r
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		record(id, 1)
		if _, err := m.Stop(context.Background(), "vm-"+id, "stopped"); err != nil {
			t.Fatal(err)
		}
	}
	l := m.List()
	if !slices.Equal(ids(l), []string{"t3", "t2"}) || l.TotalBytes > l.BudgetBytes {
		t.Fatalf("after three of 100 KiB under a 250 KiB budget: %v, %d bytes", ids(l), l.TotalBytes)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.Dir, "t1")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("t1's directory: %v", err)
	}
	if _, _, err := m.Open("t1", "info.json"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a removed trajectory: %v", err)
	}

	r := record("big", 3)
	<-r.done
	info, err := m.Get("big")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.Stopped, "budget spent: ") || info.State != api.TrajectoryFinished ||
		info.EndReason != info.Stopped || info.Steps != 3 || len(info.StepList) != 3 {
		t.Errorf("a recording past the budget: %+v", info.TrajectoryInfo)
	}
	if m.Recorder("vm-big") != nil {
		t.Error("the recording past the budget still records")
	}
	if got := ids(m.List()); !slices.Equal(got, []string{"big"}) {
		t.Errorf("after the big one: %v (the finished ones go first)", got)
	}
}

// TestRetention: a restart removes what finished longer ago than the
// retention and keeps the rest.
func TestRetention(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	m, _ := newTestManager(t, Config{Retention: time.Hour, Now: clk.Now})
	for _, id := range []string{"old", "new"} {
		if _, err := m.Start(context.Background(), Meta{ID: id, VM: "vm", Options: api.RecordOptions{NoVideo: true}}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Stop(context.Background(), "vm", "stopped"); err != nil {
			t.Fatal(err)
		}
		clk.add(50 * time.Minute)
	}
	m2, _ := newTestManager(t, Config{Dir: m.cfg.Dir, Retention: time.Hour, Now: clk.Now})
	if got := ids(m2.List()); !slices.Equal(got, []string{"new"}) {
		t.Errorf("100 and 50 minutes old, retention 1h: %v", got)
	}
}

// blockingA11y stalls the writer in the first step's accessibility tree
// until release is closed.
type blockingA11y struct {
	release chan struct{}
	once    sync.Once
	calls   chan struct{}
}

func (b *blockingA11y) read(ctx context.Context, vm string) ([]byte, error) {
	b.once.Do(func() { close(b.calls) })
	<-b.release
	return []byte("<desktop-frame name=\"" + vm + "\"/>"), nil
}

// TestDroppedSteps: while the writer is stalled, steps past the queue's
// 64 are kept without pictures (Dropped says so) and End never waits.
func TestDroppedSteps(t *testing.T) {
	a := &blockingA11y{release: make(chan struct{}), calls: make(chan struct{})}
	m, _ := newTestManager(t, Config{A11y: a.read})
	if _, err := m.Start(context.Background(), Meta{ID: "ep-q", VM: "vm-q", Options: api.RecordOptions{NoVideo: true, A11y: true}}); err != nil {
		t.Fatal(err)
	}
	r := m.Recorder("vm-q")
	shotStep(r, noisePNG(1000))
	<-a.calls // the writer is in step 1's tree
	for range 69 {
		shotStep(r, noisePNG(1000))
	}
	close(a.release)
	if _, err := m.Stop(context.Background(), "vm-q", "stopped"); err != nil {
		t.Fatal(err)
	}
	tr, err := m.Get("ep-q")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.StepList) != 70 || tr.Steps != 70 {
		t.Fatalf("%d steps (info %d), want 70", len(tr.StepList), tr.Steps)
	}
	for i, s := range tr.StepList {
		dropped := i >= queuePictures
		if (s.Dropped != "") != dropped || (s.Screenshots.After == "") != dropped || s.Screenshots.AfterSHA256 == "" ||
			!strings.Contains(string(s.Response), "sha256:"+s.Screenshots.AfterSHA256) {
			t.Errorf("step %d: dropped %q, screens %+v, response %.80s", s.Step, s.Dropped, s.Screenshots, s.Response)
		}
		// Step 1's tree was read with the queue empty; the rest waited
		// behind it, so theirs were skipped but the last one's.
		if hasTree := s.A11yTree != ""; hasTree != (s.Step == 1 || s.Step == 70) {
			t.Errorf("step %d: accessibility tree %q", s.Step, s.A11yTree)
		}
	}
	if want := "pictures: the recorder's queue of 64 steps was full"; tr.StepList[69].Dropped != want {
		t.Errorf("dropped = %q, want %q", tr.StepList[69].Dropped, want)
	}
	if got := string(readFile(t, m, "ep-q", tr.StepList[0].A11yTree)); got != `<desktop-frame name="vm-q"/>` {
		t.Errorf("a11y tree = %q", got)
	}
	var buf bytes.Buffer
	if err := m.Export(context.Background(), "ep-q", api.ExportZip, &buf); err != nil {
		t.Fatal(err)
	}
	names, files := readArchive(t, api.ExportZip, buf.Bytes())
	var pngs int
	for _, n := range names {
		if strings.HasPrefix(n, "step_") {
			pngs++
		}
	}
	if pngs != queuePictures || bytes.Count(files["traj.jsonl"], []byte("\n")) != 70 {
		t.Errorf("export: %d step pictures, %d lines", pngs, bytes.Count(files["traj.jsonl"], []byte("\n")))
	}
}

// TestDiskFull fills a 1 MiB tmpfs: recording stops with "disk full", the
// log says so with the VM and the episode, the steps written stay
// readable and exportable, and the caller's Begin/End go on harmlessly.
func TestDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "1m")
	var logs testbuf.Buffer
	m, _ := newTestManager(t, Config{Dir: dir, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if _, err := m.Start(context.Background(), Meta{ID: "ep-d", Episode: "ep-d", VM: "vm-d", Options: api.RecordOptions{NoVideo: true}}); err != nil {
		t.Fatal(err)
	}
	r := m.Recorder("vm-d")
	for range 6 {
		shotStep(r, noisePNG(300<<10))
	}
	<-r.done
	shotStep(r, noisePNG(10)) // the episode goes on
	tr, err := m.Get("ep-d")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tr.Stopped, "disk full: ") || !strings.Contains(tr.Stopped, "no space left on device") ||
		tr.State != api.TrajectoryFinished || tr.Steps != 3 || len(tr.StepList) != 3 {
		t.Fatalf("after the disk filled: %+v, %d steps listed", tr.TrajectoryInfo, len(tr.StepList))
	}
	if m.Recorder("vm-d") != nil || r.Begin() != nil {
		t.Error("still recording after the disk filled")
	}
	var buf bytes.Buffer
	if err := m.Export(context.Background(), "ep-d", api.ExportTar, &buf); err != nil {
		t.Fatal(err)
	}
	names, _ := readArchive(t, api.ExportTar, buf.Bytes())
	if len(names) < 4 || !strings.HasPrefix(names[3], "step_3_") {
		t.Errorf("export after the disk filled: %v", names)
	}
	// What the disk holds says so too, for the next run.
	if disk, err := readInfo(m.dataDir("ep-d")); err != nil || !strings.HasPrefix(disk.Stopped, "disk full: ") || disk.State != api.TrajectoryFinished {
		t.Errorf("info.json after the disk filled: %+v (%v)", disk, err)
	}
	l := logs.String()
	if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "op=trajectory vm=vm-d episode=ep-d") || !strings.Contains(l, "disk full") {
		t.Errorf("log:\n%s", l)
	}
}

// mountTmpfs mounts a tmpfs of size under /var/lib for the test (a full
// disk that is real, and small).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir, err := os.MkdirTemp("/var/lib", "deskfarm-test-traj-")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}

// fakeEpisodes is the pools' episodes as Run sees them.
type fakeEpisodes struct {
	mu      sync.Mutex
	active  map[string]bool
	changed chan struct{}
}

func (e *fakeEpisodes) Changed() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

func (e *fakeEpisodes) Active(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active[id]
}

func (e *fakeEpisodes) end(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.active, id)
	close(e.changed)
	e.changed = make(chan struct{})
}

// TestRunEndsRecordings: an episode's end ends its recording; a VM's
// screen closing ends the VM's; Run's end finishes the rest.
func TestRunEndsRecordings(t *testing.T) {
	m, d := newTestManager(t, Config{})
	eps := &fakeEpisodes{active: map[string]bool{"ep-1": true, "ep-2": true}, changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error)
	go func() { ran <- m.Run(ctx, eps) }()
	for _, meta := range []Meta{{ID: "ep-1", Episode: "ep-1", VM: "vm-1"}, {ID: "ep-2", Episode: "ep-2", VM: "vm-2"}, {ID: "tr-v", VM: "vm-3"}} {
		meta.Options.NoVideo = true
		if _, err := m.Start(context.Background(), meta); err != nil {
			t.Fatal(err)
		}
	}
	r1, r3 := m.Recorder("vm-1"), m.Recorder("vm-3")
	eps.end("ep-1")
	<-r1.done
	d.screen("vm-3").close()
	<-r3.done
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	reasons := map[string]string{}
	for _, i := range m.List().Trajectories {
		reasons[i.ID] = i.State + ": " + i.EndReason
	}
	want := map[string]string{"ep-1": "finished: episode ended", "ep-2": "finished: server stopped", "tr-v": "finished: screen closed"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("ends = %v, want %v", reasons, want)
	}
}

// TestDemonstration: a person's click during takeover is a step of actor
// person in native coordinates, its after the screen at the click.
func TestDemonstration(t *testing.T) {
	m, d := newTestManager(t, Config{})
	if _, err := m.Start(context.Background(), Meta{ID: "ep-p", Episode: "ep-p", VM: "vm-p", ScreenshotSize: "640x400", Options: api.RecordOptions{NoVideo: true}}); err != nil {
		t.Fatal(err)
	}
	in := d.input("vm-p")
	s := d.screen("vm-p")
	now := time.Now()
	in <- desk.HumanInput{Time: now, X: 300, Y: 200}
	in <- desk.HumanInput{Time: now, X: 300, Y: 200, Buttons: 1}
	s.paint(image.Rect(0, 0, 1280, 800), color.RGBA{9, 9, 9, 255}, 300, 200)
	in <- desk.HumanInput{Time: now.Add(80 * time.Millisecond), X: 300, Y: 200}
	r := m.Recorder("vm-p")
	waitKept(t, r, 1)
	if _, err := m.Stop(context.Background(), "vm-p", "stopped"); err != nil {
		t.Fatal(err)
	}
	tr, err := m.Get("ep-p")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.StepList) != 1 {
		t.Fatalf("%d steps, want the click", len(tr.StepList))
	}
	st := tr.StepList[0]
	acts, err := actions.DecodeActions(st.Actions)
	if err != nil || len(acts) != 1 {
		t.Fatalf("actions %s: %v", st.Actions, err)
	}
	c, ok := acts[0].(actions.Click)
	if !ok || c.At == nil || *c.At != (actions.Point{X: 300, Y: 200}) {
		t.Errorf("person's action = %#v", acts[0])
	}
	if st.Actor != api.ActorPerson || st.Kind != api.KindDemonstration || st.ScreenshotSize != "1280x800" || st.Request != nil {
		t.Errorf("person's step = %+v", st)
	}
	checkPicture(t, m, "ep-p", st.Screenshots.After, image.Pt(1280, 800), color.RGBA{9, 9, 9, 255})
	var buf bytes.Buffer
	if err := m.Export(context.Background(), "ep-p", api.ExportTar, &buf); err != nil {
		t.Fatal(err)
	}
	_, files := readArchive(t, api.ExportTar, buf.Bytes())
	var line api.OSWorldTrajLine
	json.Unmarshal(bytes.TrimSpace(files["traj.jsonl"]), &line)
	if a, _ := json.Marshal(line.Action); !strings.Contains(string(a), `"x":300,"y":200`) || line.Info["actor"] != "person" {
		t.Errorf("traj.jsonl line = %+v", line)
	}
}
