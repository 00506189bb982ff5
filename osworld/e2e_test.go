package osworld_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/osworld"
	"github.com/deskfarm/deskfarm/vmm"
)

// osw is an OSWorld client of one VM's handler, as PythonController and
// SetupController call it.
type osw struct {
	t   *testing.T
	url string
}

func (c osw) do(method, path, ctype string, body []byte) (int, []byte) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (c osw) json(path string, v any) (int, []byte) {
	c.t.Helper()
	b, _ := json.Marshal(v)
	return c.do("POST", path, "application/json", b)
}

type execOut struct {
	Status     string `json:"status"`
	Output     string `json:"output"`
	Error      string `json:"error"`
	ReturnCode int    `json:"returncode"`
}

// exec runs a command through /execute and wants a 200.
func (c osw) exec(argv ...string) execOut {
	c.t.Helper()
	code, b := c.json("/execute", map[string]any{"command": argv, "shell": false})
	if code != 200 {
		c.t.Fatalf("/execute %q: %d %s", argv, code, b)
	}
	var out execOut
	if err := json.Unmarshal(b, &out); err != nil {
		c.t.Fatalf("/execute %q: %s: %v", argv, b, err)
	}
	return out
}

// until polls cond every 300 ms for up to d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func serveVM(t *testing.T, m *vmm.Manager, pool *desk.Pool, vm vmm.VM) osw {
	h := osworld.NewHandler(&osworld.VMGuest{Farm: m, Desks: pool, VM: vm.ID}, osworld.Options{VM: vm.ID, OpenTimeout: 3 * time.Minute})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return osw{t: t, url: srv.URL}
}

// The routes on the desktop image (no wmctrl, no pyatspi: xdotool and the
// fallbacks), each checked by its effect in the guest.
func TestE2EDesktopRoutes(t *testing.T) {
	m := testenv.Manager(t, "desktop")
	pool := desk.NewPool(m, nil)
	t.Cleanup(pool.Close)
	ctx := context.Background()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "desktop", MemoryMiB: 1024, VCPUs: 2,
		Forwards: []vmm.Forward{{GuestPort: 8000}}})
	if err != nil {
		t.Fatal(err)
	}
	c := serveVM(t, m, pool, vm)

	t.Run("commands run as user in the session", func(t *testing.T) {
		c := osw{t, c.url}
		out := c.exec("sh", "-c", `id -un; echo "$HOME"; echo "$DISPLAY"; test -n "$DBUS_SESSION_BUS_ADDRESS" && echo bus; xdotool getdisplaygeometry`)
		if got := strings.Fields(out.Output); len(got) != 6 || got[0] != "user" || got[1] != "/home/user" || got[2] != ":0" || got[3] != "bus" || got[4] != "1280" {
			t.Fatalf("session: %+v", out)
		}
		// A command that runs and fails is a 200 with its returncode.
		if out := c.exec("python3", "-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"); out.ReturnCode != 3 || out.Error != "x\n" || out.Status != "success" {
			t.Fatalf("failing python: %+v", out)
		}
		if code, b := c.json("/execute", map[string]any{"command": []string{"no-such-program"}}); code != 500 {
			t.Fatalf("missing program: %d %s", code, b)
		}
		// sudo -S with the image's password works, as OSWorld's tasks use it
		// ("user" on the desktop image, "password" on the osworld image).
		code, b := c.json("/execute", map[string]any{"command": "echo user | sudo -S -p '' id -un", "shell": true})
		if code != 200 || !strings.Contains(string(b), `"output":"root\n"`) {
			t.Fatalf("sudo: %d %s", code, b)
		}
	})

	t.Run("upload comes back byte for byte, owned by user", func(t *testing.T) {
		c := osw{t, c.url}
		data := make([]byte, 300<<10)
		rand.Read(data)
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		mw.WriteField("file_path", "~/e2e/deep/data.bin")
		fw, _ := mw.CreateFormFile("file_data", "data.bin")
		fw.Write(data)
		mw.Close()
		if code, b := c.do("POST", "/setup/upload", mw.FormDataContentType(), body.Bytes()); code != 200 || string(b) != fmt.Sprintf("File Uploaded: %d bytes", len(data)) {
			t.Fatalf("upload: %d %s", code, b)
		}
		form := url.Values{"file_path": {"/home/user/e2e/deep/data.bin"}}
		code, b := c.do("POST", "/file", "application/x-www-form-urlencoded", []byte(form.Encode()))
		if code != 200 || !bytes.Equal(b, data) {
			t.Fatalf("/file: %d, %d bytes, equal %v", code, len(b), bytes.Equal(b, data))
		}
		if out := c.exec("stat", "-c", "%U", "/home/user/e2e/deep/data.bin", "/home/user/e2e/deep", "/home/user/e2e"); out.Output != "user\nuser\nuser\n" {
			t.Fatalf("owners: %+v", out)
		}
		if code, _ := c.do("POST", "/file", "application/x-www-form-urlencoded", []byte("file_path=/home/user/nope")); code != 404 {
			t.Fatalf("missing file: %d", code)
		}
	})

	t.Run("launch, activate, close a window", func(t *testing.T) {
		c := osw{t, c.url}
		if code, b := c.json("/setup/launch", map[string]any{"command": []string{"lxterminal", "--title=deskfarm-e2e-term"}}); code != 200 {
			t.Fatalf("launch: %d %s", code, b)
		}
		find := func() string {
			return strings.TrimSpace(c.exec("xdotool", "search", "--onlyvisible", "--name", "deskfarm-e2e-term").Output)
		}
		until(t, 90*time.Second, "terminal window", func() bool { return find() != "" })
		// Focus something else, then activate the terminal by name.
		c.exec("xdotool", "search", "--onlyvisible", "--class", "pcmanfm", "windowactivate")
		if code, b := c.json("/setup/activate_window", map[string]any{"window_name": "deskfarm-e2e-term"}); code != 200 {
			t.Fatalf("activate: %d %s", code, b)
		}
		until(t, 20*time.Second, "terminal active", func() bool {
			return strings.Contains(c.exec("xdotool", "getactivewindow", "getwindowname").Output, "deskfarm-e2e-term")
		})
		code, b := c.do("POST", "/window_size", "application/x-www-form-urlencoded", []byte("app_class_name=lxterminal"))
		if code != 200 || !strings.Contains(string(b), `"width"`) {
			t.Fatalf("window_size: %d %s", code, b)
		}
		if code, _ := c.do("POST", "/window_size", "application/x-www-form-urlencoded", []byte("app_class_name=no-such-class")); code != 500 {
			t.Fatalf("window_size of no window: %d, want 500", code)
		}
		if code, b := c.json("/setup/close_window", map[string]any{"window_name": "deskfarm-e2e-term"}); code != 200 {
			t.Fatalf("close: %d %s", code, b)
		}
		until(t, 20*time.Second, "terminal closed", func() bool { return find() == "" })
		// Nothing to close is still a 200, as OSWorld's server answers.
		if code, _ := c.json("/setup/close_window", map[string]any{"window_name": "deskfarm-e2e-term"}); code != 200 {
			t.Fatalf("close of no window: %d", code)
		}
	})

	t.Run("open_file returns once the window is up", func(t *testing.T) {
		c := osw{t, c.url}
		// The desktop image has no xdg-open; pcmanfm opens the file, with
		// the application this names (a task's setup would do the same).
		upload(t, c, "/home/user/.config/mimeapps.list", []byte("[Default Applications]\ntext/plain=org.xfce.mousepad.desktop\n"))
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		mw.WriteField("file_path", "/home/user/e2e-notes.txt")
		fw, _ := mw.CreateFormFile("file_data", "e2e-notes.txt")
		fw.Write([]byte("notes\n"))
		mw.Close()
		if code, b := c.do("POST", "/setup/upload", mw.FormDataContentType(), body.Bytes()); code != 200 {
			t.Fatalf("upload: %d %s", code, b)
		}
		if code, b := c.json("/setup/open_file", map[string]any{"path": "~/e2e-notes.txt"}); code != 200 {
			t.Fatalf("open_file: %d %s", code, b)
		}
		// The answer came only once the window was there: it is there now.
		if out := c.exec("xdotool", "search", "--onlyvisible", "--name", "e2e-notes"); strings.TrimSpace(out.Output) == "" {
			t.Fatalf("no window after open_file: %+v", out)
		}
		if code, _ := c.json("/setup/open_file", map[string]any{"path": "/home/user/nope.docx"}); code != 404 {
			t.Fatalf("open_file of nothing: %d", code)
		}
	})

	t.Run("screenshot, screen size, cursor", func(t *testing.T) {
		c := osw{t, c.url}
		code, b := c.do("GET", "/screenshot", "", nil)
		if code != 200 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Fatalf("screenshot: %d", code)
		}
		if code, b := c.do("POST", "/screen_size", "", nil); code != 200 || strings.TrimSpace(string(b)) != `{"height":800,"width":1280}` {
			t.Fatalf("screen_size: %d %s", code, b)
		}
		c.exec("xdotool", "mousemove", "123", "234")
		if code, b := c.do("GET", "/cursor_position", "", nil); code != 200 || strings.TrimSpace(string(b)) != "[123,234]" {
			t.Fatalf("cursor_position: %d %s", code, b)
		}
		code, b = c.json("/list_directory", map[string]any{"path": "/home/user/e2e"})
		if code != 200 || !strings.Contains(string(b), `"name":"data.bin"`) {
			t.Fatalf("list_directory: %d %s", code, b)
		}
	})

	t.Run("recording spans the recorded time", func(t *testing.T) {
		c := osw{t, c.url}
		if _, err := exec.LookPath("ffprobe"); err != nil {
			testenv.Unavailable(t, "no ffmpeg on the host (scripts/setup-host.sh)")
		}
		if code, b := c.do("POST", "/start_recording", "", nil); code != 200 {
			t.Fatalf("start_recording: %d %s", code, b)
		}
		start := time.Now()
		for i := range 8 {
			c.exec("xdotool", "mousemove", fmt.Sprint(100+i*100), "300")
			time.Sleep(400 * time.Millisecond)
		}
		for time.Since(start) < 4*time.Second {
			time.Sleep(100 * time.Millisecond)
		}
		span := time.Since(start).Seconds()
		code, b := c.do("POST", "/end_recording", "", nil)
		if code != 200 {
			t.Fatalf("end_recording: %d %s", code, b)
		}
		dur, w, h := probe(t, b)
		if w != 1280 || h != 800 || dur < span-1 || dur > span+1.5 {
			t.Fatalf("recording %.2fs %dx%d, recorded for %.2fs", dur, w, h, span)
		}
	})

	t.Run("forwards reach in, the guest reaches nothing out", func(t *testing.T) {
		c := osw{t, c.url}
		got, _ := m.Get(ctx, vm.ID)
		if len(got.Forwards) != 1 || got.Forwards[0].HostPort == 0 {
			t.Fatalf("forwards %+v", got.Forwards)
		}
		if code, b := c.json("/setup/launch", map[string]any{"command": "cd /tmp && echo hello-from-guest > hello.txt && exec python3 -m http.server 8000", "shell": true}); code != 200 {
			t.Fatalf("launch server: %d %s", code, b)
		}
		u := fmt.Sprintf("http://127.0.0.1:%d/hello.txt", got.Forwards[0].HostPort)
		until(t, 60*time.Second, "guest server through the forward", func() bool {
			resp, err := http.Get(u)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode == 200 && string(b) == "hello-from-guest\n"
		})
		ln := hostServer(t)
		out := c.exec("python3", "-c", fmt.Sprintf("import urllib.request as u; print(u.urlopen('http://10.0.2.2:%d/', timeout=5).read().decode())", ln))
		if out.ReturnCode == 0 {
			t.Fatalf("guest reached the host with network none: %+v", out)
		}
		// Name lookups fail at once, not after the resolver's timeouts:
		// getent exits 2 (not found), timeout would exit 124.
		out = c.exec("sh", "-c", "timeout 5 getent hosts deb.debian.org; echo rc=$?")
		if !strings.Contains(out.Output, "rc=2") {
			t.Fatalf("a name lookup with no route out: %+v, want getent's not found (rc=2) within 5 s", out)
		}
	})
}

func upload(t *testing.T, c osw, path string, data []byte) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("file_path", path)
	fw, _ := mw.CreateFormFile("file_data", "f")
	fw.Write(data)
	mw.Close()
	if code, b := c.do("POST", "/setup/upload", mw.FormDataContentType(), body.Bytes()); code != 200 {
		t.Fatalf("upload %s: %d %s", path, code, b)
	}
}

// hostServer serves "hello-from-host" on the host's loopback and returns
// its port.
func hostServer(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello-from-host") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// With network user the guest reaches a server on the host's loopback
// through QEMU's user-mode stack (10.0.2.2 is the host).
func TestE2ENetworkUserReachesHostLoopback(t *testing.T) {
	m := testenv.Manager(t, "desktop")
	ctx := context.Background()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "desktop", MemoryMiB: 1024, VCPUs: 2, Network: vmm.NetworkUser})
	if err != nil {
		t.Fatal(err)
	}
	port := hostServer(t)
	g := &osworld.VMGuest{Farm: m, VM: vm.ID}
	res, err := g.Run(ctx, osworld.Cmd{Argv: []string{"python3", "-c",
		fmt.Sprintf("import urllib.request as u; print(u.urlopen('http://10.0.2.2:%d/', timeout=10).read().decode())", port)}})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "hello-from-host" {
		t.Fatalf("guest to host loopback: %+v %s %v", res, res.Stderr, err)
	}
}

func probe(t *testing.T, mp4 []byte) (float64, int, int) {
	t.Helper()
	cmd := exec.Command("ffprobe", "-v", "error", "-show_entries", "format=duration:stream=codec_name,width,height", "-of", "json", "-i", "pipe:0")
	cmd.Stdin = bytes.NewReader(mp4)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ffprobe: %v", err)
	}
	var v struct {
		Streams []struct {
			Codec  string `json:"codec_name"`
			Width  int    `json:"width"`
			Height int    `json:"height"`
		} `json:"streams"`
		Format struct {
			Duration string `json:"duration"`
		} `json:"format"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v.Streams) != 1 || v.Streams[0].Codec != "h264" {
		t.Fatalf("ffprobe: %s %v", out, err)
	}
	var d float64
	fmt.Sscan(v.Format.Duration, &d)
	return d, v.Streams[0].Width, v.Streams[0].Height
}
