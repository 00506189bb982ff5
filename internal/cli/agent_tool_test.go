package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
)

// recorder replays the constructed turns of file (agentloop/testdata) and
// keeps the bodies of the requests it got.
type recorder struct {
	mu     sync.Mutex
	bodies []map[string]any
}

func record(t *testing.T, file string) (*recorder, *httptest.Server) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var turns []json.RawMessage
	if err := json.Unmarshal(b, &turns); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		rec.mu.Lock()
		i := len(rec.bodies)
		rec.bodies = append(rec.bodies, body)
		rec.mu.Unlock()
		if i >= len(turns) {
			http.Error(w, `{"error":{"message":"fake API: out of turns"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(turns[i])
	}))
	t.Cleanup(srv.Close)
	return rec, srv
}

// first returns the model and the first tool's type of the first request.
func (rec *recorder) first(t *testing.T) (model, tool string) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.bodies) == 0 {
		t.Fatal("the model API got no request")
	}
	model, _ = rec.bodies[0]["model"].(string)
	if tools, _ := rec.bodies[0]["tools"].([]any); len(tools) > 0 {
		tool, _ = tools[0].(map[string]any)["type"].(string)
	}
	return model, tool
}

// TestAgentRunTools: agent run gives each provider its GA tool and that
// tool's model by default, and the older tools with --tool.
func TestAgentRunTools(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	for _, tc := range []struct {
		args        []string
		turns       string
		tool, model string
	}{
		{nil, "claude_turns.json", "computer_toolset_20260801", "claude-opus-5-5"},
		{[]string{"--tool", "computer_20251124"}, "claude_computer_20251124_turns.json", "computer_20251124", "claude-opus-4-5"},
		{[]string{"--provider", "openai"}, "openai_turns.json", "computer", "gpt-5.4"},
		{[]string{"--provider", "openai", "--tool", "computer_use_preview"}, "openai_preview_turns.json", "computer_use_preview", "computer-use-preview"},
		{[]string{"--model", "claude-sonnet-5-5"}, "claude_turns.json", "computer_toolset_20260801", "claude-sonnet-5-5"},
	} {
		rec, fake := record(t, filepath.Join("../../agentloop/testdata", tc.turns))
		c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": d.Server.URL,
			"DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token"),
			"ANTHROPIC_API_KEY":   "test-key", "OPENAI_API_KEY": "test-key"}}
		args := append(append([]string{"agent", "run", "--base-url", fake.URL}, tc.args...), "type hello")
		res := c.mustRun(nil, args...)
		if !strings.Contains(res.stdout, "done after 4 steps") {
			t.Errorf("agent run %v printed %q", tc.args, res.stdout)
		}
		if model, tool := rec.first(t); model != tc.model || tool != tc.tool {
			t.Errorf("agent run %v sent model %q with tool %q, want %q with %q", tc.args, model, tool, tc.model, tc.tool)
		}
	}

	c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": d.Server.URL,
		"DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token"), "ANTHROPIC_API_KEY": "k"}}
	if res := c.run(nil, "agent", "run", "--tool", "computer_use_preview", "x"); res.err == nil ||
		!strings.Contains(res.err.Error(), "--tool") || !strings.Contains(res.err.Error(), "computer_toolset_20260801") {
		t.Errorf("a Claude run with OpenAI's tool: %v; want a --tool error naming Claude's tools", res.err)
	}
}
