package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
)

// TestAgentRunTools: agent run gives each provider its GA tool and that
// tool's model by default, and the older tools with --tool. (What the SDKs
// send for each tool is checked in package agentloop.)
func TestAgentRunTools(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	for _, tc := range []struct {
		args  []string
		turns string
		want  string // the loop's line naming model and tool
	}{
		{nil, "claude_turns.json", "claude claude-opus-5-5 with computer_toolset_20260801"},
		{[]string{"--tool", "computer_20251124"}, "claude_computer_20251124_turns.json", "claude claude-opus-4-5 with computer_20251124"},
		{[]string{"--provider", "openai"}, "openai_turns.json", "openai gpt-5.4 with computer"},
		{[]string{"--provider", "openai", "--tool", "computer_use_preview"}, "openai_preview_turns.json",
			"openai computer-use-preview with computer_use_preview"},
		{[]string{"--model", "claude-sonnet-5-5"}, "claude_turns.json", "claude claude-sonnet-5-5 with computer_toolset_20260801"},
	} {
		fake := replay(t, filepath.Join("../../agentloop/testdata", tc.turns))
		c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": d.Server.URL,
			"DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token"),
			"ANTHROPIC_API_KEY":   "test-key", "OPENAI_API_KEY": "test-key"}}
		args := append(append([]string{"agent", "run", "--base-url", fake.URL}, tc.args...), "type hello")
		res := c.mustRun(nil, args...)
		if !strings.Contains(res.stdout, tc.want+"\n") || !strings.Contains(res.stdout, "done after 4 steps") {
			t.Errorf("agent run %v printed %q; want %q and done after 4 steps", tc.args, res.stdout, tc.want)
		}
	}

	c := &cli{t: t, env: map[string]string{"DESKFARM_SERVER": d.Server.URL,
		"DESKFARM_TOKEN_FILE": filepath.Join(t.TempDir(), "no-token"), "ANTHROPIC_API_KEY": "k"}}
	if res := c.run(nil, "agent", "run", "--tool", "computer_use_preview", "x"); res.err == nil ||
		!strings.Contains(res.err.Error(), "--tool") || !strings.Contains(res.err.Error(), "computer_toolset_20260801") {
		t.Errorf("a Claude run with OpenAI's tool: %v; want a --tool error naming Claude's tools", res.err)
	}
}
