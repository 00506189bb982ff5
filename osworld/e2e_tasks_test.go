package osworld_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/deskfarm/deskfarm/internal/testenv"
)

// defaultOSWorldSrc is where the host keeps an OSWorld checkout
// (desktop_env/ and evaluation_examples/), unless $OSWORLD_SRC names one.
const defaultOSWorldSrc = "/var/cache/deskfarm/osworld-src"

// TestE2EOSWorldTasksRunner runs python/osworld_tasks.py on two of
// OSWorld's offline os tasks against a farm with pool osworld, and checks
// that each set up through OSWorld's SetupController and that OSWorld's
// grader returned a score: 0 for the untouched max-volume task.
func TestE2EOSWorldTasksRunner(t *testing.T) {
	m := testenv.Manager(t, "osworld")
	src := os.Getenv("OSWORLD_SRC")
	if src == "" {
		src = defaultOSWorldSrc
	}
	if _, err := os.Stat(filepath.Join(src, "desktop_env", "controllers", "setup.py")); err != nil {
		testenv.Unavailable(t, "no OSWorld checkout at "+src+" (set OSWORLD_SRC)")
	}
	if err := exec.Command("/usr/bin/python3", "-c", "import requests_toolbelt, openpyxl, lxml.cssselect, pandas").Run(); err != nil {
		testenv.Unavailable(t, "OSWorld's evaluator imports are not installed (scripts/setup-host.sh)")
	}
	ctx, srv := osworldFarm(t, m)

	const maxVolume = "28cc3b7e-b194-4bc9-8353-d04c0f4d56d2" // exact_match of pactl's volume with "100\n"
	const utc = "b6781586-6346-41cd-935a-a6b1487918fc"       // is_utc_0 over timedatectl
	_, file, _, _ := runtime.Caller(0)
	dir := t.TempDir()
	out := filepath.Join(dir, "report.jsonl")
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", filepath.Join(filepath.Dir(file), "..", "python", "osworld_tasks.py"),
		"--osworld", src, "--out", out, "--timeout", "120", "--cache-dir", filepath.Join(dir, "cache"),
		"--task", maxVolume, "--task", utc)
	cmd.Env = append(os.Environ(), "DESKFARM_URL="+srv.URL)
	stdout, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("osworld_tasks.py: %v\n%s\n%s", err, stdout, stderr)
	}
	t.Logf("%s", stdout)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	type record struct {
		ID      string   `json:"id"`
		SetupOK *bool    `json:"setup_ok"`
		Score   *float64 `json:"score"`
		Fault   string   `json:"fault"`
	}
	got := map[string]record{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("report line %q: %v", sc.Text(), err)
		}
		if r.ID != "" {
			got[r.ID] = r
		}
	}
	for _, id := range []string{maxVolume, utc} {
		r, ok := got[id]
		if !ok {
			t.Fatalf("task %s not in the report:\n%s", id, b)
		}
		if r.SetupOK == nil || !*r.SetupOK || r.Score == nil {
			t.Errorf("task %s: set up %v, score %v, fault %q; want set up and graded", id, r.SetupOK, r.Score, r.Fault)
		}
	}
	if r := got[maxVolume]; r.Score != nil && *r.Score != 0 {
		t.Errorf("untouched max-volume task scored %v; want 0 (nothing turned the volume up)", *r.Score)
	}
}
