package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/mcpserver"
	"github.com/deskfarm/deskfarm/web"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect serves s to a go-sdk client over in-memory transports.
func connect(t *testing.T, s *mcpserver.Server) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func newServer(t *testing.T, url string) *mcpserver.Server {
	t.Helper()
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	return mcpserver.New(c, mcpserver.Options{})
}

// call calls a tool and fails the test on a protocol error (not on a tool
// error: the result's IsError says that).
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// text joins a result's text contents.
func text(res *mcp.CallToolResult) string {
	var out []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			out = append(out, tc.Text)
		}
	}
	return strings.Join(out, "\n")
}

// ok calls a tool that must succeed and returns its result.
func ok(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res := call(t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", name, args, text(res))
	}
	return res
}

// fails calls a tool that must fail and returns its error text, which
// must contain each of want.
func fails(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, want ...string) string {
	t.Helper()
	res := call(t, cs, name, args)
	msg := text(res)
	if !res.IsError {
		t.Fatalf("%s %v succeeded (%q); want an error", name, args, msg)
	}
	t.Logf("%s: %s", name, msg)
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s %v: error %q does not say %q", name, args, msg, w)
		}
	}
	return msg
}

func TestToolList(t *testing.T) {
	srv, _ := farmtest.Serve(t, web.Options{})
	cs := connect(t, newServer(t, srv.URL))
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var computer *mcp.Tool
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		if tl.Name == "computer" {
			computer = tl
		}
	}
	slices.Sort(names)
	want := []string{"computer", "end_episode", "exec", "fork_episode", "read_file", "revert_snapshot", "screenshot", "snapshot", "start_episode", "write_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	// The client sees the actions as an enum it can offer a model.
	schema, _ := computer.InputSchema.(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	action, _ := props["action"].(map[string]any)
	enum, _ := action["enum"].([]any)
	if !slices.Contains(enum, any("left_click")) || !slices.Contains(enum, any("zoom")) {
		t.Errorf("computer's action enum = %v", action["enum"])
	}
	if req, _ := schema["required"].([]any); !slices.Equal(req, []any{"action"}) {
		t.Errorf("computer requires %v, want only action", schema["required"])
	}
}

func TestEpisodeComputerFilesExec(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(d.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpserver.New(c, mcpserver.Options{})
	cs := connect(t, s)

	// Before an episode, VM tools say what to do.
	fails(t, cs, "screenshot", nil, "episode", "start_episode")

	res := ok(t, cs, "start_episode", map[string]any{"pool": "desktop"})
	msg := text(res)
	if !strings.Contains(msg, "Live view: "+d.Server.URL+"/vms/") {
		t.Errorf("start_episode said %q; want a live view link", msg)
	}
	eps, err := c.ListEpisodes(context.Background())
	if err != nil || len(eps) != 1 || !strings.Contains(msg, eps[0].ID) {
		t.Fatalf("episodes %+v (%v) after start_episode said %q", eps, err, msg)
	}
	ep := eps[0]

	// screenshot answers with a PNG in the coordinate space.
	res = ok(t, cs, "screenshot", nil)
	img := imageOf(t, res)
	if img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 800 || !strings.Contains(text(res), "1280x800") {
		t.Errorf("screenshot is %v, text %q", img.Bounds(), text(res))
	}

	// computer plays Claude actions on the episode's VM.
	res = ok(t, cs, "computer", map[string]any{"action": "left_click", "coordinate": []int{100, 200}})
	imageOf(t, res)
	ok(t, cs, "computer", map[string]any{"action": "type", "text": "hi"})
	ok(t, cs, "computer", map[string]any{"action": "key", "text": "Return"})
	screen := d.Screen(ep.VM)
	if got := screen.Clicks(); !slices.Equal(got, []image.Point{{100, 200}}) {
		t.Errorf("clicks %v, want [(100,200)]", got)
	}
	if got := screen.Typed(); got != "hi\n" {
		t.Errorf("typed %q, want %q", got, "hi\n")
	}
	res = ok(t, cs, "computer", map[string]any{"action": "cursor_position"})
	if !strings.Contains(text(res), "X=100,Y=200") {
		t.Errorf("cursor_position said %q", text(res))
	}

	// Files and exec.
	ok(t, cs, "write_file", map[string]any{"path": "/tmp/x", "content": "héllo\n", "mode": "0600"})
	if got := text(ok(t, cs, "read_file", map[string]any{"path": "/tmp/x"})); got != "héllo\n" {
		t.Errorf("read_file = %q", got)
	}
	res = ok(t, cs, "exec", map[string]any{"argv": []string{"cat"}, "stdin": "from stdin"})
	if got := text(res); !strings.Contains(got, "exit code 0") || !strings.Contains(got, "from stdin") {
		t.Errorf("exec cat said %q", got)
	}
	// A failing program is a result, not a tool error.
	res = ok(t, cs, "exec", map[string]any{"argv": []string{"fail", "bad", "thing"}})
	if got := text(res); !strings.Contains(got, "exit code 7") || !strings.Contains(got, "--- stderr ---\nbad thing") {
		t.Errorf("exec fail said %q", got)
	}
	// An explicit vm argument reaches the same VM by its id.
	if got := text(ok(t, cs, "read_file", map[string]any{"path": "/tmp/x", "vm": ep.VM})); got != "héllo\n" {
		t.Errorf("read_file by vm = %q", got)
	}

	ok(t, cs, "end_episode", nil)
	if eps, _ := c.ListEpisodes(context.Background()); len(eps) != 0 {
		t.Errorf("episodes after end_episode: %+v", eps)
	}
	fails(t, cs, "screenshot", nil, "start_episode")
	fails(t, cs, "screenshot", map[string]any{"episode": ep.ID}, "episode")
}

func TestErrorsNameTheArgument(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	cs := connect(t, newServer(t, d.Server.URL))
	ok(t, cs, "start_episode", nil) // the farm's only pool

	fails(t, cs, "computer", map[string]any{"action": "fly"}, "action")
	fails(t, cs, "computer", map[string]any{"action": "left_click", "coordinate": []int{1}}, "coordinate")
	fails(t, cs, "computer", map[string]any{"action": "left_click", "coordinate": []int{5000, 10}}, "out_of_bounds")
	fails(t, cs, "computer", map[string]any{"action": "type"}, "text")
	fails(t, cs, "exec", map[string]any{"argv": []string{}}, "argv")
	fails(t, cs, "exec", map[string]any{"argv": []string{"cat"}, "timeout_s": 99999}, "timeout_s")
	fails(t, cs, "read_file", map[string]any{"path": "relative"}, "path")
	fails(t, cs, "read_file", map[string]any{"path": "/nope"})
	fails(t, cs, "write_file", map[string]any{"path": "/a", "content": "x", "content_b64": "eA=="}, "content_b64")
	fails(t, cs, "write_file", map[string]any{"path": "/a", "mode": "rw"}, "mode")
	fails(t, cs, "screenshot", map[string]any{"vm": "v01", "episode": "e"}, "vm")
	fails(t, cs, "start_episode", map[string]any{"pool": "nope"}, "unknown_pool")
}

func TestNoPoolsNoDisplay(t *testing.T) {
	srv, _ := farmtest.Serve(t, web.Options{})
	cs := connect(t, newServer(t, srv.URL))
	fails(t, cs, "start_episode", nil, "no_pools")
	c, _ := client.New(srv.URL)
	vm, err := c.CreateVM(context.Background(), api.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	fails(t, cs, "computer", map[string]any{"action": "left_click", "coordinate": []int{1, 1}, "vm": vm.ID}, "no_display")
	res := ok(t, cs, "exec", map[string]any{"argv": []string{"cat"}, "stdin": "x", "vm": vm.ID})
	if !strings.Contains(text(res), "x") {
		t.Errorf("exec said %q", text(res))
	}
}

func TestClosedSessionEndsItsEpisodes(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	s := mcpserver.New(c, mcpserver.Options{})
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok(t, cs, "start_episode", nil)
	if eps, _ := c.ListEpisodes(ctx); len(eps) != 1 {
		t.Fatalf("episodes: %+v", eps)
	}
	cs.Close()
	ss.Wait()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		eps, err := c.ListEpisodes(ctx)
		if err == nil && len(eps) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("episodes after the session closed: %+v (%v)", eps, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func imageOf(t *testing.T, res *mcp.CallToolResult) image.Image {
	t.Helper()
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			if ic.MIMEType != "image/png" {
				t.Fatalf("image is %s", ic.MIMEType)
			}
			img, err := png.Decode(bytes.NewReader(ic.Data))
			if err != nil {
				t.Fatalf("image content is not a PNG: %v", err)
			}
			return img
		}
	}
	t.Fatalf("no image in %q", text(res))
	return nil
}

// start_episode's record goes to the farm as the episode's record (left
// out, it is left out: the pool's default), and a recorded episode's answer
// links its trajectory.
func TestStartEpisodeRecord(t *testing.T) {
	var starts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		starts = append(starts, string(body))
		var req api.StartEpisodeRequest
		json.Unmarshal(body, &req)
		ep := api.Episode{ID: "ep-0123456789ab", VM: "v01", Pool: "desktop", State: api.EpisodeActive}
		if req.Record != nil && *req.Record {
			ep.Recording, ep.TrajectoryURL = true, "/trajectories/ep-0123456789ab"
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(ep)
	}))
	defer srv.Close()
	c, _ := client.New(srv.URL)
	cs := connect(t, mcpserver.New(c, mcpserver.Options{}))
	msg := text(ok(t, cs, "start_episode", map[string]any{"pool": "desktop", "record": true}))
	if !strings.Contains(msg, "Recording: the trajectory (id ep-0123456789ab) is kept after the episode; its page: "+srv.URL+"/trajectories/ep-0123456789ab") {
		t.Errorf("start_episode with record said %q", msg)
	}
	msg = text(ok(t, cs, "start_episode", map[string]any{"pool": "desktop"}))
	if strings.Contains(msg, "Recording") {
		t.Errorf("start_episode without record said %q", msg)
	}
	ok(t, cs, "start_episode", map[string]any{"record": false})
	want := []string{`{"pool":"desktop","record":true}`, `{"pool":"desktop"}`, `{"pool":"","record":false}`}
	if !slices.Equal(starts, want) {
		t.Errorf("the farm got %q, want %q", starts, want)
	}
}
