package replay

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// writeTrajectory lays out an export's deskfarm/ directory: steps, and
// the pictures they name, copied from testdata.
func writeTrajectory(t *testing.T, steps []api.TrajectoryStep, pictures map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	d := filepath.Join(dir, "deskfarm")
	for name, src := range pictures {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, name), readPicture(t, src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	for _, s := range steps {
		line, _ := json.Marshal(s)
		b.Write(line)
		b.WriteByte('\n')
	}
	os.WriteFile(filepath.Join(d, "trajectory.jsonl"), []byte(b.String()), 0o644)
	info, _ := json.Marshal(api.TrajectoryInfo{ID: "ep-0123456789ab", Pool: "desktop", ScreenshotSize: "1280x800", State: api.TrajectoryFinished})
	os.WriteFile(filepath.Join(d, "info.json"), info, 0o644)
	return dir
}

// fakeFarm answers an episode's start, actions, exec and end, the actions
// with the pictures of answers in order; it keeps the bodies it got.
type fakeFarm struct {
	mu      sync.Mutex
	answers []string // testdata pictures, one per actions call
	bodies  []string // "PATH BODY"
	pool    string
	ended   bool
}

func (f *fakeFarm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var body json.RawMessage
	json.NewDecoder(r.Body).Decode(&body)
	f.bodies = append(f.bodies, r.Method+" "+r.URL.Path+" "+string(body))
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/episodes":
		var req api.StartEpisodeRequest
		json.Unmarshal(body, &req)
		f.pool = req.Pool
		json.NewEncoder(w).Encode(api.Episode{ID: "ep-replay00000", VM: "v01", Pool: req.Pool, State: api.EpisodeActive})
	case r.URL.Path == "/v1/episodes/ep-replay00000/actions":
		var req api.ActionsRequest
		json.Unmarshal(body, &req)
		if strings.Contains(string(req.Actions), "bogus") {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: "invalid_request", Message: "bogus action"}})
			return
		}
		out := api.ActionsResponse{Executed: 1}
		if req.Screenshot != api.ScreenshotNever {
			pic := f.answers[0]
			f.answers = f.answers[1:]
			b, _ := os.ReadFile(filepath.Join("testdata", pic))
			out.Image = &api.Image{MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(b), Width: 1280, Height: 800}
		}
		json.NewEncoder(w).Encode(out)
	case r.Method == "POST" && r.URL.Path == "/v1/episodes/ep-replay00000/snapshots":
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(api.Snapshot{Name: "cp"})
	case r.Method == "POST" && r.URL.Path == "/v1/episodes/ep-replay00000/snapshots/cp/revert":
		json.NewEncoder(w).Encode(api.RevertResponse{ID: "v01", Snapshot: "cp"})
	case r.URL.Path == "/v1/episodes/ep-replay00000/exec":
		json.NewEncoder(w).Encode(api.ExecResponse{ExitCode: 0})
	case r.Method == "DELETE" && r.URL.Path == "/v1/episodes/ep-replay00000":
		f.ended = true
		json.NewEncoder(w).Encode(api.Episode{ID: "ep-replay00000", State: api.EpisodeEnded})
	default:
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.ErrorResponse{Error: api.ErrorBody{Code: "not_found", Message: r.URL.Path}})
	}
}

func TestRunReportsEachStepAndTheFirstDivergence(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 16, 22, 0, 0, time.UTC)
	steps := []api.TrajectoryStep{
		{Step: 1, Time: t0, Actor: api.ActorAgent, Kind: api.KindActions, Tool: "computer_20251124",
			Request:        json.RawMessage(`{"tool":"computer_20251124","input":{"action":"type","text":"echo hello"},"settle_max_ms":5000}`),
			Actions:        json.RawMessage(`[{"kind":"type","text":"echo hello"}]`),
			ScreenshotSize: "1280x800", Screenshots: api.StepScreens{After: "screens/a.png"}},
		{Step: 2, Time: t0.Add(time.Second), Actor: api.ActorPerson, Kind: api.KindDemonstration,
			Actions:        json.RawMessage(`[{"kind":"key","keys":["Return"]}]`),
			ScreenshotSize: "1280x800", Screenshots: api.StepScreens{After: "native/b.png"}},
		// As the farm records exec: argv and sizes, no request.
		{Step: 3, Actor: api.ActorAgent, Kind: api.KindExec, Exec: &api.StepExec{Argv: []string{"true"}, ExitCode: 0}},
		{Step: 4, Actor: api.ActorAgent, Kind: api.KindFileRead, File: &api.StepFile{Path: "/etc/hostname"}},
		// Recorded without a picture (the queue was full): played, not compared.
		{Step: 5, Actor: api.ActorAgent, Kind: api.KindActions, Actions: json.RawMessage(`[{"kind":"move","x":300,"y":300}]`),
			ScreenshotSize: "1280x800", Dropped: "queue full"},
		// The replay's screen is still the typed command: diverged.
		{Step: 6, Actor: api.ActorAgent, Kind: api.KindActions, Actions: json.RawMessage(`{"kind":"screenshot"}`),
			ScreenshotSize: "1280x800", Screenshots: api.StepScreens{After: "screens/b.png"}},
		// A checkpoint saved and gone back to; a revert to a snapshot the
		// recording never had fails as it did.
		{Step: 7, Actor: api.ActorAgent, Kind: api.KindSnapshot, Snapshot: &api.StepSnapshot{Op: api.SnapshotSave, Name: "cp"}},
		{Step: 8, Actor: api.ActorAgent, Kind: api.KindSnapshot, Snapshot: &api.StepSnapshot{Op: api.SnapshotRevert, Name: "cp"}},
		{Step: 9, Actor: api.ActorAgent, Kind: api.KindSnapshot, Snapshot: &api.StepSnapshot{Op: api.SnapshotRevert, Name: "gone"},
			IsError: true, Status: 404},
		// Failed in the recording, fails again: as recorded.
		{Step: 10, Actor: api.ActorAgent, Kind: api.KindActions, Actions: json.RawMessage(`[{"kind":"bogus"}]`), IsError: true, Status: 400},
		// Failed only in the replay.
		{Step: 11, Actor: api.ActorAgent, Kind: api.KindActions, Actions: json.RawMessage(`[{"kind":"bogus"}]`)},
	}
	dir := writeTrajectory(t, steps, map[string]string{"screens/a.png": "terminal-typed.png",
		"native/b.png": "terminal-ran.png", "screens/b.png": "terminal-ran.png"})
	farm := &fakeFarm{answers: []string{"terminal-typed.png", "terminal-ran-pointer-moved.png", "terminal-typed.png"}}
	srv := httptest.NewServer(farm)
	defer srv.Close()
	c, _ := client.New(srv.URL)

	tr, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	rep, err := Run(t.Context(), c, tr, Options{Log: &log})
	var de *DivergedError
	if !errors.As(err, &de) || de.Step != 6 || !errors.Is(err, ErrDiverged) {
		t.Fatalf("Run: %v; want divergence at step 6", err)
	}
	if rep.FirstDiverged != 6 || rep.Reproduced() || rep.Episode != "ep-replay00000" || rep.Source != "ep-0123456789ab" {
		t.Errorf("report %+v", rep)
	}
	want := []string{OutcomeMatched, OutcomeMatched, OutcomePlayed, OutcomeSkipped, OutcomePlayed, OutcomeDiverged,
		OutcomePlayed, OutcomePlayed, OutcomePlayed, OutcomePlayed, OutcomeDiverged}
	for i, s := range rep.Steps {
		if s.Outcome != want[i] {
			t.Errorf("step %d: %s (%s), want %s", s.Step, s.Outcome, s.Reason, want[i])
		}
	}
	if d := rep.Steps[1].Distance; d == nil || *d < 0.00019 || *d > 0.0002 {
		t.Errorf("step 2 distance %v, want the moved pointer's 0.000192", d)
	}
	if d := rep.Steps[5].Distance; d == nil || *d < 0.00088 {
		t.Errorf("step 6 distance %v, want the output line's 0.000889", d)
	}
	if !strings.Contains(rep.Steps[10].Reason, "bogus action") {
		t.Errorf("step 11 reason %q", rep.Steps[10].Reason)
	}
	if farm.pool != "desktop" || !farm.ended {
		t.Errorf("episode of pool %q, ended %v: want the recording's pool, ended", farm.pool, farm.ended)
	}
	// The steps went as recorded: the neutral actions, at the recorded
	// size, with the recorded run options; no screenshot asked where
	// none was recorded.
	for _, w := range []string{
		`POST /v1/episodes/ep-replay00000/actions {"actions":[{"kind":"type","text":"echo hello"}],"screenshot_size":"1280x800","settle_max_ms":5000}`,
		`POST /v1/episodes/ep-replay00000/actions {"actions":[{"kind":"key","keys":["Return"]}],"screenshot_size":"1280x800"}`,
		`POST /v1/episodes/ep-replay00000/exec {"argv":["true"]}`,
		`POST /v1/episodes/ep-replay00000/actions {"actions":[{"kind":"move","x":300,"y":300}],"screenshot_size":"1280x800","screenshot":"never"}`,
		`POST /v1/episodes/ep-replay00000/actions {"action":{"kind":"screenshot"},"screenshot_size":"1280x800"}`,
		`POST /v1/episodes/ep-replay00000/snapshots {"name":"cp"}`,
		`POST /v1/episodes/ep-replay00000/snapshots/cp/revert `,
		`POST /v1/episodes/ep-replay00000/snapshots/gone/revert `,
	} {
		found := false
		for _, b := range farm.bodies {
			found = found || b == w
		}
		if !found {
			t.Errorf("no request %s in\n%s", w, strings.Join(farm.bodies, "\n"))
		}
	}
	if !strings.Contains(log.String(), "step 6\tagent actions\tdiverged\tmismatch 0.0009") {
		t.Errorf("log:\n%s", log.String())
	}
}

func TestLoadNamesWhatIsMissing(t *testing.T) {
	_, err := Load(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "deskfarm/trajectory.jsonl") {
		t.Errorf("Load of an empty dir: %v", err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "trajectory.jsonl"), []byte("{\"step\":1}\nnot json\n"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Load of a bad line: %v", err)
	}
}
