package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

// TestMCPStdio runs "deskfarm mcp" with its standard input and output
// piped to a go-sdk client, as Claude Desktop runs it.
func TestMCPStdio(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	env := &Env{Stdin: inR, Stdout: outW, Stderr: &stderr, Interactive: func(any) bool { return false },
		Exit: func(int) {}, Getenv: func(k string) string {
			return map[string]string{"DESKFARM_SERVER": d.Server.URL}[k]
		}}
	root := &cobra.Command{Use: "deskfarm", SilenceErrors: true, SilenceUsage: true}
	AddCommands(root, env)
	root.SetArgs([]string{"mcp"})
	done := make(chan error, 1)
	go func() { done <- root.Execute(); outW.Close() }()

	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "start_episode"})
	if err != nil || res.IsError {
		t.Fatalf("start_episode: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"argv": []string{"cat"}, "stdin": "piped"}})
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "piped") {
		t.Fatalf("exec: %v %+v", err, res)
	}
	// The client going away ends the command, and the episode with it.
	cs.Close()
	inW.Close()
	if err := <-done; err != nil {
		t.Fatalf("deskfarm mcp: %v\nstderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "episode ended") {
		t.Errorf("stderr %q does not log the episode's end", stderr.String())
	}
}

// A client that pipes its requests and closes its end at once, as
// `printf ... | deskfarm mcp` does, gets an answer to every one of them
// before the command ends (go-sdk alone answered at most the first).
func TestMCPStdioAnswersBeforeEOF(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	lines := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"start_episode","arguments":{}}}`,
	}, "\n") + "\n"
	var stdout, stderr bytes.Buffer
	env := &Env{Stdin: strings.NewReader(lines), Stdout: &stdout, Stderr: &stderr, Interactive: func(any) bool { return false },
		Exit: func(int) {}, Getenv: func(k string) string {
			return map[string]string{"DESKFARM_SERVER": d.Server.URL}[k]
		}}
	root := &cobra.Command{Use: "deskfarm", SilenceErrors: true, SilenceUsage: true}
	AddCommands(root, env)
	root.SetArgs([]string{"mcp"})
	if err := root.Execute(); err != nil {
		t.Fatalf("deskfarm mcp: %v\nstderr: %s", err, stderr.String())
	}

	answers := map[float64]map[string]any{}
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("stdout: %v", err)
		}
		if id, ok := m["id"].(float64); ok {
			answers[id] = m
		}
	}
	for _, id := range []float64{1, 2, 3} {
		a, ok := answers[id]
		if !ok {
			t.Errorf("no answer to request %v; stdout:\n%s", id, stdout.String())
			continue
		}
		if a["error"] != nil {
			t.Errorf("request %v: %v", id, a["error"])
		}
	}
	if res, _ := answers[3]["result"].(map[string]any); res == nil || res["isError"] == true {
		t.Errorf("start_episode: %v", answers[3])
	}
	if !strings.Contains(stderr.String(), "episode ended") {
		t.Errorf("stderr %q does not log the episode's end", stderr.String())
	}
}
