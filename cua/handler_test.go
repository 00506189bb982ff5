package cua

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/gorilla/websocket"
)

// fakeDesk stands in for a *desk.Desk: it records the actions it is asked
// to play, tracks the pointer, and can hold a run until released.
type fakeDesk struct {
	mu    sync.Mutex
	runs  [][]actions.Action
	pos   actions.Point
	known bool // a pointer event was sent: pos is where the pointer is
	w, h  int
	hold  chan struct{} // non-nil: Run of input waits for it
	human bool
	clip  string // the guest's clipboard
	// cancelled counts runs that ended by their context while held.
	cancelled int
	shots     []desk.ScreenshotOptions
}

func (d *fakeDesk) Run(ctx context.Context, size player.ScreenshotSize, acts []actions.Action, opts player.RunOptions) (desk.RunResult, error) {
	var res desk.RunResult
	res.Screenshot.X, res.Screenshot.Y = d.w, d.h
	if size.Mode != player.SizeNative || opts.Screenshot != player.ScreenshotNever {
		return res, fmt.Errorf("fake: size %v, screenshot %q: Cua runs at native size without screenshots", size, opts.Screenshot)
	}
	if d.human {
		return res, &desk.HumanControlError{VM: "vm1", Since: time.Now()}
	}
	d.mu.Lock()
	hold := d.hold
	d.mu.Unlock()
	if hold != nil && len(acts) > 0 {
		select {
		case <-hold:
		case <-ctx.Done():
			d.mu.Lock()
			d.cancelled++
			d.mu.Unlock()
			return res, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(acts) == 0 {
		return res, nil
	}
	// Recorded once played in full (a refused run plays nothing here).
	defer func() {
		if res.Executed == len(acts) {
			d.runs = append(d.runs, acts)
		}
	}()
	for _, a := range acts {
		switch a := a.(type) {
		case actions.CursorPosition:
			if !d.known {
				return res, fmt.Errorf("actions[%d] (cursor_position): %w", res.Executed, actions.ErrPointerUnknown)
			}
			p := image.Point{X: d.pos.X, Y: d.pos.Y}
			res.Cursor = &p
		case actions.ClipboardGet:
			c := d.clip
			res.Clipboard = &c
		case actions.ClipboardSet:
			d.clip = a.Text
		case actions.Move:
			d.pos, d.known = a.To, true
		case actions.Click:
			switch {
			case a.At != nil:
				d.pos, d.known = *a.At, true
			case !d.known:
				return res, fmt.Errorf("actions[%d] (click): %w", res.Executed, actions.ErrPointerUnknown)
			}
		}
		res.Executed++
	}
	return res, nil
}

func (d *fakeDesk) Human() (time.Time, bool) {
	if d.human {
		return time.Now(), true
	}
	return time.Time{}, false
}

func (d *fakeDesk) Screenshot(ctx context.Context, o desk.ScreenshotOptions) ([]byte, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.shots = append(d.shots, o)
	return []byte("\x89PNG fake"), "image/png", nil
}

func (d *fakeDesk) played() [][]actions.Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.runs)
}

// hostGuest stands in for the guest agent. It checks every call goes
// through the session wrapper as the desktop user, then runs the wrapped
// program on the test host (as the test's own user, in a temporary "home"),
// so the file scripts are exercised for real with GNU find, dd and stat.
// Programs that need an X session (xdotool) are recorded and answered
// instead.
type hostGuest struct {
	t       *testing.T
	home    string
	mu      sync.Mutex
	guestUI [][]string
	// xdo answers xdotool subcommands (argv[1]) with stdout.
	xdo map[string]string
	// a11y answers the accessibility walk: nil is a guest without AT-SPI.
	a11y func(mode atspi.Mode) ([]byte, error)
}

func (g *hostGuest) A11y(_ context.Context, m atspi.Mode) ([]byte, error) {
	if g.a11y == nil {
		return nil, fmt.Errorf("accessibility cua of vm x: %w: no accessibility bus", atspi.ErrUnavailable)
	}
	return g.a11y(m)
}

func (g *hostGuest) Exec(ctx context.Context, req vmm.ExecRequest) (vmm.ExecResult, error) {
	c, ok := guestx.Unwrap(req)
	if !ok || c.Dir != g.home {
		g.t.Errorf("guest call not wrapped as the desktop user from its home: %q", req.Argv)
		return vmm.ExecResult{}, errors.New("fake: not wrapped")
	}
	argv := c.Argv
	switch {
	case argv[0] == "xdotool":
		g.mu.Lock()
		g.guestUI = append(g.guestUI, argv)
		g.mu.Unlock()
		return vmm.ExecResult{Stdout: []byte(g.xdo[argv[1]])}, nil
	}
	if req.Timeout <= 0 {
		g.t.Errorf("guest call without a timeout: %q", argv)
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = g.home
	cmd.WaitDelay = 100 * time.Millisecond // a killed sh's children may hold the pipes
	cmd.Stdin = bytes.NewReader(req.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return vmm.ExecResult{}, fmt.Errorf("exec %q: %w after %s (process killed)", argv[0], vmm.ErrTimeout, req.Timeout)
	}
	res := vmm.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return res, err
	}
	return res, nil
}

type rig struct {
	t     *testing.T
	desk  *fakeDesk
	guest *hostGuest
	srv   *httptest.Server
}

func newRig(t *testing.T) *rig {
	home := t.TempDir()
	d := &fakeDesk{w: 1280, h: 800}
	g := &hostGuest{t: t, home: home}
	h := NewHandler(Target{VM: "vm1", Runner: d, Screen: d, Guest: g}, Options{Home: home, Log: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &rig{t: t, desk: d, guest: g, srv: srv}
}

// clientRead reads a /cmd answer as Cua's client does
// (GenericComputerInterface._send_command_rest): strip the body, require
// the "data: " prefix, json.loads everything after its six bytes.
func clientRead(t *testing.T, body []byte) map[string]any {
	t.Helper()
	s := strings.TrimSpace(string(body))
	if !strings.HasPrefix(s, "data: ") {
		t.Fatalf("answer %q does not start with \"data: \": the client would retry on the websocket", body)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(s[6:]), &out); err != nil {
		t.Fatalf("client's json.loads of %q: %v", s[6:], err)
	}
	return out
}

// cmd posts one command and returns the decoded answer.
func (r *rig) cmd(command string, params any) map[string]any {
	r.t.Helper()
	status, body := r.post(command, params)
	if status != http.StatusOK {
		r.t.Fatalf("%s: HTTP %d %s", command, status, body)
	}
	return clientRead(r.t, body)
}

func (r *rig) post(command string, params any) (int, []byte) {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"command": command, "params": params})
	resp, err := http.Post(r.srv.URL+"/cmd", "application/json", bytes.NewReader(b))
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func (r *rig) ok(command string, params any) map[string]any {
	r.t.Helper()
	out := r.cmd(command, params)
	if out["success"] != true {
		r.t.Fatalf("%s %v: %v", command, params, out)
	}
	return out
}

func (r *rig) fails(command string, params any, wantErr string) map[string]any {
	r.t.Helper()
	out := r.cmd(command, params)
	if out["success"] != false || !strings.Contains(fmt.Sprint(out["error"]), wantErr) {
		r.t.Fatalf("%s %v: %v, want success false with an error containing %q", command, params, out, wantErr)
	}
	return out
}

// The REST frame is exactly one "data: {json}\n\n" on HTTP 200, as
// computer_server/main.py cmd_endpoint streams it.
func TestCmdFrame(t *testing.T) {
	r := newRig(t)
	resp, err := http.Post(r.srv.URL+"/cmd", "application/json", strings.NewReader(`{"command":"version","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("HTTP %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if want := `data: {"success":true,"protocol":1,"package":"deskfarm"}` + "\n\n"; string(body) != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	// Without params.
	resp, err = http.Post(r.srv.URL+"/cmd", "application/json", strings.NewReader(`{"command":"get_screen_size"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != `data: {"success":true,"size":{"width":1280,"height":800}}`+"\n\n" {
		t.Fatalf("get_screen_size: %q", body)
	}
}

// What Cua's server refuses before running a command is a FastAPI 400
// {"detail"}; the client then retries on the websocket.
func TestCmdRefusals(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct{ body, detail string }{
		{`{"command":"get_active_window_bounds"}`, "Unknown command: get_active_window_bounds. Did you mean:"},
		{`{"params":{}}`, "Command is required"},
		{`not json`, "Invalid JSON body"},
		{`{"command":"authenticate","params":{}}`, "Unknown command: authenticate"},
	} {
		resp, err := http.Post(r.srv.URL+"/cmd", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Detail string }
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.HasPrefix(out.Detail, c.detail) {
			t.Errorf("%s: HTTP %d %q, want 400 %q", c.body, resp.StatusCode, out.Detail, c.detail)
		}
	}
	resp, err := http.Get(r.srv.URL + "/cmd")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /cmd: %d", resp.StatusCode)
	}
}

func TestStatusAndRefusedRoutes(t *testing.T) {
	r := newRig(t)
	resp, err := http.Get(r.srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Status   string   `json:"status"`
		OSType   string   `json:"os_type"`
		Features []string `json:"features"`
	}
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.Status != "ok" || st.OSType != "linux" || st.Features == nil {
		t.Fatalf("status: %+v", st)
	}
	for _, p := range []string{"/pty", "/pty/12/stream", "/playwright_exec", "/responses"} {
		resp, err := http.Post(r.srv.URL+p, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusConflict || out["success"] != false || out["code"] != "unsupported" {
			t.Errorf("%s: %d %v", p, resp.StatusCode, out)
		}
	}
}

func TestInputCommands(t *testing.T) {
	r := newRig(t)
	r.ok("move_cursor", map[string]any{"x": 100, "y": 200})
	pos := r.ok("get_cursor_position", nil)["position"].(map[string]any)
	if pos["x"] != 100.0 || pos["y"] != 200.0 {
		t.Fatalf("cursor after move: %v", pos)
	}
	r.ok("left_click", map[string]any{"x": 10, "y": 20})
	r.ok("hotkey", map[string]any{"keys": []string{"ctrl", "c"}})
	r.ok("type_text", map[string]any{"text": "ls\n"})
	played := r.desk.played()
	want := [][]actions.Action{
		{actions.Move{To: actions.Point{X: 100, Y: 200}}},
		{actions.Click{At: pt(10, 20), Button: actions.ButtonLeft, Count: 1}},
		{actions.KeyPress{Keys: []actions.Key{key(t, "Control_L"), key(t, "c")}}},
		{actions.TypeText{Text: "ls\n"}},
	}
	// get_cursor_position plays a CursorPosition observation; drop it.
	var got [][]actions.Action
	for _, p := range played {
		if _, obs := p[0].(actions.CursorPosition); !obs {
			got = append(got, p)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("played\n%#v\nwant\n%#v", got, want)
	}
	r.fails("press_key", map[string]any{"key": "hyperdrive"}, "Unknown key: hyperdrive")

	// Input the display cannot carry is an action like any other: the desk
	// plays it through its guest input path. Nothing runs in the guest from
	// here.
	n := len(r.desk.played())
	r.ok("type_text", map[string]any{"text": "naïve ✓"})
	r.ok("scroll", map[string]any{"x": 2, "y": -3})
	want = [][]actions.Action{
		{actions.TypeText{Text: "naïve ✓"}},
		{actions.Scroll{Direction: actions.ScrollDown, Amount: 3}, actions.Scroll{Direction: actions.ScrollRight, Amount: 2}},
	}
	if got := r.desk.played()[n:]; !reflect.DeepEqual(got, want) {
		t.Fatalf("played\n%#v\nwant\n%#v", got, want)
	}
	if len(r.guest.guestUI) != 0 {
		t.Fatalf("the handler ran input in the guest itself: %q", r.guest.guestUI)
	}
	// While a person holds control, the desk refuses, and the answer
	// carries the code the actions route gives the same refusal.
	r.desk.human = true
	for _, c := range []struct {
		command string
		params  map[string]any
	}{
		{"left_click", map[string]any{"x": 1, "y": 1}},
		{"type_text", map[string]any{"text": "é"}},
		{"set_clipboard", map[string]any{"text": "x"}},
	} {
		if out := r.fails(c.command, c.params, "controlled"); out["code"] != api.CodeHumanControl {
			t.Errorf("%s while a person holds control: %v, want code %q", c.command, out, api.CodeHumanControl)
		}
	}
}

// type_text goes to the desk whole, in chunks of actions.MaxTextRunes
// characters (not bytes), whatever the script.
func TestTypeTextChunks(t *testing.T) {
	r := newRig(t)
	long := strings.Repeat("日", maxTextChunk) + "ü"
	r.ok("type_text", map[string]any{"text": long})
	want := [][]actions.Action{{actions.TypeText{Text: strings.Repeat("日", maxTextChunk)}, actions.TypeText{Text: "ü"}}}
	if got := r.desk.played(); !reflect.DeepEqual(got, want) {
		t.Fatalf("played %d runs, want one of two chunks", len(got))
	}
}

func TestScreenshot(t *testing.T) {
	r := newRig(t)
	out := r.ok("screenshot", nil)
	img, err := base64.StdEncoding.DecodeString(out["image_data"].(string))
	if err != nil || string(img) != "\x89PNG fake" || out["format"] != "png" {
		t.Fatalf("screenshot answer: %v (%v)", out, err)
	}
	r.ok("screenshot", map[string]any{"format": "jpeg", "quality": 50})
	o := r.desk.shots[1]
	if !o.Fresh || o.Size.Mode != player.SizeNative || o.Encode.Format != player.FormatJPEG || o.Encode.Quality != 50 {
		t.Fatalf("screenshot options: %+v", o)
	}
}

// The file commands, run for real on the host through the scripts the
// guest runs, answer with the fields Cua's client reads
// (computer/interface/generic.py: exists, files, content, content_b64, size).
func TestFileCommands(t *testing.T) {
	r := newRig(t)
	home := r.guest.home
	r.ok("write_text", map[string]any{"path": "notes.txt", "content": "héllo\n"})
	if b, err := os.ReadFile(filepath.Join(home, "notes.txt")); err != nil || string(b) != "héllo\n" {
		t.Fatalf("written file: %q %v", b, err)
	}
	if got := r.ok("read_text", map[string]any{"path": "~/notes.txt"})["content"]; got != "héllo\n" {
		t.Fatalf("read_text: %q", got)
	}
	if got := r.ok("get_file_size", map[string]any{"path": "notes.txt"})["size"]; got != 7.0 {
		t.Fatalf("get_file_size: %v", got)
	}
	if r.ok("file_exists", map[string]any{"path": "notes.txt"})["exists"] != true ||
		r.ok("file_exists", map[string]any{"path": "nope"})["exists"] != false ||
		r.ok("directory_exists", map[string]any{"path": "~"})["exists"] != true ||
		r.ok("directory_exists", map[string]any{"path": "notes.txt"})["exists"] != false {
		t.Fatal("exists answers wrong")
	}
	// Binary, appended in chunks as the client writes big files.
	blob := []byte{0, 1, 2, 0xff, '\n', 0}
	r.ok("write_bytes", map[string]any{"path": "d/../blob", "content_b64": base64.StdEncoding.EncodeToString(blob[:3])})
	r.ok("write_bytes", map[string]any{"path": "blob", "content_b64": base64.StdEncoding.EncodeToString(blob[3:]), "append": true})
	b64 := r.ok("read_bytes", map[string]any{"path": "blob", "offset": 0, "length": nil})["content_b64"].(string)
	if got, _ := base64.StdEncoding.DecodeString(b64); !bytes.Equal(got, blob) {
		t.Fatalf("read_bytes: %v", got)
	}
	b64 = r.ok("read_bytes", map[string]any{"path": "blob", "offset": 2, "length": 3})["content_b64"].(string)
	if got, _ := base64.StdEncoding.DecodeString(b64); !bytes.Equal(got, blob[2:5]) {
		t.Fatalf("read_bytes at 2 for 3: %v", got)
	}
	r.ok("create_dir", map[string]any{"path": "a/b"})
	files := r.ok("list_dir", map[string]any{"path": home})["files"].([]any)
	var names []string
	for _, f := range files {
		names = append(names, f.(string))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "blob", "notes.txt"}) {
		t.Fatalf("list_dir: %q", names)
	}
	// Failures are success false with the tool's message, so the client's
	// read_text raises instead of returning wrong content.
	r.fails("read_text", map[string]any{"path": "missing.txt"}, "No such file or directory")
	r.fails("read_bytes", map[string]any{"path": "missing.bin"}, "No such file or directory")
	r.fails("get_file_size", map[string]any{"path": "missing.bin"}, "No such file or directory")
	r.fails("list_dir", map[string]any{"path": "notes.txt"}, "Not a directory")
	r.fails("read_text", map[string]any{"path": "blob"}, "not UTF-8")
	r.fails("delete_dir", map[string]any{"path": "a"}, "not empty")
	r.ok("delete_dir", map[string]any{"path": "a/b"})
	r.ok("delete_dir", map[string]any{"path": "a"})
	r.ok("delete_file", map[string]any{"path": "blob"})
	r.fails("delete_file", map[string]any{"path": "blob"}, "No such file")
	if r.ok("list_dir", map[string]any{"path": "~"})["files"] == nil {
		t.Fatal("list_dir of a directory must answer a list")
	}
}

func TestRunCommand(t *testing.T) {
	r := newRig(t)
	out := r.ok("run_command", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if out["stdout"] != "out\n" || out["stderr"] != "err\n" || out["return_code"] != 3.0 {
		t.Fatalf("run_command: %v", out)
	}
	// In the user's home, like Cua's server started there.
	if out := r.ok("shell", map[string]any{"command": "pwd"}); out["stdout"] != r.guest.home+"\n" {
		t.Fatalf("cwd: %v", out)
	}
	// A timeout answers like base.py's run_command.
	out = r.cmd("run_command", map[string]any{"command": "sleep 5", "timeout": 0.2})
	if out["success"] != false || out["return_code"] != -1.0 || out["stdout"] != "" ||
		!strings.HasPrefix(out["stderr"].(string), "Command timed out after 0.2s") {
		t.Fatalf("timeout: %v", out)
	}
}

func TestClipboardAndUnsupported(t *testing.T) {
	r := newRig(t)
	// The clipboard is the desk's: clipboard_set and clipboard_get actions.
	r.ok("set_clipboard", map[string]any{"text": "Grüße"})
	if got := r.ok("copy_to_clipboard", nil)["content"]; got != "Grüße" {
		t.Fatalf("clipboard: %q", got)
	}
	want := [][]actions.Action{{actions.ClipboardSet{Text: "Grüße"}}, {actions.ClipboardGet{}}}
	if got := r.desk.played(); !reflect.DeepEqual(got, want) {
		t.Fatalf("played %#v", got)
	}
	out := r.cmd("find_element", nil)
	if out["success"] != false || out["code"] != "unsupported" || !strings.Contains(out["error"].(string), "find_element") {
		t.Fatalf("unsupported: %v", out)
	}
}

// get_accessibility_tree runs the AT-SPI reader OSWorld's /accessibility
// runs (package atspi) in Cua's mode and answers its tree; an image without
// AT-SPI answers unsupported, as before; a reader that fails says why.
func TestAccessibilityTree(t *testing.T) {
	r := newRig(t)
	out := r.cmd("get_accessibility_tree", nil)
	if out["success"] != false || out["code"] != "unsupported" || !strings.Contains(out["error"].(string), "AT-SPI") {
		t.Fatalf("without AT-SPI: %v", out)
	}
	r.guest.a11y = func(mode atspi.Mode) ([]byte, error) {
		if mode != atspi.ModeCua {
			return nil, fmt.Errorf("wrong mode %s", mode)
		}
		return []byte(`{"role": "desktop frame", "title": "", "children": [{"role": "application", "title": "gnome-terminal-server", "children": []}]}`), nil
	}
	tree := r.ok("get_accessibility_tree", nil)["tree"].(map[string]any)
	if tree["role"] != "desktop frame" || tree["children"].([]any)[0].(map[string]any)["title"] != "gnome-terminal-server" {
		t.Fatalf("tree %v", tree)
	}
	r.guest.a11y = func(atspi.Mode) ([]byte, error) {
		return nil, fmt.Errorf("accessibility cua of vm x: %w", errors.New("the relay in the guest exited 1: OSError: [Errno 9] Bad file descriptor"))
	}
	r.fails("get_accessibility_tree", nil, "Bad file descriptor")
}

func wsDial(t *testing.T, r *rig) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(r.srv.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The websocket answers every request with the bare object, in order, and
// answers pings while a command runs.
func TestWebsocketOrderAndPings(t *testing.T) {
	r := newRig(t)
	r.desk.hold = make(chan struct{})
	c := wsDial(t, r)
	reqs := []string{
		`{"command":"authenticate","params":{"api_key":"k","container_name":"c"}}`,
		`{"command":"left_click","params":{"x":1,"y":2}}`, // held by the desk
		`{"command":"version","params":{}}`,
		`{"command":"nope"}`,
		`not json`,
		`{"command":"get_cursor_position","params":{}}`,
	}
	for _, q := range reqs {
		if err := c.WriteMessage(websocket.TextMessage, []byte(q)); err != nil {
			t.Fatal(err)
		}
	}
	pong := make(chan struct{}, 1)
	c.SetPongHandler(func(string) error { pong <- struct{}{}; return nil })
	if err := c.WriteControl(websocket.PingMessage, []byte("p"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Control frames are seen by the reader: read in the background.
	answers := make(chan map[string]any, len(reqs))
	go func() {
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				close(answers)
				return
			}
			var m map[string]any
			if err := json.Unmarshal(msg, &m); err != nil {
				t.Errorf("answer %q is not a JSON object: %v", msg, err)
			}
			answers <- m
		}
	}()
	first := <-answers
	if first["message"] != "Authentication successful" {
		t.Fatalf("authenticate: %v", first)
	}
	select {
	case <-pong:
	case <-time.After(5 * time.Second):
		t.Fatal("no pong while a command runs")
	}
	select {
	case a := <-answers:
		t.Fatalf("answer %v overtook the held click", a)
	case <-time.After(50 * time.Millisecond):
	}
	close(r.desk.hold)
	var got []map[string]any
	for range reqs[1:] {
		got = append(got, <-answers)
	}
	if got[0]["success"] != true || len(got[0]) != 1 {
		t.Errorf("click: %v", got[0])
	}
	if got[1]["protocol"] != 1.0 {
		t.Errorf("version: %v", got[1])
	}
	if got[2]["success"] != false || !strings.HasPrefix(got[2]["error"].(string), "Unknown command: nope") {
		t.Errorf("unknown: %v", got[2])
	}
	if got[3]["success"] != false || !strings.HasPrefix(got[3]["error"].(string), "Invalid JSON") {
		t.Errorf("bad json: %v", got[3])
	}
	if p := got[4]["position"].(map[string]any); p["x"] != 1.0 || p["y"] != 2.0 {
		t.Errorf("cursor after the click: %v", got[4])
	}
}

// A closed websocket cancels the command running for it.
func TestWebsocketCloseCancels(t *testing.T) {
	r := newRig(t)
	r.desk.hold = make(chan struct{})
	c := wsDial(t, r)
	c.WriteMessage(websocket.TextMessage, []byte(`{"command":"left_click","params":{"x":1,"y":2}}`))
	time.Sleep(50 * time.Millisecond)
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.desk.mu.Lock()
		n, played := r.desk.cancelled, len(r.desk.runs)
		r.desk.mu.Unlock()
		if played != 0 {
			t.Fatal("the click ran after its client left")
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the click still waits after its client left")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOriginCheck(t *testing.T) {
	r := newRig(t)
	h := http.Header{"Origin": {"http://evil.example"}}
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(r.srv.URL, "http")+"/ws", h)
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin websocket: %v %v", resp, err)
	}
}

func TestEncode(t *testing.T) {
	for _, c := range []struct {
		fields any
		err    error
		want   string
	}{
		{struct{}{}, nil, `{"success":true}`},
		{existsReply{Exists: false}, nil, `{"success":true,"exists":false}`},
		{nil, errors.New(`bad "x" <y>`), `{"success":false,"error":"bad \"x\" <y>"}`},
		{commandTimeoutReply{Stderr: "Command timed out after 1s", ReturnCode: -1}, nil,
			`{"success":false,"stdout":"","stderr":"Command timed out after 1s","return_code":-1}`},
	} {
		if got := string(encode(c.fields, c.err)); got != c.want {
			t.Errorf("encode(%#v, %v) = %s, want %s", c.fields, c.err, got, c.want)
		}
	}
}

// The file scripts are valid sh.
func TestScriptsParse(t *testing.T) {
	for name, s := range map[string]string{"list_dir": listDirScript,
		"read_bytes": readBytesScript, "launch": launchScript} {
		if out, err := exec.Command("sh", "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("%s script: %v %s", name, err, out)
		}
	}
}

func TestWindowCommands(t *testing.T) {
	r := newRig(t)
	// Shaped by hand after xdotool 3.20160805's output formats
	// (cmd_getwindowgeometry.c --shell, cmd_search.c one id per line).
	r.guest.xdo = map[string]string{
		"getactivewindow":   "4194311\n",
		"search":            "4194311\n6291460\n",
		"getwindowname":     "user@deskfarm: ~\n",
		"getwindowgeometry": "WINDOW=4194311\nX=120\nY=80\nWIDTH=660\nHEIGHT=434\nSCREEN=0\n",
	}
	if got := r.ok("get_current_window_id", nil)["window_id"]; got != 4194311.0 {
		t.Fatalf("window_id %v", got)
	}
	if got := fmt.Sprint(r.ok("get_application_windows", map[string]any{"app": "a.b"})["windows"]); got != "[4.194311e+06 6.29146e+06]" {
		t.Fatalf("windows %v", got)
	}
	if got := r.ok("get_window_name", map[string]any{"window_id": 4194311})["name"]; got != "user@deskfarm: ~" {
		t.Fatalf("name %q", got)
	}
	if got := r.ok("get_window_size", map[string]any{"window_id": 4194311}); got["width"] != 660.0 || got["height"] != 434.0 {
		t.Fatalf("size %v", got)
	}
	if got := r.ok("get_window_position", map[string]any{"window_id": 4194311}); got["x"] != 120.0 || got["y"] != 80.0 {
		t.Fatalf("position %v", got)
	}
	r.ok("set_window_size", map[string]any{"window_id": 4194311, "width": 800, "height": 600})
	r.ok("activate_window", map[string]any{"window_id": "4194311"})
	want := [][]string{
		{"xdotool", "getactivewindow"},
		{"xdotool", "search", "--name", `a\.b`},
		{"xdotool", "getwindowname", "4194311"},
		{"xdotool", "getwindowgeometry", "--shell", "4194311"},
		{"xdotool", "getwindowgeometry", "--shell", "4194311"},
		{"xdotool", "windowsize", "4194311", "800", "600"},
		{"xdotool", "windowactivate", "4194311"},
	}
	if !reflect.DeepEqual(r.guest.guestUI, want) {
		t.Fatalf("xdotool calls\n%q\nwant\n%q", r.guest.guestUI, want)
	}
	if out := r.cmd("maximize_window", map[string]any{"window_id": 1}); out["code"] != "unsupported" {
		t.Fatalf("maximize_window: %v", out)
	}
	// The window commands that change the desktop are refused while a person
	// holds control, as actions are; those that only look are not.
	r.desk.human = true
	if out := r.fails("activate_window", map[string]any{"window_id": 1}, "controlled"); out["code"] != api.CodeHumanControl {
		t.Fatalf("activate_window while a person holds control: %v", out)
	}
	r.ok("get_window_name", map[string]any{"window_id": 4194311})
	if len(r.guest.guestUI) != len(want)+1 {
		t.Fatalf("xdotool calls while a person holds control: %q", r.guest.guestUI[len(want):])
	}
}
