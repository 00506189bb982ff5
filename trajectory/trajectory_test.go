package trajectory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/internal/fielderr"
)

var agentSize = image.Pt(640, 400)

func newTestManager(t *testing.T, cfg Config) (*Manager, *fakeDesks) {
	t.Helper()
	d := newFakeDesks()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Desks = d
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.stopAll("test ended") })
	return m, d
}

// claudeStep plays a Claude computer-tool step on r: Begin, the screen
// changes, End with the request and the tool_result carrying the agent's
// picture. It returns the picture the agent got.
func claudeStep(t *testing.T, r *Recorder, s *fakeScreen, c color.RGBA, x, y int) []byte {
	t.Helper()
	p := r.Begin()
	s.paint(image.Rect(0, 0, 1280, 400), c, x*2, y*2)
	shot := agentPNG(t, s, agentSize)
	req := fmt.Sprintf(`{"tool":"computer_20251124","input":{"action":"left_click","coordinate":[%d,%d]}}`, x, y)
	resp := fmt.Sprintf(`{"type":"tool_result","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":%q}}]}`,
		base64.StdEncoding.EncodeToString(shot))
	p.End(Call{
		Kind: api.KindActions, Tool: "computer_20251124", Request: json.RawMessage(req), Response: json.RawMessage(resp),
		Actions: []actions.Action{actions.Click{At: &actions.Point{X: x, Y: y}, Button: actions.ButtonLeft, Count: 1}},
		Status:  200, ModelResponse: fmt.Sprintf("click at %d,%d", x, y), Settle: 120 * time.Millisecond,
		ScreenshotSize: agentSize, AfterImage: shot,
	})
	return shot
}

// TestRecordAndExport records a Claude step and a pyautogui step of an
// episode and reads back what a user gets: the steps (request as sent,
// answer with the picture's hash instead of its base64), the files, and
// the tar and zip exports in OSWorld's layout with deskfarm/ beside it.
func TestRecordAndExport(t *testing.T) {
	m, d := newTestManager(t, Config{})
	s := d.screen("vm-1")
	info, err := m.Start(context.Background(), Meta{ID: "ep-1", Episode: "ep-1", VM: "vm-1", Pool: "p", Image: "desktop",
		ScreenshotSize: "640x400", Options: api.RecordOptions{NoVideo: true}})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != api.TrajectoryRecording || info.NativeSize != "1280x800" || info.ID != "ep-1" || info.Video != "" {
		t.Fatalf("start info = %+v", info)
	}
	if _, err := m.Start(context.Background(), Meta{VM: "vm-1"}); !errors.Is(err, ErrRecording) {
		t.Fatalf("second Start: %v, want ErrRecording", err)
	}
	r := m.Recorder("vm-1")
	shot1 := claudeStep(t, r, s, color.RGBA{200, 0, 0, 255}, 10, 20)

	// A pyautogui call answered without a picture: the recorder takes it.
	p := r.Begin()
	s.paint(image.Rect(0, 400, 1280, 800), color.RGBA{0, 0, 200, 255}, 5, 6)
	p.End(Call{Kind: api.KindActions, Tool: api.ToolPyautogui,
		Request:  json.RawMessage(`{"tool":"pyautogui","input":"pyautogui.click(5, 6)"}`),
		Response: json.RawMessage(`{"ok":true}`), Status: 200, ScreenshotSize: agentSize})

	fin, err := m.Stop(context.Background(), "vm-1", "stopped")
	if err != nil {
		t.Fatal(err)
	}
	if fin.State != api.TrajectoryFinished || fin.Steps != 2 || fin.EndReason != "stopped" || fin.EndedAt == nil || fin.Bytes == 0 {
		t.Fatalf("stopped info = %+v", fin)
	}
	if m.Recorder("vm-1") != nil {
		t.Fatal("a recorder is left after Stop")
	}
	if _, err := m.Stop(context.Background(), "vm-1", "again"); !errors.Is(err, ErrNotRecording) {
		t.Fatalf("second Stop: %v", err)
	}
	if err := m.SetResult("ep-1", 1); err != nil {
		t.Fatal(err)
	}

	tr, err := m.Get("ep-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.StepList) != 2 || *tr.Result != 1 {
		t.Fatalf("Get = %d steps, result %v", len(tr.StepList), tr.Result)
	}
	s1, s2 := tr.StepList[0], tr.StepList[1]
	sum := sha256.Sum256(shot1)
	if s1.Step != 1 || s1.Actor != api.ActorAgent || s1.Kind != api.KindActions || s1.Tool != "computer_20251124" ||
		s1.Status != 200 || s1.SettleMS != 120 || s1.ModelResponse != "click at 10,20" ||
		s1.ScreenshotSize != "640x400" || s1.NativeSize != "1280x800" || *s1.Cursor != (api.Point{X: 20, Y: 40}) {
		t.Fatalf("step 1 = %+v", s1)
	}
	if !strings.Contains(string(s1.Request), `"coordinate":[10,20]`) {
		t.Errorf("step 1 request = %s", s1.Request)
	}
	if want := `[{"kind":"click","x":10,"y":20,"button":"left","count":1}]`; string(s1.Actions) != want {
		t.Errorf("step 1 actions = %s, want %s", s1.Actions, want)
	}
	if s1.Screenshots.AfterSHA256 != hex.EncodeToString(sum[:]) ||
		!strings.Contains(string(s1.Response), `"data":"sha256:`+hex.EncodeToString(sum[:])+`"`) ||
		strings.Contains(string(s1.Response), base64.StdEncoding.EncodeToString(shot1)[:100]) {
		t.Errorf("step 1 response = %.300s, after sha %s", s1.Response, s1.Screenshots.AfterSHA256)
	}
	if got := readFile(t, m, "ep-1", s1.Screenshots.After); !bytes.Equal(got, shot1) {
		t.Errorf("step 1 after file %s is not the agent's picture", s1.Screenshots.After)
	}
	// Each picture once: step 2's before is step 1's after.
	if s2.Screenshots.Before != s1.Screenshots.After || s1.Screenshots.Before == s1.Screenshots.After ||
		s2.Screenshots.After == "" || s2.Screenshots.After == s2.Screenshots.Before {
		t.Errorf("screens: step 1 %+v, step 2 %+v", s1.Screenshots, s2.Screenshots)
	}
	for _, n := range []string{s1.Screenshots.BeforeNative, s1.Screenshots.AfterNative, s2.Screenshots.AfterNative} {
		if !strings.HasPrefix(n, "native/") {
			t.Errorf("native picture named %q", n)
		}
	}
	checkPicture(t, m, "ep-1", s2.Screenshots.After, agentSize, color.RGBA{0, 0, 200, 255})
	checkPicture(t, m, "ep-1", s2.Screenshots.AfterNative, image.Pt(1280, 800), color.RGBA{0, 0, 200, 255})
	checkPicture(t, m, "ep-1", s1.Screenshots.BeforeNative, image.Pt(1280, 800), color.RGBA{0, 0, 0, 255})

	for _, format := range []string{api.ExportTar, api.ExportZip} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := m.Export(context.Background(), "ep-1", format, &buf); err != nil {
				t.Fatal(err)
			}
			names, files := readArchive(t, format, buf.Bytes())
			ts1, ts2 := s1.Time.Format("20060102@150405"), s2.Time.Format("20060102@150405")
			want := []string{"traj.jsonl", "step_1_" + ts1 + ".png", "step_2_" + ts2 + ".png", "result.txt",
				"deskfarm/info.json", "deskfarm/trajectory.jsonl"}
			if !slices.Equal(names[:len(want)], want) {
				t.Fatalf("names = %v, want first %v", names, want)
			}
			for _, n := range []string{s1.Screenshots.After, s1.Screenshots.Before, s2.Screenshots.After, s1.Screenshots.AfterNative} {
				if !bytes.Equal(files["deskfarm/"+n], readFile(t, m, "ep-1", n)) {
					t.Errorf("deskfarm/%s missing or different", n)
				}
			}
			if !bytes.Equal(files["step_1_"+ts1+".png"], shot1) {
				t.Error("step_1's PNG is not the picture the agent got")
			}
			if !bytes.Equal(files["step_2_"+ts2+".png"], readFile(t, m, "ep-1", s2.Screenshots.After)) {
				t.Error("step_2's PNG is not its After")
			}
			if string(files["result.txt"]) != "1.0\n" {
				t.Errorf("result.txt = %q", files["result.txt"])
			}
			if _, ok := files["recording.mp4"]; ok {
				t.Error("recording.mp4 in an export without video")
			}
			var lines []api.OSWorldTrajLine
			for _, l := range bytes.Split(bytes.TrimSpace(files["traj.jsonl"]), []byte("\n")) {
				var o api.OSWorldTrajLine
				if err := json.Unmarshal(l, &o); err != nil {
					t.Fatalf("traj.jsonl line %s: %v", l, err)
				}
				lines = append(lines, o)
			}
			if len(lines) != 2 {
				t.Fatalf("traj.jsonl has %d lines", len(lines))
			}
			a1, _ := json.Marshal(lines[0].Action)
			if string(a1) != `{"action":"left_click","coordinate":[10,20]}` || lines[0].Response != "click at 10,20" ||
				lines[0].Done || lines[0].ScreenshotFile != "step_1_"+ts1+".png" || lines[0].ActionTimestamp != ts1 ||
				lines[0].Info["actor"] != "agent" || lines[0].Info["deskfarm_step"] != 1.0 || lines[0].Info["kind"] != "actions" {
				t.Errorf("traj.jsonl line 1 = %+v (action %s)", lines[0], a1)
			}
			if lines[1].Action != "pyautogui.click(5, 6)" || !lines[1].Done || lines[1].StepNum != 2 {
				t.Errorf("traj.jsonl line 2 = %+v", lines[1])
			}
			var exported api.TrajectoryInfo
			if err := json.Unmarshal(files["deskfarm/info.json"], &exported); err != nil || exported.Steps != 2 || exported.State != api.TrajectoryFinished {
				t.Errorf("deskfarm/info.json = %s (%v)", files["deskfarm/info.json"], err)
			}
		})
	}

	var buf bytes.Buffer
	err = m.Export(context.Background(), "ep-1", "rar", &buf)
	if !errors.Is(err, ErrInvalid) || fielderr.PathOf(err).String() != "format" || !strings.Contains(err.Error(), "tar") {
		t.Errorf("export rar: %v", err)
	}
	if err := m.Export(context.Background(), "nope", "tar", &buf); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("export of an unknown id: %v", err)
	}
	if _, err := m.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get unknown: %v", err)
	}
	for _, bad := range []string{"../ep-1/deskfarm/info.json", "/etc/passwd", "screens/../../x", ""} {
		if _, _, err := m.Open("ep-1", bad); !errors.Is(err, ErrInvalid) || fielderr.PathOf(err).String() != "name" {
			t.Errorf("Open(%q) = %v, want ErrInvalid on name", bad, err)
		}
	}
	if _, _, err := m.Open("ep-1", "screens/none.png"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a missing file: %v", err)
	}
}

func readFile(t *testing.T, m *Manager, id, name string) []byte {
	t.Helper()
	f, _, err := m.Open(id, name)
	if err != nil {
		t.Fatalf("Open(%s, %q): %v", id, name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkPicture decodes a stored PNG and checks its size and its bottom
// right pixel.
func checkPicture(t *testing.T, m *Manager, id, name string, size image.Point, c color.RGBA) {
	t.Helper()
	img, _, err := image.Decode(bytes.NewReader(readFile(t, m, id, name)))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if img.Bounds().Size() != size {
		t.Errorf("%s is %v, want %v", name, img.Bounds().Size(), size)
	}
	r, g, b, _ := img.At(size.X-1, size.Y-1).RGBA()
	if got := (color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}); got != c {
		t.Errorf("%s bottom right = %v, want %v", name, got, c)
	}
}

// TestListNewestFirst lists three trajectories, one still recording.
func TestListNewestFirst(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	m, _ := newTestManager(t, Config{Now: clk.Now})
	for _, vm := range []string{"vm-a", "vm-b", "vm-c"} {
		if _, err := m.Start(context.Background(), Meta{VM: vm, Options: api.RecordOptions{NoVideo: true}}); err != nil {
			t.Fatal(err)
		}
		clk.add(time.Minute)
	}
	if _, err := m.Stop(context.Background(), "vm-a", "stopped"); err != nil {
		t.Fatal(err)
	}
	l := m.List()
	var vms, states []string
	for _, i := range l.Trajectories {
		vms = append(vms, i.VM)
		states = append(states, i.State)
		if !strings.HasPrefix(i.ID, "tr-") || len(i.ID) != 15 || i.URL != "/trajectories/"+i.ID {
			t.Errorf("id %q url %q", i.ID, i.URL)
		}
	}
	if !slices.Equal(vms, []string{"vm-c", "vm-b", "vm-a"}) || !slices.Equal(states, []string{"recording", "recording", "finished"}) {
		t.Errorf("List = %v %v", vms, states)
	}
	if l.BudgetBytes != DefaultBudgetBytes || l.TotalBytes <= 0 {
		t.Errorf("List bytes %d of %d", l.TotalBytes, l.BudgetBytes)
	}
	if err := m.Delete(l.Trajectories[0].ID); !errors.Is(err, ErrRecording) {
		t.Errorf("Delete of a recording: %v", err)
	}
	if err := m.Delete(l.Trajectories[2].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(l.Trajectories[2].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if _, err := os.Stat(filepath.Join(m.cfg.Dir, l.Trajectories[2].ID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the deleted trajectory's directory: %v", err)
	}
}

// TestFileAndExecSteps: exec and file steps keep sizes and hashes; the
// contents only with keep_files; an answer that is not JSON is kept as a
// string; traj.jsonl's action for them is the request.
func TestFileAndExecSteps(t *testing.T) {
	m, _ := newTestManager(t, Config{})
	for _, keep := range []bool{false, true} {
		id := fmt.Sprintf("ep-keep-%v", keep)
		if _, err := m.Start(context.Background(), Meta{ID: id, VM: "vm", Options: api.RecordOptions{NoVideo: true, KeepFiles: keep}}); err != nil {
			t.Fatal(err)
		}
		r := m.Recorder("vm")
		data := []byte("hello, file\n")
		sum := sha256.Sum256(data)
		r.Begin().End(Call{Kind: api.KindFileRead, Request: json.RawMessage(`{"path":"/tmp/a.txt"}`), Status: 200,
			File: &api.StepFile{Path: "/tmp/a.txt", Bytes: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}, FileData: data})
		r.Begin().End(Call{Kind: api.KindExec, Request: json.RawMessage(`{"argv":["ls","/nope"]}`), Status: 502, IsError: true,
			Response: json.RawMessage("<html>bad gateway</html>"), Error: &api.ErrorBody{Code: "guest_error", Message: "exit 2"},
			Exec: &api.StepExec{Argv: []string{"ls", "/nope"}, ExitCode: 2, StderrBytes: 40}})
		if _, err := m.Stop(context.Background(), "vm", "stopped"); err != nil {
			t.Fatal(err)
		}
		tr, err := m.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		f, e := tr.StepList[0], tr.StepList[1]
		if f.File == nil || f.File.SHA256 != hex.EncodeToString(sum[:]) || (f.File.Kept != "") != keep {
			t.Errorf("keep_files %v: file step %+v", keep, f.File)
		}
		if keep && !bytes.Equal(readFile(t, m, id, f.File.Kept), data) {
			t.Errorf("kept file differs")
		}
		if e.Exec == nil || e.Exec.ExitCode != 2 || !e.IsError || e.Error.Code != "guest_error" || string(e.Response) != `"\u003chtml\u003ebad gateway\u003c/html\u003e"` {
			t.Errorf("exec step %+v, response %s", e.Exec, e.Response)
		}
		var buf bytes.Buffer
		if err := m.Export(context.Background(), id, api.ExportTar, &buf); err != nil {
			t.Fatal(err)
		}
		_, files := readArchive(t, api.ExportTar, buf.Bytes())
		lines := bytes.Split(bytes.TrimSpace(files["traj.jsonl"]), []byte("\n"))
		var l2 api.OSWorldTrajLine
		json.Unmarshal(lines[1], &l2)
		if a, _ := json.Marshal(l2.Action); string(a) != `{"argv":["ls","/nope"]}` || l2.Info["is_error"] != true || l2.Info["kind"] != "exec" {
			t.Errorf("exec line %s", lines[1])
		}
	}
}
