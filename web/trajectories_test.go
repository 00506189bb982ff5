package web

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/trajectory"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// trajServer is deskServer with a trajectory store, returned too.
func trajServer(t *testing.T) (*httptest.Server, *trajectory.Manager) {
	t.Helper()
	farm := vmmtest.New()
	if _, err := farm.Create(context.Background(), vmm.CreateOptions{Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	disp := &stillDisplay{}
	desks := desk.New(farm, desk.Options{Log: log, Dial: func(context.Context, vmm.VM, *slog.Logger) (desk.Display, error) {
		return disp, nil
	}})
	m := runTrajectories(t, desks, nil)
	srv := httptest.NewServer(NewServer(farm, Options{Desks: desks, Logger: log, Trajectories: m}))
	t.Cleanup(func() { srv.Close(); desks.Close(); farm.Close() })
	return srv, m
}

// runTrajectories is a store in a test's temporary dir, run (on eps, if
// any) until the test ends.
func runTrajectories(t *testing.T, desks *desk.Pool, eps trajectory.Episodes) *trajectory.Manager {
	t.Helper()
	m, err := trajectory.New(trajectory.Config{Dir: t.TempDir(), Desks: trajectory.DeskPool(desks), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, eps) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// poolEpisodes is trajectory.Episodes over pools, as serve adapts them.
type poolEpisodes struct{ m *pool.Manager }

func (p poolEpisodes) Changed() <-chan struct{} { return p.m.Changed() }

func (p poolEpisodes) Active(id string) bool {
	ep, err := p.m.Get(id)
	return err == nil && ep.State == pool.EpisodeActive
}

// An episode started with record is recorded until it ends: its answers
// say so and link its page, its trajectory ends with it (before its VM is
// reset) and is exported through the episode; the pool's record default
// applies to an episode that names none, and record:false overrides it.
func TestEpisodeRecording(t *testing.T) {
	srv, _, _, m := poolFarm(t, pool.PoolConfig{Name: "tiny", Image: "tiny", MinWarm: 1, Max: 2, Record: true,
		RecordOptions: pool.RecordOptions{NoVideo: true}}, Options{}, true)
	base := srv.URL
	start := func(body string) api.Episode {
		t.Helper()
		status, b := send(t, "POST", base+"/v1/episodes", body)
		if status != http.StatusCreated {
			t.Fatalf("start %s: %d %s", body, status, b)
		}
		var ep api.Episode
		json.Unmarshal(b, &ep)
		return ep
	}
	ep := start(`{"pool":"tiny"}`)
	if !ep.Recording || !strings.HasSuffix(ep.TrajectoryURL, "/trajectories/"+ep.ID) {
		t.Fatalf("the pool's default did not record: %+v", ep)
	}
	if rec := m.Recorder(ep.VM); rec == nil || rec.ID() != ep.ID {
		t.Fatalf("no recorder of the episode on %s", ep.VM)
	}
	if status, b := send(t, "POST", base+"/v1/episodes/"+ep.ID+"/actions", `{"action":{"kind":"screenshot"}}`); status != 200 {
		t.Fatalf("screenshot: %d %s", status, b)
	}
	status, b := send(t, "GET", base+"/v1/episodes/"+ep.ID, "")
	if status != 200 || !strings.Contains(string(b), `"recording":true`) {
		t.Fatalf("get: %d %s", status, b)
	}
	if status, b = send(t, "DELETE", base+"/v1/episodes/"+ep.ID, ""); status != 200 || strings.Contains(string(b), `"recording":true`) ||
		!strings.Contains(string(b), `"trajectory_url"`) {
		t.Fatalf("end: %d %s", status, b)
	}
	status, b = send(t, "GET", base+"/v1/trajectories/"+ep.ID, "")
	var tr api.Trajectory
	json.Unmarshal(b, &tr)
	if status != 200 || tr.State != api.TrajectoryFinished || tr.EndReason != "episode ended" || tr.Episode != ep.ID ||
		tr.Pool != "tiny" || len(tr.StepList) != 1 || !tr.Options.NoVideo {
		t.Fatalf("trajectory after the end: %d %s", status, b)
	}
	resp, err := http.Get(base + "/v1/episodes/" + ep.ID + "/trajectory?format=zip")
	if err != nil {
		t.Fatal(err)
	}
	zb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/zip" || !bytes.HasPrefix(zb, []byte("PK")) {
		t.Fatalf("episode export: %d %s %.40q", resp.StatusCode, resp.Header, zb)
	}

	off := start(`{"pool":"tiny","record":false}`)
	if off.Recording || off.TrajectoryURL != "" || m.Recorder(off.VM) != nil {
		t.Fatalf("record:false recorded: %+v", off)
	}
	// Recording can start later, through the episode: the trajectory is
	// the episode's.
	status, b = send(t, "POST", base+"/v1/episodes/"+off.ID+"/recording", `{"no_video":true}`)
	if status != http.StatusCreated || !strings.Contains(string(b), `"id":"`+off.ID+`"`) {
		t.Fatalf("record the episode later: %d %s", status, b)
	}
}

// wantCode checks an error answer's status, code and field.
func wantCode(t *testing.T, what string, status int, body []byte, wantStatus int, code, field string) api.ErrorBody {
	t.Helper()
	var e api.ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil || status != wantStatus || e.Error.Code != code || e.Error.Field != field {
		t.Errorf("%s: %d %s, want %d %s field %q", what, status, body, wantStatus, code, field)
	}
	return e.Error
}

// recordVM1 serves trajServer and starts recording vm1, without video.
func recordVM1(t *testing.T) (base string, info api.TrajectoryInfo) {
	t.Helper()
	srv, _ := trajServer(t)
	status, body := send(t, "POST", srv.URL+"/v1/vms/vm1/recording", `{"no_video":true}`)
	if status != http.StatusCreated {
		t.Fatalf("start recording: %d %s", status, body)
	}
	json.Unmarshal(body, &info)
	return srv.URL, info
}

// The trajectory routes' errors: an unknown id is 404 not_found naming it,
// a bad format 400 naming format and the accepted values, a second
// recording of a VM and the stop of none 409, a file outside the
// trajectory 400 naming name.
func TestTrajectoryRouteErrors(t *testing.T) {
	srv, _ := trajServer(t)
	base := srv.URL
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/trajectories/tr-nope"},
		{"GET", "/v1/trajectories/tr-nope/export"},
		{"GET", "/v1/trajectories/tr-nope/files/trajectory.jsonl"},
		{"GET", "/v1/episodes/tr-nope/trajectory?format=zip"},
		{"DELETE", "/v1/trajectories/tr-nope"},
	} {
		status, body := send(t, c.method, base+c.path, "")
		if e := wantCode(t, c.method+" "+c.path, status, body, 404, api.CodeNotFound, ""); !strings.Contains(e.Message, "tr-nope") {
			t.Errorf("%s %s: message %q does not name the trajectory", c.method, c.path, e.Message)
		}
	}
	status, body := send(t, "PUT", base+"/v1/trajectories/tr-nope/result", `{"result":1}`)
	wantCode(t, "result of none", status, body, 404, api.CodeNotFound, "")

	status, body = send(t, "DELETE", base+"/v1/vms/vm1/recording", "")
	wantCode(t, "stop without a recording", status, body, 409, api.CodeNotRecording, "")

	status, body = send(t, "POST", base+"/v1/vms/vm1/recording", `{"no_video":true}`)
	if status != http.StatusCreated {
		t.Fatalf("start recording: %d %s", status, body)
	}
	var info api.TrajectoryInfo
	json.Unmarshal(body, &info)
	if info.ID == "" || info.VM != "vm1" || info.State != api.TrajectoryRecording || !strings.HasSuffix(info.URL, "/trajectories/"+info.ID) {
		t.Fatalf("started: %+v", info)
	}
	status, body = send(t, "POST", base+"/v1/vms/vm1/recording", `{}`)
	wantCode(t, "second recording", status, body, 409, api.CodeRecording, "")
	status, body = send(t, "DELETE", base+"/v1/trajectories/"+info.ID, "")
	wantCode(t, "delete while recording", status, body, 409, api.CodeRecording, "")

	for _, f := range []string{"rar", "TAR", "tar.gz"} {
		status, body = send(t, "GET", base+"/v1/trajectories/"+info.ID+"/export?format="+f, "")
		e := wantCode(t, "format "+f, status, body, 400, api.CodeInvalidRequest, "format")
		if !strings.Contains(e.Message, "tar") || !strings.Contains(e.Message, "zip") {
			t.Errorf("format %s: %q does not name the accepted values", f, e.Message)
		}
	}
	status, body = send(t, "GET", base+"/v1/trajectories/"+info.ID+"/files/..%2F..%2Fetc%2Fpasswd", "")
	wantCode(t, "file outside", status, body, 400, api.CodeInvalidRequest, "name")

	status, body = send(t, "DELETE", base+"/v1/vms/vm1/recording", "")
	if status != http.StatusOK || !strings.Contains(string(body), `"state":"finished"`) {
		t.Fatalf("stop: %d %s", status, body)
	}
	status, body = send(t, "PUT", base+"/v1/trajectories/"+info.ID+"/result", `{"result":"high"}`)
	wantCode(t, "result of the wrong type", status, body, 400, api.CodeInvalidRequest, "result")
	if status, body = send(t, "PUT", base+"/v1/trajectories/"+info.ID+"/result", `{"result":0.5}`); status != 200 ||
		!strings.Contains(string(body), `"result":0.5`) {
		t.Fatalf("result: %d %s", status, body)
	}
	if status, body = send(t, "DELETE", base+"/v1/trajectories/"+info.ID, ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	status, body = send(t, "GET", base+"/v1/trajectories/"+info.ID, "")
	wantCode(t, "deleted", status, body, 404, api.CodeNotFound, "")
}

// A recorded VM's calls are its steps: an actions call with its request
// exactly as sent, the neutral actions it played and its answer, whose
// image is the step's after (the export's step PNG, byte for byte); a
// failed call with its error; an exec with its argv and sizes; a file
// write with its hash, not its bytes.
func TestTrajectoryRecordsSteps(t *testing.T) {
	base, info := recordVM1(t)
	var status int
	var body []byte

	click := `{"tool":"computer_20251124","input":{"action":"left_click","coordinate":[100,50]},"model_response":"I click it"}`
	status, body = send(t, "POST", base+"/v1/vms/vm1/actions", click)
	if status != http.StatusOK {
		t.Fatalf("click: %d %s", status, body)
	}
	var res api.ActionsResponse
	json.Unmarshal(body, &res)
	if res.Image == nil {
		t.Fatalf("no screenshot in %s", body)
	}
	got, _ := base64.StdEncoding.DecodeString(res.Image.Data)
	bad := `{"actions":[{"kind":"key","keys":["nosuchkey"]}]}`
	if status, body = send(t, "POST", base+"/v1/vms/vm1/actions", bad); status != http.StatusBadRequest {
		t.Fatalf("bad key: %d %s", status, body)
	}
	if status, body = send(t, "POST", base+"/v1/vms/vm1/exec", `{"argv":["echo","hi"]}`); status != http.StatusOK {
		t.Fatalf("exec: %d %s", status, body)
	}
	if status, body = sendType(t, "PUT", base+"/v1/vms/vm1/files?path=/tmp/secret", "s3cret", "application/octet-stream"); status != http.StatusNoContent {
		t.Fatalf("write file: %d %s", status, body)
	}
	if status, body = send(t, "DELETE", base+"/v1/vms/vm1/recording", ""); status != http.StatusOK {
		t.Fatalf("stop: %d %s", status, body)
	}

	status, body = send(t, "GET", base+"/v1/trajectories/"+info.ID, "")
	if status != http.StatusOK {
		t.Fatalf("get: %d %s", status, body)
	}
	var tr api.Trajectory
	json.Unmarshal(body, &tr)
	if len(tr.StepList) != 4 {
		t.Fatalf("%d steps, want 4: %s", len(tr.StepList), body)
	}
	st := tr.StepList[0]
	if st.Kind != api.KindActions || st.Tool != "computer_20251124" || st.Actor != api.ActorAgent || st.Status != 200 ||
		st.IsError || st.ModelResponse != "I click it" || string(st.Request) != click {
		t.Errorf("click step: %+v", st)
	}
	if !bytes.Contains(st.Actions, []byte(`"kind":"click"`)) || !bytes.Contains(st.Actions, []byte(`100`)) {
		t.Errorf("click step's actions: %s", st.Actions)
	}
	sum := sha256.Sum256(got)
	if st.Screenshots.AfterSHA256 != hex.EncodeToString(sum[:]) || bytes.Contains(st.Response, []byte(res.Image.Data)) ||
		!bytes.Contains(st.Response, []byte("sha256:"+st.Screenshots.AfterSHA256)) {
		t.Errorf("click step's after %q, answer %.200s", st.Screenshots.AfterSHA256, st.Response)
	}
	if e := tr.StepList[1]; !e.IsError || e.Status != 400 || e.Error == nil || e.Error.Code != api.CodeUnknownKey ||
		!bytes.Contains(e.Response, []byte(api.CodeUnknownKey)) {
		t.Errorf("failed step: %+v (error %+v)", e, e.Error)
	}
	if e := tr.StepList[2]; e.Kind != api.KindExec || e.Exec == nil || strings.Join(e.Exec.Argv, " ") != "echo hi" ||
		e.Request != nil || e.Response != nil {
		t.Errorf("exec step: %+v", e)
	}
	secret := sha256.Sum256([]byte("s3cret"))
	if f := tr.StepList[3]; f.Kind != api.KindFileWrite || f.File == nil || f.File.Path != "/tmp/secret" || f.File.Bytes != 6 ||
		f.File.SHA256 != hex.EncodeToString(secret[:]) || f.File.Kept != "" {
		t.Errorf("file step: %+v %+v", f, f.File)
	}

	// The export's first step PNG is the image the agent got.
	resp, err := http.Get(base + "/v1/trajectories/" + info.ID + "/export?format=tar")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("export: %d %s", resp.StatusCode, resp.Header)
	}
	files := map[string][]byte{}
	tr2 := tar.NewReader(resp.Body)
	for {
		h, err := tr2.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr2)
	}
	sc := bufio.NewScanner(bytes.NewReader(files["traj.jsonl"]))
	if !sc.Scan() {
		t.Fatalf("no traj.jsonl in the export: %v", keys(files))
	}
	var line api.OSWorldTrajLine
	json.Unmarshal(sc.Bytes(), &line)
	if !bytes.Equal(files[line.ScreenshotFile], got) || line.Response != "I click it" {
		t.Errorf("step 1 %+v: its PNG (%d bytes) is not the agent's (%d)", line, len(files[line.ScreenshotFile]), len(got))
	}
	if strings.Contains(string(files["deskfarm/trajectory.jsonl"]), "s3cret") {
		t.Errorf("the file's contents were kept")
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// The guest's files a recording kept are what was inside the VM: a viewer
// token is refused them, while it may watch the rest of a trajectory.
func TestTrajectoryKeptFilesNeedControl(t *testing.T) {
	f := newSecFarm(t, Options{Token: "ctl", ViewerToken: "view", TrustedNets: []netip.Prefix{}})
	for path, want := range map[string]int{
		"/v1/trajectories/tr-1/files/files/0001-secret": http.StatusForbidden,
		"/v1/trajectories/tr-1/files/files%2Fsecret":    http.StatusForbidden,
		"/v1/trajectories/tr-1/files/./files/secret":    http.StatusForbidden,
		"/v1/trajectories/tr-1/files/screens/a.png":     http.StatusNotImplemented, // watched; this farm keeps none
	} {
		status, body := sendNoRead(t, f.srv.URL, "GET", path, "Authorization", "Bearer view")
		if status != want && !(want == http.StatusForbidden && status == http.StatusMovedPermanently) {
			t.Errorf("viewer GET %s: %d %s, want %d", path, status, body, want)
		}
	}
}

// Each Cua command on a recorded VM is a step: the command as sent, the
// neutral actions it played and its reply, whose screenshot is the step's
// after (its base64 replaced by the hash).
func TestTrajectoryRecordsCuaCommands(t *testing.T) {
	base, info := recordVM1(t)
	var status int
	var body []byte
	cmds := []string{`{"command":"left_click","params":{"x":30,"y":40}}`, `{"command":"screenshot","params":{}}`}
	var shot []byte
	for _, c := range cmds {
		status, body = send(t, "POST", base+"/v1/vms/vm1/cua/cmd", c)
		if status != 200 || !strings.Contains(string(body), `"success":true`) {
			t.Fatalf("%s: %d %s", c, status, body)
		}
		var reply struct {
			ImageData string `json:"image_data"`
		}
		json.Unmarshal(bytes.TrimSpace(bytes.TrimPrefix(body, []byte("data: "))), &reply)
		if reply.ImageData != "" {
			shot, _ = base64.StdEncoding.DecodeString(reply.ImageData)
		}
	}
	if shot == nil {
		t.Fatal("no screenshot in the reply")
	}
	send(t, "DELETE", base+"/v1/vms/vm1/recording", "")
	status, body = send(t, "GET", base+"/v1/trajectories/"+info.ID, "")
	var tr api.Trajectory
	json.Unmarshal(body, &tr)
	if status != 200 || len(tr.StepList) != 2 {
		t.Fatalf("get: %d %s", status, body)
	}
	click, sc := tr.StepList[0], tr.StepList[1]
	if click.Kind != api.KindCua || click.Tool != "cua" || string(click.Request) != cmds[0] ||
		!bytes.Contains(click.Actions, []byte(`"x":30,"y":40`)) || !bytes.Contains(click.Response, []byte(`"success":true`)) {
		t.Errorf("click step: %+v", click)
	}
	sum := sha256.Sum256(shot)
	if string(sc.Request) != cmds[1] || sc.Screenshots.AfterSHA256 != hex.EncodeToString(sum[:]) ||
		!bytes.Contains(sc.Response, []byte("sha256:"+sc.Screenshots.AfterSHA256)) {
		t.Errorf("screenshot step: %+v", sc)
	}
}

// A recorded VM's snapshot calls are steps of its trajectory, each saying
// what it did to which snapshot, with the desktop after it (a revert's is
// the reverted desktop); a failed revert is an error step with its code.
// A list changes nothing and is no step.
func TestTrajectoryRecordsSnapshots(t *testing.T) {
	base, info := recordVM1(t)
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/vms/vm1/snapshots", `{"name":"before-login"}`, http.StatusCreated},
		{"GET", "/v1/vms/vm1/snapshots", "", http.StatusOK},
		{"POST", "/v1/vms/vm1/snapshots/before-login/revert", "", http.StatusOK},
		{"POST", "/v1/vms/vm1/snapshots/nope/revert", "", http.StatusNotFound},
		{"DELETE", "/v1/vms/vm1/snapshots/before-login", "", http.StatusNoContent},
	} {
		if status, body := send(t, c.method, base+c.path, c.body); status != c.want {
			t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, status, body, c.want)
		}
	}
	if status, body := send(t, "DELETE", base+"/v1/vms/vm1/recording", ""); status != http.StatusOK {
		t.Fatalf("stop: %d %s", status, body)
	}
	status, body := send(t, "GET", base+"/v1/trajectories/"+info.ID, "")
	if status != http.StatusOK {
		t.Fatalf("get: %d %s", status, body)
	}
	var tr api.Trajectory
	json.Unmarshal(body, &tr)
	want := []api.StepSnapshot{{Op: api.SnapshotSave, Name: "before-login"}, {Op: api.SnapshotRevert, Name: "before-login"},
		{Op: api.SnapshotRevert, Name: "nope"}, {Op: api.SnapshotDelete, Name: "before-login"}}
	if len(tr.StepList) != len(want) {
		t.Fatalf("%d steps, want %d: %s", len(tr.StepList), len(want), body)
	}
	for i, st := range tr.StepList {
		if st.Kind != api.KindSnapshot || st.Snapshot == nil || *st.Snapshot != want[i] || st.Screenshots.After == "" {
			t.Errorf("step %d: %+v (snapshot %+v), want kind snapshot %+v with an after screenshot", i+1, st, st.Snapshot, want[i])
		}
	}
	if e := tr.StepList[2]; !e.IsError || e.Status != http.StatusNotFound || e.Error == nil || e.Error.Code != api.CodeSnapshotNotFound {
		t.Errorf("failed revert step: %+v (error %+v)", e, e.Error)
	}
}
