package vmm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// capture is one real reply in testdata/captures.json, written by
// TestE2ECaptureReplies (its provenance field says from which QEMU, libvirt
// and qemu-ga).
type capture struct {
	Command string `json:"command"`
	Output  string `json:"output"`
	Error   string `json:"error"`
}

var (
	capturesOnce sync.Once
	captures     struct {
		Provenance string             `json:"provenance"`
		HMP        map[string]capture `json:"hmp"`
		QMP        map[string]capture `json:"qmp"`
		Agent      map[string]capture `json:"agent"`
	}
	capturesErr error
)

func loadCaptures(t *testing.T) {
	t.Helper()
	capturesOnce.Do(func() {
		b, err := os.ReadFile(filepath.Join("testdata", "captures.json"))
		if err == nil {
			err = json.Unmarshal(b, &captures)
		}
		capturesErr = err
	})
	if capturesErr != nil {
		t.Fatalf("testdata/captures.json: %v", capturesErr)
	}
}

func hmpCaptures(t *testing.T) map[string]capture {
	loadCaptures(t)
	return captures.HMP
}

func qmpCaptures(t *testing.T) map[string]capture {
	loadCaptures(t)
	return captures.QMP
}

func agentCaptures(t *testing.T) map[string]capture {
	loadCaptures(t)
	return captures.Agent
}

// parseHMPResult decides whether a reset worked: every real success output
// must pass and every real error output must fail, naming QEMU's complaint.
func TestParseHMPResultOnCaptures(t *testing.T) {
	caps := hmpCaptures(t)
	if len(caps) == 0 {
		t.Fatal("no HMP captures")
	}
	for name, c := range caps {
		err := parseHMPResult(c.Output)
		switch {
		case strings.HasPrefix(name, "info-"):
			// A table, read by its own parser (TestParseSnapshotsOnCaptures).
		case strings.HasSuffix(name, "-ok"):
			if err != nil {
				t.Errorf("%s (%q printed %q): %v", name, c.Command, c.Output, err)
			}
		default:
			if err == nil {
				t.Errorf("%s (%q printed %q): accepted as success", name, c.Command, c.Output)
			} else if !strings.Contains(err.Error(), strings.TrimSpace(strings.Split(c.Output, "\n")[0])) {
				t.Errorf("%s: error %q does not carry QEMU's message %q", name, err, c.Output)
			}
		}
	}
	for _, want := range []string{"savevm-ok", "loadvm-ok", "loadvm-missing"} {
		if _, ok := caps[want]; !ok {
			t.Errorf("capture %s missing", want)
		}
	}
}

// The snapshot list comes from QEMU's "info snapshots" table: every row of
// the real captures, a tag longer than its column included, with sizes and
// dates as QEMU printed them.
func TestParseSnapshotsOnCaptures(t *testing.T) {
	caps := hmpCaptures(t)
	got, err := parseSnapshots(caps["info-snapshots-three"].Output)
	if err != nil {
		t.Fatal(err)
	}
	mib := func(v float64) int64 { return int64(v * (1 << 20)) }
	want := []Snapshot{
		{Name: "deskfarm-ready", Bytes: mib(79.6), Created: time.Date(2026, 12, 1, 18, 53, 39, 0, time.Local)},
		{Name: "capture-test", Bytes: mib(79.7), Created: time.Date(2026, 12, 1, 19, 23, 2, 0, time.Local)},
		{Name: "capture-test-with-a-name-longer-than-sixteen", Bytes: mib(79.7), Created: time.Date(2026, 12, 1, 19, 23, 3, 0, time.Local)},
	}
	if len(got) != len(want) {
		t.Fatalf("parsed %d snapshots %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Bytes != want[i].Bytes || !got[i].Created.Equal(want[i].Created) {
			t.Errorf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	ready, err := parseSnapshots(caps["info-snapshots-ready"].Output)
	if err != nil || len(ready) != 1 || ready[0].Name != readySnapshot {
		t.Errorf("ready only: %+v, %v", ready, err)
	}
	// Forms not captured (no VM of deskfarm's lacks its ready snapshot):
	// QEMU's own sentence for none, and a complaint.
	if none, err := parseSnapshots("There is no snapshot available.\r\n"); err != nil || len(none) != 0 {
		t.Errorf("none: %+v, %v", none, err)
	}
	if _, err := parseSnapshots("Error: Device 'x' is writable but does not support snapshots\r\n"); err == nil {
		t.Error("an error was read as a list")
	}
	if _, err := parseSnapshots("List of snapshots present on all disks:\r\nID TAG\r\n-- broken row\r\n"); err == nil {
		t.Error("a row too short was accepted")
	}
}
