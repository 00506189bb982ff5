package replay_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvOSWorldCheckout names a checkout of OSWorld (github.com/xlang-ai/OSWorld)
// whose monitor/main.py reads an exported trajectory. The repository is
// not reachable from CI machines (no GitHub), so the check runs where a
// checkout is given, and says so where none is.
const EnvOSWorldCheckout = "DESKFARM_OSWORLD_CHECKOUT"

// checkOSWorldMonitor puts an export (deskfarm episode export's DIR) where
// OSWorld's results go (<results>/<action_space>/<observation_type>/<model>/<domain>/<task>),
// runs OSWorld's own monitor on Debian's Flask over it, and asserts what
// a person opening the monitor sees: the task listed as Done with every
// step, the detail page with each step's screenshot (the export's bytes)
// and the recording.
func checkOSWorldMonitor(t *testing.T, ctx context.Context, exportDir, task string) {
	t.Helper()
	checkout := os.Getenv(EnvOSWorldCheckout)
	if checkout == "" {
		t.Logf("OSWorld's monitor not run: set %s to an OSWorld checkout (its monitor/main.py)", EnvOSWorldCheckout)
		return
	}
	mon := filepath.Join(checkout, "monitor")
	if _, err := os.Stat(filepath.Join(mon, "main.py")); err != nil {
		t.Fatalf("%s=%s: %v", EnvOSWorldCheckout, checkout, err)
	}
	root := t.TempDir()
	model := filepath.Join(root, "results", "pyautogui", "screenshot", "deskfarm")
	taskDir := filepath.Join(model, "deskfarm", task)
	if err := os.MkdirAll(filepath.Dir(taskDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(taskDir, os.DirFS(exportDir)); err != nil {
		t.Fatal(err)
	}
	lines := readTrajLines(t, filepath.Join(taskDir, "traj.jsonl"))
	writeJSON(t, filepath.Join(model, "args.json"), map[string]any{"max_steps": 100})
	writeJSON(t, filepath.Join(root, "test.json"), map[string][]string{"deskfarm": {task}})
	writeJSON(t, filepath.Join(root, "examples", "deskfarm", task+".json"), map[string]any{"id": task, "instruction": "a deskfarm episode"})

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "main.py")
	cmd.Dir = mon
	cmd.Env = append(os.Environ(), "MONITOR_IN_DOCKER=false", "FLASK_HOST=127.0.0.1", fmt.Sprintf("FLASK_PORT=%d", port),
		"FLASK_DEBUG=false", "MAX_STEPS=100",
		"TASK_CONFIG_PATH="+filepath.Join(root, "test.json"),
		"EXAMPLES_BASE_PATH="+filepath.Join(root, "examples"),
		"RESULTS_BASE_PATH="+filepath.Join(root, "results"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("monitor output:\n%s", out.String())
		}
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	get := func(path string) (int, string, []byte) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, _ := get("/api/current-config"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OSWorld's monitor did not answer on %s in 30 s", base)
		}
		time.Sleep(200 * time.Millisecond)
	}
	code, _, body := get("/api/task/deskfarm/" + task)
	if code != 200 {
		t.Fatalf("monitor /api/task: %d %s", code, body)
	}
	var detail struct {
		Status struct {
			Status   string `json:"status"`
			Progress int    `json:"progress"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &detail); err != nil {
		t.Fatalf("monitor /api/task: %v: %s", err, body)
	}
	if !strings.HasPrefix(detail.Status.Status, "Done") || detail.Status.Progress != len(lines) {
		t.Errorf("the monitor shows the task as %q with %d steps, want Done with %d", detail.Status.Status, detail.Status.Progress, len(lines))
	}
	code, _, page := get("/task/deskfarm/" + task)
	if code != 200 {
		t.Fatalf("monitor's task page: %d\n%s", code, page)
	}
	for _, ln := range lines {
		if !bytes.Contains(page, []byte(fmt.Sprintf("Step %d", ln.StepNum))) || !bytes.Contains(page, []byte(ln.ScreenshotFile)) {
			t.Errorf("the monitor's task page lacks step %d or its screenshot %s", ln.StepNum, ln.ScreenshotFile)
		}
		code, ct, img := get("/task/deskfarm/" + task + "/screenshot/" + ln.ScreenshotFile)
		want, _ := os.ReadFile(filepath.Join(exportDir, ln.ScreenshotFile))
		if code != 200 || ct != "image/png" || !bytes.Equal(img, want) || len(want) == 0 {
			t.Errorf("the monitor serves step %d's screenshot as %d %s (%d bytes), want the export's %d bytes", ln.StepNum, code, ct, len(img), len(want))
		}
	}
	if !bytes.Contains(page, []byte("/recording")) {
		t.Errorf("the monitor's task page has no video")
	}
	code, ct, vid := get("/task/deskfarm/" + task + "/recording")
	if code != 200 || ct != "video/mp4" || len(vid) == 0 {
		t.Errorf("the monitor serves the recording as %d %s (%d bytes)", code, ct, len(vid))
	}
	t.Logf("OSWorld's monitor shows %s as %q with %d steps, their screenshots and the video", task, detail.Status.Status, detail.Status.Progress)
}

type trajLine struct {
	StepNum        int    `json:"step_num"`
	ScreenshotFile string `json:"screenshot_file"`
	Done           bool   `json:"done"`
}

func readTrajLines(t *testing.T, path string) []trajLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trajLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var l trajLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no steps", path)
	}
	return out
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
