package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
)

// replay serves the recorded Messages API turns of package agentloop's
// tests (constructed, not captured: see agentloop/testdata/README.md).
func replay(t *testing.T, file string) *httptest.Server {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var turns []json.RawMessage
	if err := json.Unmarshal(b, &turns); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		// anthropic-sdk-go v2.15.0 sends the key as a bearer token.
		key := r.Header.Get("X-Api-Key") + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if key != "test-key" || i >= len(turns) {
			http.Error(w, `{"error":{"message":"fake API: unexpected request"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(turns[i])
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestAgentRun(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	fake := replay(t, "../../agentloop/testdata/claude_turns.json")
	c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": d.Server.URL, "ANTHROPIC_API_KEY": "test-key",
		"ANTHROPIC_BASE_URL": fake.URL}}
	res := c.mustRun(nil, "agent", "run", "type hello")
	for _, want := range []string{"live view: " + d.Server.URL + "/vms/", "[2] computer", "left_click",
		"done after 4 steps", "ended"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("agent run printed %q; want %q in it", res.stdout, want)
		}
	}

	// A step limit short of the task is a failure the shell sees.
	fake = replay(t, "../../agentloop/testdata/claude_turns.json")
	c.env["ANTHROPIC_BASE_URL"] = ""
	res = c.run(nil, "agent", "run", "--base-url", fake.URL, "--max-steps", "1", "type hello")
	if res.err == nil || !strings.Contains(res.err.Error(), "max_steps") {
		t.Errorf("agent run --max-steps 1: %v; want a max_steps error", res.err)
	}

	delete(c.env, "ANTHROPIC_API_KEY")
	if res = c.run(nil, "agent", "run", "x"); res.err == nil || !strings.Contains(res.err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("without a key: %v", res.err)
	}
	if res = c.run(nil, "agent", "run", "--provider", "gemini", "x"); res.err == nil || !strings.Contains(res.err.Error(), "provider") {
		t.Errorf("unknown provider: %v", res.err)
	}
}
