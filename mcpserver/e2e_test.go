package mcpserver_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/pool"
	"github.com/deskfarm/deskfarm/web"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestE2EMCPTypesIntoATerminal: an MCP client (the go-sdk's, over the
// API server's /mcp) starts an episode on the real desktop image, opens a
// terminal with keys, clicks into it, types a command that writes a file,
// reads the file back and ends the episode.
//
// The text is ASCII: Unicode typing is another change of issue 11 (the
// actions route refuses non-ASCII text until it lands).
func TestE2EMCPTypesIntoATerminal(t *testing.T) {
	m := testenv.Manager(t, "desktop")
	os.Remove(filepath.Join(testenv.StateDir, pool.StateFileName))
	t.Cleanup(func() { os.Remove(filepath.Join(testenv.StateDir, pool.StateFileName)) })
	cfg := pool.Config{Pools: []pool.PoolConfig{{Name: "desktop", Image: "desktop", MemoryMiB: 1024, VCPUs: 2, MinWarm: 0, Max: 1}}}
	cfg.SetDefaults()
	pm, err := pool.New(context.Background(), m, cfg, pool.Options{StateDir: testenv.StateDir})
	if err != nil {
		t.Fatal(err)
	}
	desks := desk.NewPool(m, nil)
	srv := httptest.NewServer(web.NewServer(m, web.Options{Desks: desks, Pools: pm}))
	t.Cleanup(func() { srv.Close(); desks.Close(); pm.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s %v: %s", name, args, text(res))
		}
		return text(res)
	}

	t.Log(call("start_episode", map[string]any{"pool": "desktop"}))
	shot := call("screenshot", nil)
	if !strings.Contains(shot, "1280x800") {
		t.Errorf("screenshot said %q", shot)
	}
	call("computer", map[string]any{"action": "key", "text": "ctrl+alt+t"})

	// Wait for the terminal to hold the focus, as an agent would by
	// looking, and find where it is.
	var geom map[string]int
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := call("exec", map[string]any{"argv": []string{"sh", "-c",
			`export DISPLAY=:0; a=$(xdotool getactivewindow) && xdotool search --onlyvisible --class lxterminal | grep -qx "$a" && xdotool getwindowgeometry --shell "$a"`},
			"timeout_s": 20})
		if strings.HasPrefix(out, "exit code 0") {
			geom = shellVars(out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no focused terminal after ctrl+alt+t: %s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	x, y := geom["X"]+geom["WIDTH"]/2, geom["Y"]+geom["HEIGHT"]/2
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "computer", Arguments: map[string]any{"action": "left_click", "coordinate": []int{x, y}}})
	if err != nil || res.IsError {
		t.Fatalf("click at (%d,%d): %v %s", x, y, err, text(res))
	}
	imageOf(t, res)

	const payload = "hello from mcp: ~!@#$%^&*()_+{}|:?<>"
	call("computer", map[string]any{"action": "type", "text": fmt.Sprintf("printf '%%s\\n' '%s' > /tmp/mcp-typed.txt\n", payload)})
	deadline = time.Now().Add(30 * time.Second)
	for {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "/tmp/mcp-typed.txt"}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.IsError {
			if got := text(res); got != payload+"\n" {
				t.Fatalf("the typed file holds %q, want %q", got, payload+"\n")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the typed command wrote no file: %s", text(res))
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Log(call("end_episode", nil))
}

// shellVars parses xdotool's --shell output (X=10\nY=20...) out of an exec
// tool's text.
func shellVars(s string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if n, err := strconv.Atoi(v); ok && err == nil {
			out[k] = n
		}
	}
	return out
}
