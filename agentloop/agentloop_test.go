package agentloop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/deskfarm/deskfarm/agentloop"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
)

// fakeAPI replays recorded model turns (testdata/README.md says how they
// were made) at one path, in order, and keeps the requests it got.
type fakeAPI struct {
	t     *testing.T
	path  string
	turns []json.RawMessage

	mu       sync.Mutex
	requests []map[string]any
	headers  []http.Header
}

func newFakeAPI(t *testing.T, path, file string) (*fakeAPI, *httptest.Server) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{t: t, path: path}
	if err := json.Unmarshal(b, &f.turns); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != f.path {
		http.Error(w, fmt.Sprintf(`{"error":{"message":"fake API: no %s %s"}}`, r.Method, r.URL.Path), http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	n := len(f.requests)
	f.requests = append(f.requests, body)
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	if n >= len(f.turns) {
		http.Error(w, `{"error":{"message":"fake API: out of recorded turns"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(f.turns[n])
}

func (f *fakeAPI) request(i int) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.requests) {
		f.t.Fatalf("the model API got %d requests, want at least %d", len(f.requests), i+1)
	}
	return f.requests[i]
}

// lastMessage returns the last message of request i to the Messages API.
func (f *fakeAPI) lastMessage(i int) any {
	msgs, _ := get(f.request(i), "messages").([]any)
	if len(msgs) == 0 {
		f.t.Fatalf("request %d has no messages", i)
	}
	return msgs[len(msgs)-1]
}

// writeTurns writes constructed model turns to a file for newFakeAPI.
func writeTurns(t *testing.T, turns string) string {
	t.Helper()
	file := t.TempDir() + "/turns.json"
	if err := os.WriteFile(file, []byte(turns), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// get walks a decoded JSON value: keys for objects, ints for arrays.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// checkTask checks what the recorded task did to the VM, and that the
// episode is over.
func checkTask(t *testing.T, d *farmtest.Desktop, c *client.Client, res agentloop.Result) {
	t.Helper()
	if res.Stop != agentloop.StopDone || res.Steps != 4 {
		t.Errorf("run stopped %q after %d steps, want done after 4", res.Stop, res.Steps)
	}
	screen := d.Screen(res.Episode.VM)
	if screen == nil {
		t.Fatalf("no screen for vm %q", res.Episode.VM)
	}
	if got := screen.Clicks(); !slices.Equal(got, []image.Point{{100, 200}}) {
		t.Errorf("clicks %v, want [(100,200)]", got)
	}
	if got := screen.Typed(); got != "hello" {
		t.Errorf("typed %q, want hello", got)
	}
	if eps, err := c.ListEpisodes(context.Background()); err != nil || len(eps) != 0 {
		t.Errorf("episodes after the run: %+v (%v)", eps, err)
	}
}

// hasImage reports whether a tool_result block holds an image.
func hasImage(block any) bool {
	for _, c := range asList(get(block, "content")) {
		if get(c, "type") == "image" {
			return true
		}
	}
	return false
}

func asList(v any) []any { l, _ := v.([]any); return l }

// brief is a content block without its content, for a failure message
// (a screenshot's base64 would drown it).
func brief(block any) map[string]any {
	m, _ := block.(map[string]any)
	out := map[string]any{}
	for k, v := range m {
		if k != "content" {
			out[k] = v
		}
	}
	return out
}

func claudeClient(srv *httptest.Server) anthropic.Client {
	return anthropic.NewClient(aoption.WithAPIKey("test-key"), aoption.WithBaseURL(srv.URL), aoption.WithMaxRetries(0))
}

// toolsetMembers are the member names of Claude's computer toolset, from
// the json tags of the SDK's per-member configs (anthropic-sdk-go v2.15.0:
// "the field set is this toolset version's complete member set").
func toolsetMembers(t *testing.T) []string {
	t.Helper()
	var names []string
	typ := reflect.TypeFor[anthropic.ComputerToolsetConfigsParam]()
	for i := range typ.NumField() {
		if tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
			names = append(names, tag)
		}
	}
	if len(names) < 17 {
		t.Fatalf("toolset members from the SDK: %v", names)
	}
	slices.Sort(names)
	return names
}

// TestClaudeRecordedTask: by default the loop gives the newest Claude
// model the computer toolset on the GA Messages API, sends each turn's
// tool_use blocks to the actions route as one batch, and answers every
// block with the route's tool_result, toolset_name included.
func TestClaudeRecordedTask(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(d.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	api, srv := newFakeAPI(t, "/v1/messages", "testdata/claude_turns.json")
	var log bytes.Buffer
	res, err := agentloop.Claude(context.Background(), c, claudeClient(srv), agentloop.DefaultClaudeModel,
		"type hello into the field", agentloop.Options{Log: &log})
	t.Logf("step log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	checkTask(t, d, c, res)
	if res.Final != "I typed hello into the field. The task is done." {
		t.Errorf("final text %q", res.Final)
	}
	if !strings.Contains(log.String(), "live view: "+d.Server.URL+"/vms/") {
		t.Errorf("the step log does not link the live view:\n%s", log.String())
	}

	// The GA API (no beta header), the newest model, and one tools[]
	// entry: the toolset, every member enabled.
	first := api.request(0)
	if get(first, "model") != "claude-opus-5-5" {
		t.Errorf("model %v, want claude-opus-5-5", get(first, "model"))
	}
	if h := api.headers[0].Get("Anthropic-Beta"); h != "" {
		t.Errorf("anthropic-beta %q; the toolset is generally available", h)
	}
	tools := asList(get(first, "tools"))
	if len(tools) != 1 || get(tools[0], "type") != "computer_toolset_20260801" || get(tools[0], "name") != nil {
		t.Fatalf("tools %v; want the computer toolset alone", tools)
	}
	configs, _ := get(tools[0], "configs").(map[string]any)
	var members []string
	for name, cfg := range configs {
		members = append(members, name)
		if get(cfg, "enabled") != true {
			t.Errorf("member %s: %v, want enabled", name, cfg)
		}
	}
	slices.Sort(members)
	if want := toolsetMembers(t); !slices.Equal(members, want) {
		t.Errorf("members declared %v, want every one of %v", members, want)
	}
	if get(first, "messages", 0, "content", 0, "text") != "type hello into the field" {
		t.Errorf("first message %v", get(first, "messages", 0))
	}

	// Each later request sends the model's turn back, toolset_name and all,
	// and ends with one tool_result per block of it, in order: only the
	// last of a batch holds the settled screenshot, as the route answers.
	for i, turn := range []struct {
		ids    []string
		images []bool
	}{
		{[]string{"toolu_fake_1"}, []bool{true}},
		{[]string{"toolu_fake_2", "toolu_fake_3"}, []bool{false, true}},
		{[]string{"toolu_fake_4"}, []bool{true}},
	} {
		msgs := asList(get(api.request(i+1), "messages"))
		echoed := msgs[len(msgs)-2]
		for k, id := range turn.ids {
			var use any
			for _, b := range asList(get(echoed, "content")) {
				if get(b, "type") == "tool_use" && get(b, "id") == id {
					use = b
				}
			}
			if get(use, "toolset_name") != "computer" {
				t.Errorf("request %d: the model's tool_use %s sent back as %v", i+2, id, use)
			}
			last := msgs[len(msgs)-1]
			block := get(last, "content", k)
			if get(last, "role") != "user" || get(block, "type") != "tool_result" || get(block, "tool_use_id") != id ||
				get(block, "toolset_name") != "computer" || get(block, "is_error") == true {
				t.Errorf("request %d: content[%d] of the last message is %v; want the tool_result of %s, toolset computer",
					i+2, k, brief(block), id)
				continue
			}
			if hasImage(block) != turn.images[k] {
				t.Errorf("request %d: tool_result of %s holds an image: %v, want %v", i+2, id, hasImage(block), turn.images[k])
			}
		}
		if n := len(asList(get(msgs[len(msgs)-1], "content"))); n != len(turn.ids) {
			t.Errorf("request %d answers %d blocks, want %d", i+2, n, len(turn.ids))
		}
	}
}

// TestClaudeComputer20251124: --tool computer_20251124 keeps the single
// tool on the beta API, one actions request a tool_use.
func TestClaudeComputer20251124(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	api, srv := newFakeAPI(t, "/v1/messages", "testdata/claude_computer_20251124_turns.json")
	opts := agentloop.Options{Tool: agentloop.ToolClaude20251124}
	res, err := agentloop.Claude(context.Background(), c, claudeClient(srv), agentloop.DefaultModel(opts.Tool), "type hello into the field", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkTask(t, d, c, res)

	// The tool is declared with deskfarm's screenshot size, under the beta
	// that has computer_20251124, for the model it came with.
	first := api.request(0)
	tool := get(first, "tools", 0)
	if get(tool, "type") != "computer_20251124" || get(tool, "display_width_px") != 1280.0 || get(tool, "display_height_px") != 800.0 {
		t.Errorf("tool declared as %v", tool)
	}
	if h := api.headers[0].Get("Anthropic-Beta"); !strings.Contains(h, "computer-use-2025-11-24") {
		t.Errorf("anthropic-beta %q", h)
	}
	if get(first, "model") != "claude-opus-4-5" {
		t.Errorf("model %v", get(first, "model"))
	}
	// Each later request answers the previous tool_use with a tool_result
	// holding the settled screenshot.
	for i, id := range []string{"toolu_fake_1", "toolu_fake_2", "toolu_fake_3"} {
		last := api.lastMessage(i + 1)
		block := get(last, "content", 0)
		if get(last, "role") != "user" || get(block, "type") != "tool_result" || get(block, "tool_use_id") != id {
			t.Errorf("request %d ends with %v; want the tool_result of %s", i+2, brief(block), id)
			continue
		}
		if get(block, "is_error") == true || get(block, "toolset_name") != nil || !hasImage(block) {
			t.Errorf("tool_result of %s: %v (image %v)", id, brief(block), hasImage(block))
		}
	}
}

// TestClaudeToolErrorGoesBackToTheModel: a refused action is an is_error
// tool_result the model can read, not the end of the run; the blocks after
// it in the turn are answered as not run, and a block of a tool the loop
// does not have is answered as unknown.
func TestClaudeToolErrorGoesBackToTheModel(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	file := writeTurns(t, `[{"id":"m1","type":"message","role":"assistant","model":"m","stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1},
	  "content":[{"type":"tool_use","id":"toolu_a","name":"left_click","toolset_name":"computer","input":{"coordinate":[5000,5]}},
	   {"type":"tool_use","id":"toolu_b","name":"bash","input":{"command":"ls"}},
	   {"type":"tool_use","id":"toolu_c","name":"type","toolset_name":"computer","input":{"text":"never"}}]},
	 {"id":"m2","type":"message","role":"assistant","model":"m","stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1},
	  "content":[{"type":"text","text":"That was off the screen."}]}]`)
	api, srv := newFakeAPI(t, "/v1/messages", file)
	res, err := agentloop.Claude(context.Background(), c, claudeClient(srv), "m", "click", agentloop.Options{})
	if err != nil || res.Stop != agentloop.StopDone {
		t.Fatalf("run: %+v %v", res, err)
	}
	last := api.lastMessage(1)
	for k, want := range []struct{ id, toolset, text string }{
		{"toolu_a", "computer", "outside"},
		{"toolu_b", "", "unknown tool"},
		{"toolu_c", "computer", "Not executed"},
	} {
		block := get(last, "content", k)
		text, _ := get(block, "content", 0, "text").(string)
		toolset, _ := get(block, "toolset_name").(string)
		if get(block, "tool_use_id") != want.id || get(block, "is_error") != true || toolset != want.toolset || !strings.Contains(text, want.text) {
			t.Errorf("tool_result %d: %v; want is_error for %s (toolset %q) saying %q", k, block, want.id, want.toolset, want.text)
		}
	}
	if got := d.Screen(res.Episode.VM).Typed(); got != "" {
		t.Errorf("typed %q after the failed click; the rest of the turn must not run", got)
	}
}

// TestClaudeKeepsTheLatestScreenshots: older tool results lose their
// images, so requests do not grow by a screenshot a step.
func TestClaudeKeepsTheLatestScreenshots(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	var turns []string
	for i := range 5 {
		turns = append(turns, fmt.Sprintf(`{"id":"m%d","type":"message","role":"assistant","model":"m","stop_reason":"tool_use",
		  "usage":{"input_tokens":1,"output_tokens":1},
		  "content":[{"type":"tool_use","id":"toolu_%d","name":"screenshot","toolset_name":"computer","input":{}}]}`, i, i))
	}
	turns = append(turns, `{"id":"m9","type":"message","role":"assistant","model":"m","stop_reason":"end_turn",
	  "usage":{"input_tokens":1,"output_tokens":1},"content":[{"type":"text","text":"seen"}]}`)
	api, srv := newFakeAPI(t, "/v1/messages", writeTurns(t, "["+strings.Join(turns, ",")+"]"))
	if res, err := agentloop.Claude(context.Background(), c, claudeClient(srv), "m", "look", agentloop.Options{}); err != nil || res.Stop != agentloop.StopDone {
		t.Fatalf("run: %+v %v", res, err)
	}
	// The last request holds 5 tool results; only the latest 3 have images.
	var images []bool
	for _, m := range asList(get(api.request(5), "messages")) {
		if block := get(m, "content", 0); get(block, "type") == "tool_result" {
			images = append(images, hasImage(block))
		}
	}
	if !slices.Equal(images, []bool{false, false, true, true, true}) {
		t.Errorf("tool results with images: %v, want the latest 3", images)
	}
}

func TestClaudeMaxSteps(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	_, srv := newFakeAPI(t, "/v1/messages", "testdata/claude_turns.json")
	res, err := agentloop.Claude(context.Background(), c, claudeClient(srv), "m", "task", agentloop.Options{MaxSteps: 2})
	if err != nil || res.Stop != agentloop.StopMaxSteps || res.Steps != 2 {
		t.Fatalf("run: %+v %v; want max_steps after 2", res, err)
	}
	if eps, _ := c.ListEpisodes(context.Background()); len(eps) != 0 {
		t.Errorf("episodes after the run: %+v", eps)
	}
}

// TestUnknownTool: a tool of the other provider is refused before an
// episode is leased.
func TestUnknownTool(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	_, srv := newFakeAPI(t, "/v1/messages", "testdata/claude_turns.json")
	_, err := agentloop.Claude(context.Background(), c, claudeClient(srv), "m", "t", agentloop.Options{Tool: agentloop.ToolOpenAI})
	if !errors.Is(err, agentloop.ErrUnknownTool) {
		t.Errorf("claude with %s: %v, want ErrUnknownTool", agentloop.ToolOpenAI, err)
	}
	_, osrv := newFakeAPI(t, "/responses", "testdata/openai_turns.json")
	_, err = agentloop.OpenAI(context.Background(), c, openAIClient(osrv), "m", "t", agentloop.Options{Tool: agentloop.ToolClaudeToolset})
	if !errors.Is(err, agentloop.ErrUnknownTool) {
		t.Errorf("openai with %s: %v, want ErrUnknownTool", agentloop.ToolClaudeToolset, err)
	}
	if eps, _ := c.ListEpisodes(context.Background()); len(eps) != 0 {
		t.Errorf("episodes: %+v", eps)
	}
}

func openAIClient(srv *httptest.Server) openai.Client {
	return openai.NewClient(ooption.WithAPIKey("test-key"), ooption.WithBaseURL(srv.URL), ooption.WithMaxRetries(0))
}

// checkOutputs checks that requests 1-3 continue the previous response with
// the route's computer_call_output of its call: a screenshot as a data URL.
func checkOutputs(t *testing.T, api *fakeAPI) {
	t.Helper()
	for i, id := range []string{"call_fake_1", "call_fake_2", "call_fake_3"} {
		req := api.request(i + 1)
		item := get(req, "input", 0)
		if get(req, "previous_response_id") != fmt.Sprintf("resp_fake_%d", i+1) ||
			get(item, "type") != "computer_call_output" || get(item, "call_id") != id || len(asList(get(req, "input"))) != 1 {
			t.Errorf("request %d: previous_response_id %v, input %v; want the output of %s", i+2,
				get(req, "previous_response_id"), get(req, "input"), id)
			continue
		}
		url, _ := get(item, "output", "image_url").(string)
		if get(item, "output", "type") != "computer_screenshot" || !strings.HasPrefix(url, "data:image/png;base64,") {
			t.Errorf("output of %s: %v", id, get(item, "output", "type"))
		}
		if get(item, "acknowledged_safety_checks") != nil {
			t.Errorf("output of %s acknowledges safety checks unasked", id)
		}
	}
}

// TestOpenAIRecordedTask: by default the loop gives the model OpenAI's GA
// computer tool, sends each computer_call with its batch of actions to the
// actions route, and sends the route's computer_call_output back.
func TestOpenAIRecordedTask(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(d.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	api, srv := newFakeAPI(t, "/responses", "testdata/openai_turns.json")
	var log bytes.Buffer
	res, err := agentloop.OpenAI(context.Background(), c, openAIClient(srv), agentloop.DefaultOpenAIModel, "type hello", agentloop.Options{Log: &log})
	t.Logf("step log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	checkTask(t, d, c, res)
	if res.Final != "I typed hello. Done." {
		t.Errorf("final text %q", res.Final)
	}
	if x, y := d.Screen(res.Episode.VM).CursorPos(); x != 300 || y != 400 {
		t.Errorf("pointer at %d,%d after the last batch, want 300,400", x, y)
	}
	first := api.request(0)
	if tools := asList(get(first, "tools")); len(tools) != 1 || !reflect.DeepEqual(tools[0], map[string]any{"type": "computer"}) {
		t.Errorf("tools %v; want [{\"type\":\"computer\"}]", tools)
	}
	if get(first, "model") != "gpt-5.4" || get(first, "input") != "type hello" {
		t.Errorf("first request %v", first)
	}
	checkOutputs(t, api)
}

// TestOpenAIComputerUsePreview: --tool computer_use_preview keeps the
// preview tool, told the screenshot size, one action a call.
func TestOpenAIComputerUsePreview(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	api, srv := newFakeAPI(t, "/responses", "testdata/openai_preview_turns.json")
	opts := agentloop.Options{Tool: agentloop.ToolOpenAIPreview}
	res, err := agentloop.OpenAI(context.Background(), c, openAIClient(srv), agentloop.DefaultModel(opts.Tool), "type hello", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkTask(t, d, c, res)
	first := api.request(0)
	tool := get(first, "tools", 0)
	if get(tool, "type") != "computer_use_preview" || get(tool, "display_width") != 1280.0 ||
		get(tool, "display_height") != 800.0 || get(tool, "environment") != "linux" {
		t.Errorf("tool declared as %v", tool)
	}
	if get(first, "truncation") != "auto" || get(first, "model") != "computer-use-preview" {
		t.Errorf("first request %v", first)
	}
	checkOutputs(t, api)
}

// safetyTurns is a computer_call with a pending safety check, then the end.
const safetyTurns = `[{"id":"r1","object":"response","created_at":1,"model":"gpt-5.4","status":"completed","output":[
	  {"type":"computer_call","id":"cu1","call_id":"c1","status":"completed","actions":[{"type":"screenshot"}],
	   "pending_safety_checks":[{"id":"sc1","code":"malicious_instructions","message":"check the screen"}]}]},
	 {"id":"r2","object":"response","created_at":2,"model":"gpt-5.4","status":"completed","output":[
	  {"type":"message","id":"m2","role":"assistant","status":"completed","content":[{"type":"output_text","text":"ok","annotations":[]}]}]}]`

// TestOpenAISafetyCheckStops: a pending safety check stops the run unless
// the options acknowledge it; then the route's output acknowledges it.
func TestOpenAISafetyCheckStops(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	_, srv := newFakeAPI(t, "/responses", writeTurns(t, safetyTurns))
	var log bytes.Buffer
	res, err := agentloop.OpenAI(context.Background(), c, openAIClient(srv), "m", "t", agentloop.Options{Log: &log})
	if err != nil || res.Stop != agentloop.StopRefused {
		t.Fatalf("run: %+v %v; want refused", res, err)
	}
	if !strings.Contains(log.String(), "malicious_instructions") {
		t.Errorf("the log does not show the check:\n%s", log.String())
	}

	api, srv := newFakeAPI(t, "/responses", writeTurns(t, safetyTurns))
	res, err = agentloop.OpenAI(context.Background(), c, openAIClient(srv), "m", "t", agentloop.Options{AcknowledgeSafetyChecks: true})
	if err != nil || res.Stop != agentloop.StopDone {
		t.Fatalf("run acknowledging: %+v %v; want done", res, err)
	}
	ack := get(api.request(1), "input", 0, "acknowledged_safety_checks", 0)
	if get(ack, "id") != "sc1" || get(ack, "code") != "malicious_instructions" {
		t.Errorf("acknowledged %v, want sc1", get(api.request(1), "input", 0))
	}
}

// TestClaudeRecord: --record starts the episode with record, each call
// carries its turn's text as model_response (a turn without text sends
// none), and the log ends saying where the trajectory is.
func TestClaudeRecord(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	target, _ := url.Parse(d.Server.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	var mu sync.Mutex
	var starts []api.StartEpisodeRequest
	var responses []string
	farm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/episodes":
			var req api.StartEpisodeRequest
			json.Unmarshal(body, &req)
			starts = append(starts, req)
			mu.Unlock()
			// The farm under test has no trajectories (it refuses record):
			// ask it without, and answer as one that records.
			req.Record = nil
			body, _ = json.Marshal(req)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			rec := httptest.NewRecorder()
			proxy.ServeHTTP(rec, r)
			var ep api.Episode
			json.Unmarshal(rec.Body.Bytes(), &ep)
			ep.Recording, ep.TrajectoryURL = true, "/trajectories/"+ep.ID
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(rec.Code)
			json.NewEncoder(w).Encode(ep)
			return
		case strings.HasSuffix(r.URL.Path, "/actions"):
			var req api.ActionsRequest
			json.Unmarshal(body, &req)
			if req.Tool != "" { // the loop's own screenshot is no model's call
				responses = append(responses, req.ModelResponse)
			}
		}
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer farm.Close()
	c, _ := client.New(farm.URL)
	_, srv := newFakeAPI(t, "/v1/messages", "testdata/claude_turns.json")
	var log bytes.Buffer
	res, err := agentloop.Claude(context.Background(), c, claudeClient(srv), agentloop.DefaultClaudeModel,
		"type hello into the field", agentloop.Options{Log: &log, Record: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(starts) != 1 || starts[0].Record == nil || !*starts[0].Record {
		t.Errorf("episode starts %+v, want one with record", starts)
	}
	want := []string{"I'll take a screenshot to see the desktop.", "I'll click into the text field and type.", ""}
	if !slices.Equal(responses, want) {
		t.Errorf("model_response of the calls %q, want %q", responses, want)
	}
	if w := "trajectory " + res.Episode.ID + ": " + farm.URL + "/trajectories/" + res.Episode.ID + "\n"; !strings.Contains(log.String(), w) {
		t.Errorf("the log does not say %q:\n%s", w, log.String())
	}
	if !strings.Contains(log.String(), "deskfarm episode export "+res.Episode.ID+" DIR") {
		t.Errorf("the log does not say how to export:\n%s", log.String())
	}
}
