package web_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/web"
)

// A recorded Claude computer_20251124 episode on the real desktop, as an
// agent loop runs one (tool_use inputs sent to the episode's actions
// route), with a person's takeover click in the middle: the export's
// traj.jsonl names, step by step, PNGs byte-identical to the images the
// agent received; recording.mp4 plays for about as long as the episode
// (ffprobe); the person's click is a step of actor person at the point
// clicked; every agent step keeps its request exactly as sent.
func TestE2ETrajectoryClaudeEpisode(t *testing.T) {
	m := testenv.Manager(t, "desktop")
	if _, err := exec.LookPath("ffprobe"); err != nil {
		testenv.Unavailable(t, "ffprobe: "+err.Error())
	}
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "desktop", Image: "desktop", MemoryMiB: 1024, VCPUs: 2, Max: 1}}}
	cfg.SetDefaults()
	pm, err := pool.New(context.Background(), m, cfg, pool.Options{StateDir: testenv.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	desks := desk.NewPool(m, nil)
	trajDir, err := os.MkdirTemp(testenv.StateDir, "trajectories-")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := trajectory.New(trajectory.Config{Dir: trajDir, Desks: trajectory.DeskPool(desks)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); tm.Run(runCtx, trajectory.PoolEpisodes(pm)) }()
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Pools: pm, Trajectories: tm}))
	t.Cleanup(func() {
		srv.Close()
		stopRun()
		<-ran
		desks.Close()
		pm.Close()
		os.RemoveAll(trajDir)
	})

	call := func(method, path, body string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		return b
	}
	var ep api.Episode
	json.Unmarshal(call("POST", "/v1/episodes", `{"pool":"desktop","record":true,"ttl_s":900}`, 201), &ep)
	if !ep.Recording || ep.TrajectoryURL == "" {
		t.Fatalf("episode not recorded: %+v", ep)
	}
	begun := time.Now()

	// The agent's turns, as Claude emits them; each answer's image is what
	// the agent received.
	inputs := []string{
		`{"action":"screenshot"}`,
		`{"action":"key","text":"ctrl+alt+t"}`,
		`{"action":"wait","duration":2}`,
		`{"action":"type","text":"echo recorded > ~/traj.txt\n"}`,
		`{"action":"left_click","coordinate":[900,600]}`,
		`{"action":"scroll","coordinate":[640,400],"scroll_direction":"down","scroll_amount":2}`,
		`{"action":"screenshot"}`,
	}
	var got [][]byte // the agent's images, by agent step
	var sent []string
	for i, in := range inputs {
		body := fmt.Sprintf(`{"tool":"computer_20251124","input":%s,"tool_use_id":"toolu_%02d","model_response":"turn %d"}`, in, i, i)
		var res api.ActionsResponse
		json.Unmarshal(call("POST", "/v1/episodes/"+ep.ID+"/actions", body, 200), &res)
		var img []byte
		for _, c := range res.Content {
			if c.Type == "image" && c.Source != nil {
				img, _ = base64.StdEncoding.DecodeString(c.Source.Data)
			}
		}
		if img == nil {
			t.Fatalf("turn %d (%s): no image in the tool_result", i, in)
		}
		got, sent = append(got, img), append(sent, body)
	}

	// A person takes over and clicks; the click is a step of theirs.
	a := &tinyAPI{t: t, m: m, srv: srv, vm: vmm.VM{ID: ep.VM}}
	token := a.control("POST", 201)
	rfb := dialRFB(t, a, token)
	at := image.Pt(700, 500)
	rfb.click(at)
	var person *api.TrajectoryStep
	for deadline := time.Now().Add(30 * time.Second); person == nil; {
		var tr api.Trajectory
		json.Unmarshal(call("GET", "/v1/trajectories/"+ep.ID, "", 200), &tr)
		for i, s := range tr.StepList {
			if s.Actor == api.ActorPerson {
				person = &tr.StepList[i]
			}
		}
		if person == nil && time.Now().After(deadline) {
			t.Fatalf("no person step after a takeover click: %d steps", len(tr.StepList))
		}
		time.Sleep(300 * time.Millisecond)
	}
	var acts []map[string]any
	json.Unmarshal(person.Actions, &acts)
	if person.Kind != api.KindDemonstration || len(acts) == 0 || acts[0]["kind"] != "click" ||
		!strings.Contains(string(person.Actions), fmt.Sprintf(`"x":%d,"y":%d`, at.X, at.Y)) {
		t.Errorf("person step %s: %s, want a click at %v", person.Kind, person.Actions, at)
	}
	a.control("DELETE", 204)

	// Long enough a video to measure.
	time.Sleep(2 * time.Second)
	call("DELETE", "/v1/episodes/"+ep.ID, "", 200)
	lasted := time.Since(begun).Seconds()

	resp, err := http.Get(srv.URL + "/v1/episodes/" + ep.ID + "/trajectory?format=tar")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("export: %d %s", resp.StatusCode, b)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(resp.Body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}

	// traj.jsonl: the agent's steps, in order, each PNG the agent's bytes.
	agent := 0
	sc := bufio.NewScanner(bytes.NewReader(files["traj.jsonl"]))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var line api.OSWorldTrajLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if line.Info["actor"] != api.ActorAgent {
			continue
		}
		if agent >= len(got) {
			t.Fatalf("more agent lines than turns: %s", sc.Bytes())
		}
		png, ok := files[line.ScreenshotFile]
		if !ok || !bytes.Equal(png, got[agent]) {
			t.Errorf("step %d (%s): %s holds %d bytes, not the %d the agent received", line.StepNum, inputs[agent],
				line.ScreenshotFile, len(png), len(got[agent]))
		}
		if line.Response != fmt.Sprintf("turn %d", agent) {
			t.Errorf("step %d: response %q", line.StepNum, line.Response)
		}
		agent++
	}
	if agent != len(got) {
		t.Fatalf("traj.jsonl has %d agent steps, want %d; files %d", agent, len(got), len(files))
	}
	// deskfarm's own record keeps each request exactly as sent.
	var steps []api.TrajectoryStep
	sc = bufio.NewScanner(bytes.NewReader(files["deskfarm/trajectory.jsonl"]))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var s api.TrajectoryStep
		json.Unmarshal(sc.Bytes(), &s)
		if s.Actor == api.ActorAgent {
			steps = append(steps, s)
		}
	}
	if len(steps) != len(sent) {
		t.Errorf("%d agent steps in deskfarm/trajectory.jsonl, %d sent", len(steps), len(sent))
	}
	for i, s := range steps {
		if i < len(sent) && string(s.Request) != sent[i] {
			t.Errorf("step %d's request %s, sent %s", s.Step, s.Request, sent[i])
		}
	}

	// recording.mp4 plays for about as long as the episode lasted.
	mp4 := filepath.Join(t.TempDir(), "recording.mp4")
	if err := os.WriteFile(mp4, files["recording.mp4"], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", mp4).Output()
	if err != nil {
		t.Fatalf("ffprobe of the export's recording.mp4 (%d bytes): %v", len(files["recording.mp4"]), err)
	}
	d, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || d < 1 || d > lasted+5 {
		t.Errorf("recording.mp4 lasts %q s; the episode lasted %.1f s", out, lasted)
	}
	t.Logf("%d agent steps, a person step, %d files, video %.1f s of an episode of %.1f s", agent, len(files), d, lasted)
}
