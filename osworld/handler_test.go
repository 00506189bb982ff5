package osworld

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/atspi"
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vnc"
)

// fakeGuest is a guest whose programs are Go functions keyed by the
// program name (for /bin/sh -c scripts: by the script's $0 name).
type fakeGuest struct {
	mu    sync.Mutex
	runs  [][]string
	progs map[string]func(c Cmd) (Result, error)
	files map[string][]byte
	img   *image.RGBA
	dmg   chan vnc.Damage
}

func newFakeGuest() *fakeGuest {
	img := image.NewRGBA(image.Rect(0, 0, 64, 48))
	return &fakeGuest{progs: map[string]func(Cmd) (Result, error){}, files: map[string][]byte{}, img: img, dmg: make(chan vnc.Damage, 16)}
}

// key is what a command is known by: the program, or the name a script
// is given as $0 (sh -c SCRIPT NAME ARGS...).
func key(argv []string) string {
	if len(argv) >= 4 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		return argv[3]
	}
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		switch argv[2] {
		case windowsScript:
			return "windows"
		case wallpaperScript:
			return "wallpaper_get"
		}
		return "sh"
	}
	return argv[0]
}

func (g *fakeGuest) Run(_ context.Context, c Cmd) (Result, error) {
	g.mu.Lock()
	g.runs = append(g.runs, c.Argv)
	fn := g.progs[key(c.Argv)]
	g.mu.Unlock()
	if fn == nil {
		return Result{}, fmt.Errorf("run %s: %w", c.Argv[0], ErrNotRun)
	}
	return fn(c)
}

func (g *fakeGuest) ReadFile(_ context.Context, p string) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.files[p]
	if !ok {
		return nil, errors.New("no such file")
	}
	return b, nil
}

func (g *fakeGuest) WriteFile(_ context.Context, p string, data []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.files[p] = append([]byte(nil), data...)
	return nil
}

func (g *fakeGuest) Screenshot(context.Context) ([]byte, error) {
	var b bytes.Buffer
	err := pngEncode(&b, g.img)
	return b.Bytes(), err
}

func (g *fakeGuest) Frames(context.Context) (Frames, error) { return g, nil }

// A11y answers each mode's shape, as atspi renders it.
func (g *fakeGuest) A11y(_ context.Context, m atspi.Mode) ([]byte, error) {
	switch m {
	case atspi.ModeTerminal:
		return atspi.TerminalJSON(nil), nil
	case atspi.ModeOSWorld:
		return atspi.XML(&atspi.Node{Role: "desktop frame"}), nil
	}
	return nil, fmt.Errorf("mode %s", m)
}
func (g *fakeGuest) Snapshot() *image.RGBA {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := image.NewRGBA(g.img.Bounds())
	copy(out.Pix, g.img.Pix)
	return out
}
func (g *fakeGuest) Damage() (<-chan vnc.Damage, func()) { return g.dmg, func() {} }

func (g *fakeGuest) on(name string, fn func(c Cmd) (Result, error)) { g.progs[name] = fn }

func exit(code int, out, errOut string) func(Cmd) (Result, error) {
	return func(Cmd) (Result, error) {
		return Result{ExitCode: code, Stdout: []byte(out), Stderr: []byte(errOut)}, nil
	}
}

// existing makes the existence check answer for paths.
func (g *fakeGuest) existing(paths ...string) {
	g.on("exists", func(c Cmd) (Result, error) {
		p := c.Argv[len(c.Argv)-1]
		for _, q := range paths {
			if p == q {
				return Result{}, nil
			}
		}
		return Result{ExitCode: 3}, nil
	})
}

func do(t *testing.T, h http.Handler, method, target, ctype string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func postJSON(t *testing.T, h http.Handler, target, body string) *httptest.ResponseRecorder {
	return do(t, h, "POST", target, "application/json", []byte(body))
}

func postForm(t *testing.T, h http.Handler, target string, v url.Values) *httptest.ResponseRecorder {
	return do(t, h, "POST", target, "application/x-www-form-urlencoded", []byte(v.Encode()))
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	return v
}

func TestExecuteShapes(t *testing.T) {
	g := newFakeGuest()
	var got []string
	g.on("python", func(c Cmd) (Result, error) {
		got = c.Argv
		return Result{ExitCode: 1, Stdout: []byte("out"), Stderr: []byte("Traceback: boom\n")}, nil
	})
	h := NewHandler(g, Options{})
	for _, path := range []string{"/execute", "/setup/execute"} {
		rec := postJSON(t, h, path, `{"command": ["python", "-c", "import sys; sys.exit(1)"], "shell": false}`)
		if rec.Code != 200 {
			t.Fatalf("%s: status %d, want 200 for a command that ran and failed", path, rec.Code)
		}
		v := decode[map[string]any](t, rec)
		want := map[string]any{"status": "success", "output": "out", "error": "Traceback: boom\n", "returncode": float64(1)}
		for k, w := range want {
			if v[k] != w {
				t.Errorf("%s: %s = %v, want %v", path, k, v[k], w)
			}
		}
	}
	if strings.Join(got, "|") != "python|-c|import sys; sys.exit(1)" {
		t.Errorf("argv %q", got)
	}
}

func TestExecuteStringTildeAndShell(t *testing.T) {
	g := newFakeGuest()
	var argv [][]string
	rec := func(c Cmd) (Result, error) { argv = append(argv, c.Argv); return Result{}, nil }
	g.on("ls", rec)
	g.on("sh", rec)
	g.on("launch", rec)
	h := NewHandler(g, Options{})
	postJSON(t, h, "/execute", `{"command": "ls -l '~/My Documents' ~/x", "shell": false}`)
	postJSON(t, h, "/execute", `{"command": "echo ~/a | wc -c", "shell": true}`)
	postJSON(t, h, "/execute", `{"command": ["ls", "~/a", "x~/b"]}`)
	want := []string{
		"ls|-l|~/My Documents|/home/user/x", // quoted: shlex keeps the ~, then "~/" expands... see below
		"/bin/sh|-c|echo ~/a | wc -c",
		"ls|/home/user/a|x~/b",
	}
	// shlex.split removes the quotes, so the quoted word also starts with
	// "~/" and OSWorld's server expands it.
	want[0] = "ls|-l|/home/user/My Documents|/home/user/x"
	for i, w := range want {
		if i >= len(argv) || strings.Join(argv[i], "|") != w {
			t.Errorf("command %d: argv %q, want %q", i, argv, w)
		}
	}
}

func TestExecuteCouldNotRun(t *testing.T) {
	g := newFakeGuest() // no programs: every Run is ErrNotRun
	h := NewHandler(g, Options{})
	rec := postJSON(t, h, "/execute", `{"command": ["no-such-program"]}`)
	if rec.Code != 500 {
		t.Fatalf("status %d, want 500 for a program that could not start", rec.Code)
	}
	if v := decode[map[string]string](t, rec); v["status"] != "error" || v["message"] == "" {
		t.Errorf("body %v", v)
	}
	g.on("sleep", func(Cmd) (Result, error) { return Result{}, fmt.Errorf("exec: %w", vmm.ErrTimeout) })
	if rec := postJSON(t, h, "/execute", `{"command": "sleep 200", "timeout": 1}`); rec.Code != 500 {
		t.Errorf("timeout: status %d, want 500", rec.Code)
	}
}

func TestExecuteTimeoutField(t *testing.T) {
	g := newFakeGuest()
	var got time.Duration
	g.on("true", func(c Cmd) (Result, error) { got = c.Timeout; return Result{}, nil })
	h := NewHandler(g, Options{})
	postJSON(t, h, "/execute", `{"command": ["true"]}`)
	if got != DefaultExecTimeout {
		t.Errorf("default timeout %v", got)
	}
	postJSON(t, h, "/execute", `{"command": ["true"], "timeout": 2.5}`)
	if got != 2500*time.Millisecond {
		t.Errorf("timeout %v, want 2.5s", got)
	}
}

func multipartBody(t *testing.T, fields map[string]string, file []byte) (string, []byte) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for k, v := range fields {
		mw.WriteField(k, v)
	}
	if file != nil {
		fw, _ := mw.CreateFormFile("file_data", "data.bin")
		fw.Write(file)
	}
	mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

func TestUploadAndFile(t *testing.T) {
	g := newFakeGuest()
	h := NewHandler(g, Options{})
	data := []byte("\x00\x01binary\xff")
	ct, body := multipartBody(t, map[string]string{"file_path": "~/Desktop/a b.bin"}, data)
	rec := do(t, h, "POST", "/setup/upload", ct, body)
	if rec.Code != 200 || rec.Body.String() != fmt.Sprintf("File Uploaded: %d bytes", len(data)) {
		t.Fatalf("upload: %d %q", rec.Code, rec.Body)
	}
	if !bytes.Equal(g.files["/home/user/Desktop/a b.bin"], data) {
		t.Fatalf("guest files %v", g.files)
	}
	ct, body = multipartBody(t, map[string]string{"file_path": "/x"}, nil)
	if rec := do(t, h, "POST", "/setup/upload", ct, body); rec.Code != 400 {
		t.Errorf("upload without file_data: %d", rec.Code)
	}

	g.existing("/home/user/Desktop/a b.bin")
	rec = postForm(t, h, "/file", url.Values{"file_path": {"$HOME/Desktop/a b.bin"}})
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), data) {
		t.Fatalf("file: %d %q", rec.Code, rec.Body)
	}
	if cd := rec.Header().Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") {
		t.Errorf("Content-Disposition %q", cd)
	}
	if rec := postForm(t, h, "/file", url.Values{"file_path": {"/nope"}}); rec.Code != 404 || decode[map[string]string](t, rec)["error"] != "File not found" {
		t.Errorf("missing file: %d %q", rec.Code, rec.Body)
	}
	if rec := postForm(t, h, "/file", url.Values{}); rec.Code != 400 {
		t.Errorf("no file_path: %d", rec.Code)
	}
	// OSWorld's client sends /file as a multipart form too.
	ct, body = multipartBody(t, map[string]string{"file_path": "/home/user/Desktop/a b.bin"}, nil)
	if rec := do(t, h, "POST", "/file", ct, body); rec.Code != 200 {
		t.Errorf("multipart /file: %d", rec.Code)
	}
}

func TestLaunch(t *testing.T) {
	g := newFakeGuest()
	g.existing()
	g.on("exists", func(c Cmd) (Result, error) {
		if c.Argv[len(c.Argv)-1] == "google-chrome" {
			return Result{ExitCode: 4}, nil
		}
		return Result{ExitCode: 3}, nil
	})
	var launched []string
	g.on("launch", func(c Cmd) (Result, error) { launched = c.Argv[4:]; return Result{}, nil })
	h := NewHandler(g, Options{})
	rec := postJSON(t, h, "/setup/launch", `{"command": ["google-chrome", "--remote-debugging-port=1337"]}`)
	if rec.Code != 200 || rec.Body.String() != "google-chrome --remote-debugging-port=1337 launched successfully" {
		t.Fatalf("launch: %d %q", rec.Code, rec.Body)
	}
	if strings.Join(launched, " ") != "google-chrome --remote-debugging-port=1337" {
		t.Errorf("launched %q", launched)
	}
	if rec := postJSON(t, h, "/setup/launch", `{"command": "socat tcp-listen:9222,fork tcp:localhost:1337", "shell": true}`); rec.Code != 200 ||
		rec.Body.String() != "socat tcp-listen:9222,fork tcp:localhost:1337 launched successfully" {
		t.Errorf("shell launch: %d %q", rec.Code, rec.Body)
	}
	if rec := postJSON(t, h, "/setup/launch", `{"command": ["no-such-app"]}`); rec.Code != 500 {
		t.Errorf("missing program: %d, want 500", rec.Code)
	}
}

func TestOpenFileWaitsForWindow(t *testing.T) {
	g := newFakeGuest()
	g.existing("/home/user/report.docx")
	opened := ""
	g.on("open", func(c Cmd) (Result, error) { opened = c.Argv[len(c.Argv)-1]; return Result{}, nil })
	polls := 0
	g.on("windows", func(Cmd) (Result, error) {
		polls++
		if polls < 3 {
			return Result{Stdout: []byte("wmctrl\n0x01a00003  0 deskfarm Desktop\n")}, nil
		}
		return Result{Stdout: []byte("wmctrl\n0x01a00003  0 deskfarm Desktop\n0x02400006  0 deskfarm report - LibreOffice Writer\n")}, nil
	})
	var activated string
	g.on("activate", func(c Cmd) (Result, error) { activated = c.Argv[len(c.Argv)-1]; return Result{}, nil })
	h := NewHandler(g, Options{})
	rec := postJSON(t, h, "/setup/open_file", `{"path": "~/report.docx"}`)
	if rec.Code != 200 {
		t.Fatalf("open_file: %d %q", rec.Code, rec.Body)
	}
	if opened != "/home/user/report.docx" || polls < 3 || activated != "0x02400006" {
		t.Errorf("opened %q after %d polls, activated %q", opened, polls, activated)
	}
	if rec := postJSON(t, h, "/setup/open_file", `{"path": "/nope.xlsx"}`); rec.Code != 404 {
		t.Errorf("missing file: %d", rec.Code)
	}
	if rec := postJSON(t, h, "/setup/open_file", `{}`); rec.Code != 400 {
		t.Errorf("no path: %d", rec.Code)
	}
}

func TestOpenFileTimesOut(t *testing.T) {
	g := newFakeGuest()
	g.existing("/home/user/a.pdf")
	g.on("open", exit(0, "", ""))
	g.on("windows", exit(0, "xdotool\n123\tDesktop\n", ""))
	h := NewHandler(g, Options{OpenTimeout: 1500 * time.Millisecond})
	if rec := postJSON(t, h, "/setup/open_file", `{"path": "/home/user/a.pdf"}`); rec.Code != 500 {
		t.Errorf("no window: %d, want 500", rec.Code)
	}
}

func TestWindowActionsAlways200(t *testing.T) {
	g := newFakeGuest()
	var args [][]string
	for _, op := range []string{"activate_window", "close_window"} {
		g.on(op, func(c Cmd) (Result, error) { args = append(args, c.Argv[4:]); return Result{ExitCode: 1}, nil })
	}
	h := NewHandler(g, Options{})
	for _, tc := range []struct{ path, body, want string }{
		{"/setup/activate_window", `{"window_name": "Writer"}`, "a||Writer|Writer"},
		{"/setup/activate_window", `{"window_name": "gnome-terminal", "by_class": true, "strict": true}`, "a|xF|gnome-terminal|^gnome-terminal$"},
		{"/setup/close_window", `{"window_name": "a.b"}`, `c||a.b|a\.b`},
	} {
		args = nil
		rec := postJSON(t, h, tc.path, tc.body)
		if rec.Code != 200 {
			t.Errorf("%s %s: %d, want 200 even when nothing matched", tc.path, tc.body, rec.Code)
		}
		if len(args) != 1 || strings.Join(args[0], "|") != tc.want {
			t.Errorf("%s %s: args %q, want %q", tc.path, tc.body, args, tc.want)
		}
	}
	if rec := postJSON(t, h, "/setup/close_window", `{}`); rec.Code != 400 {
		t.Errorf("close without name: %d", rec.Code)
	}
}

func TestWindowSize(t *testing.T) {
	g := newFakeGuest()
	g.on("window_size", func(c Cmd) (Result, error) {
		if c.Argv[len(c.Argv)-2] == "gimp" && c.Argv[len(c.Argv)-1] == "^gimp$" {
			return Result{Stdout: []byte("WINDOW=4194310\nX=0\nY=0\nWIDTH=800\nHEIGHT=600\nSCREEN=0\n")}, nil
		}
		return Result{ExitCode: 3}, nil
	})
	h := NewHandler(g, Options{})
	rec := postForm(t, h, "/window_size", url.Values{"app_class_name": {"gimp"}})
	if v := decode[map[string]int](t, rec); rec.Code != 200 || v["width"] != 800 || v["height"] != 600 {
		t.Errorf("gimp: %d %v", rec.Code, v)
	}
	if rec := postForm(t, h, "/window_size", url.Values{"app_class_name": {"vlc"}}); rec.Code != 500 {
		t.Errorf("no window: %d, want 500 as OSWorld", rec.Code)
	}
	if rec := postForm(t, h, "/window_size", nil); rec.Code != 400 {
		t.Errorf("no name: %d", rec.Code)
	}
}

func TestSmallRoutes(t *testing.T) {
	g := newFakeGuest()
	g.on("xdotool", exit(0, "X=10\nY=20\nSCREEN=0\nWINDOW=1\n", ""))
	g.on("test", exit(1, "", ""))
	g.on("python3", func(c Cmd) (Result, error) {
		switch {
		case c.Argv[2] == "/home/user":
			return Result{Stdout: []byte(`{"type": "directory", "name": "user", "children": [{"type": "file", "name": "a"}]}`)}, nil
		}
		return Result{ExitCode: 3}, nil
	})
	g.on("wallpaper_get", exit(3, "", ""))
	h := NewHandler(g, Options{})

	if rec := do(t, h, "GET", "/cursor_position", "", nil); rec.Code != 200 || strings.TrimSpace(rec.Body.String()) != "[10,20]" {
		t.Errorf("cursor_position: %d %q", rec.Code, rec.Body)
	}
	if rec := do(t, h, "POST", "/desktop_path", "", nil); rec.Code != 404 {
		t.Errorf("desktop_path without ~/Desktop: %d", rec.Code)
	}
	rec := do(t, h, "GET", "/terminal", "", nil)
	if v := decode[map[string]any](t, rec); rec.Code != 200 || v["output"] != nil || v["status"] != "success" || len(v) != 2 {
		t.Errorf("terminal: %d %q", rec.Code, rec.Body)
	}
	rec = do(t, h, "GET", "/accessibility", "", nil)
	if v := decode[map[string]string](t, rec); rec.Code != 200 || !strings.HasPrefix(v["AT"], "<desktop-frame") {
		t.Errorf("accessibility: %d %q", rec.Code, rec.Body)
	}
	rec = postJSON(t, h, "/list_directory", `{"path": "/home/user"}`)
	if v := decode[map[string]map[string]any](t, rec); rec.Code != 200 || v["directory_tree"]["name"] != "user" {
		t.Errorf("list_directory: %d %q", rec.Code, rec.Body)
	}
	if rec := postJSON(t, h, "/list_directory", `{"path": "/etc/passwd"}`); rec.Code != 400 {
		t.Errorf("list_directory of a file: %d", rec.Code)
	}
	if rec := postJSON(t, h, "/list_directory", `{}`); rec.Code != 400 {
		t.Errorf("list_directory without path: %d", rec.Code)
	}
	if rec := do(t, h, "POST", "/wallpaper", "", nil); rec.Code != 404 {
		t.Errorf("wallpaper: %d", rec.Code)
	}
	if rec := do(t, h, "GET", "/platform", "", nil); rec.Body.String() != "Linux" {
		t.Errorf("platform %q", rec.Body)
	}
	rec = do(t, h, "POST", "/screen_size", "", nil)
	if v := decode[map[string]int](t, rec); v["width"] != 64 || v["height"] != 48 {
		t.Errorf("screen_size %v", v)
	}
	rec = do(t, h, "GET", "/screenshot", "", nil)
	if w, ht, err := pngSize(rec.Body.Bytes()); err != nil || w != 64 || ht != 48 || rec.Header().Get("Content-Type") != "image/png" {
		t.Errorf("screenshot: %dx%d %v %q", w, ht, err, rec.Header().Get("Content-Type"))
	}
	if rec := do(t, h, "POST", "/screenshot", "", nil); rec.Code != 405 {
		t.Errorf("POST /screenshot: %d, want 405 as Flask", rec.Code)
	}
}

func TestRunPythonAndBash(t *testing.T) {
	g := newFakeGuest()
	g.on("/usr/bin/python3", exit(2, "", ""))
	g.on("rm", exit(0, "", ""))
	g.on("test", exit(0, "", ""))
	var bashDir string
	g.on("/bin/bash", func(c Cmd) (Result, error) {
		bashDir = c.Dir
		if !c.MergeStderr {
			t.Error("bash script without stderr merged")
		}
		return Result{ExitCode: 0, Stdout: []byte("hi\n")}, nil
	})
	h := NewHandler(g, Options{})
	rec := postJSON(t, h, "/run_python", `{"code": "import sys; sys.exit(2)"}`)
	v := decode[map[string]any](t, rec)
	if rec.Code != 200 || v["status"] != "error" || v["return_code"] != float64(2) || v["error"] != "Process exited with code 2" || v["need_more"] != false {
		t.Errorf("run_python: %d %v", rec.Code, v)
	}
	if rec := postJSON(t, h, "/run_python", `{}`); rec.Code != 400 {
		t.Errorf("run_python without code: %d", rec.Code)
	}
	rec = postJSON(t, h, "/run_bash_script", `{"script": "echo hi", "working_dir": "~/w"}`)
	b := decode[map[string]any](t, rec)
	if rec.Code != 200 || b["status"] != "success" || b["output"] != "hi\n" || b["error"] != "" || b["returncode"] != float64(0) || bashDir != "/home/user/w" {
		t.Errorf("run_bash_script: %d %v dir %q", rec.Code, b, bashDir)
	}
	var script []byte
	for p, d := range g.files {
		if strings.HasSuffix(p, ".sh") {
			script = d
		}
	}
	if !bytes.HasPrefix(script, []byte("#!/bin/bash\n\necho hi")) {
		t.Errorf("script %q", script)
	}
	g.on("test", exit(1, "", ""))
	if rec := postJSON(t, h, "/run_bash_script", `{"script": "true", "working_dir": "/nope"}`); rec.Code != 400 {
		t.Errorf("bad working_dir: %d", rec.Code)
	}
}

func TestRecordingStates(t *testing.T) {
	g := newFakeGuest()
	h := NewHandler(g, Options{Recorder: &FFmpeg{Path: "/nonexistent/ffmpeg"}})
	if rec := do(t, h, "POST", "/end_recording", "", nil); rec.Code != 400 {
		t.Errorf("end without start: %d", rec.Code)
	}
	if rec := do(t, h, "POST", "/start_recording", "", nil); rec.Code != 500 {
		t.Errorf("start without ffmpeg: %d", rec.Code)
	}
}

func TestRecordingIsPlayableMP4(t *testing.T) {
	if _, err := exec.LookPath("ffprobe"); err != nil {
		t.Skip("no ffmpeg/ffprobe on this host (scripts/setup-host.sh installs them)")
	}
	g := newFakeGuest()
	g.img = image.NewRGBA(image.Rect(0, 0, 321, 241)) // odd sides: padded
	h := NewHandler(g, Options{Recorder: &FFmpeg{}})
	if rec := do(t, h, "POST", "/start_recording", "", nil); rec.Code != 200 {
		t.Fatalf("start: %d %q", rec.Code, rec.Body)
	}
	if rec := do(t, h, "POST", "/start_recording", "", nil); rec.Code != 400 {
		t.Errorf("second start: %d, want 400", rec.Code)
	}
	for i := range 4 {
		time.Sleep(500 * time.Millisecond)
		g.mu.Lock()
		for y := range 241 {
			g.img.Set(i*50, y, color.RGBA{255, 0, 0, 255})
		}
		g.mu.Unlock()
		g.dmg <- vnc.Damage{Rect: image.Rect(i*50, 0, i*50+1, 241)}
	}
	rec := do(t, h, "POST", "/end_recording", "", nil)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "video/mp4" {
		t.Fatalf("end: %d %q", rec.Code, rec.Header())
	}
	dur := probeDuration(t, rec.Body.Bytes())
	if dur < 1.6 || dur > 2.8 {
		t.Errorf("duration %.2fs, want about 2 s", dur)
	}
}

// probeDuration is ffprobe's duration of an mp4, and fails the test when
// ffprobe cannot read it.
func probeDuration(t *testing.T, mp4 []byte) float64 {
	t.Helper()
	cmd := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration:stream=codec_name,width,height", "-of", "json", "-i", "pipe:0")
	cmd.Stdin = bytes.NewReader(mp4)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var v struct {
		Streams []struct {
			Codec string `json:"codec_name"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v.Streams) != 1 || v.Streams[0].Codec != "h264" {
		t.Fatalf("ffprobe output %s: %v", out, err)
	}
	var d float64
	fmt.Sscan(v.Format.Duration, &d)
	return d
}

var _ io.Writer = (*bytes.Buffer)(nil)
