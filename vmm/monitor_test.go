package vmm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
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
