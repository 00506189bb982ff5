package agentloop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/deskfarm/deskfarm/agentloop"
	"github.com/deskfarm/deskfarm/client"
	"github.com/deskfarm/deskfarm/internal/farmtest"
	"github.com/deskfarm/deskfarm/web"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
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

func TestClaudeRecordedTask(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(d.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	api, srv := newFakeAPI(t, "/v1/messages", "testdata/claude_turns.json")
	llm := anthropic.NewClient(aoption.WithAPIKey("test-key"), aoption.WithBaseURL(srv.URL), aoption.WithMaxRetries(0))
	var log bytes.Buffer
	res, err := agentloop.Claude(context.Background(), c, llm, "claude-opus-4-5", "type hello into the field",
		agentloop.Options{Log: &log})
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

	// The tool is declared with deskfarm's screenshot size, under the beta
	// that has computer_20251124.
	first := api.request(0)
	tool := get(first, "tools", 0)
	if get(tool, "type") != "computer_20251124" || get(tool, "display_width_px") != 1280.0 || get(tool, "display_height_px") != 800.0 {
		t.Errorf("tool declared as %v", tool)
	}
	if h := api.headers[0].Get("Anthropic-Beta"); !strings.Contains(h, "computer-use-2025-11-24") {
		t.Errorf("anthropic-beta %q", h)
	}
	if get(first, "messages", 0, "content", 0, "text") != "type hello into the field" {
		t.Errorf("first message %v", get(first, "messages", 0))
	}
	// Each later request answers the previous tool_use with a tool_result
	// holding the settled screenshot.
	for i, id := range []string{"toolu_fake_1", "toolu_fake_2", "toolu_fake_3"} {
		msgs, _ := get(api.request(i+1), "messages").([]any)
		last := msgs[len(msgs)-1]
		block := get(last, "content", 0)
		if get(last, "role") != "user" || get(block, "type") != "tool_result" || get(block, "tool_use_id") != id {
			t.Errorf("request %d ends with %v; want the tool_result of %s", i+2, last, id)
			continue
		}
		if get(block, "is_error") == true {
			t.Errorf("tool_result of %s is an error: %v", id, block)
		}
		var kinds []any
		for _, c := range get(block, "content").([]any) {
			kinds = append(kinds, get(c, "type"))
		}
		if !slices.Contains(kinds, any("image")) {
			t.Errorf("tool_result of %s holds %v, want an image", id, kinds)
		}
	}
}

// TestClaudeToolErrorGoesBackToTheModel: a refused action is an is_error
// tool_result the model can read, not the end of the run.
func TestClaudeToolErrorGoesBackToTheModel(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(d.Server.URL)
	turns := `[{"id":"m1","type":"message","role":"assistant","model":"m","stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1},
	  "content":[{"type":"tool_use","id":"toolu_x","name":"computer","input":{"action":"left_click","coordinate":[5000,5]}}]},
	 {"id":"m2","type":"message","role":"assistant","model":"m","stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1},
	  "content":[{"type":"text","text":"That was off the screen."}]}]`
	file := t.TempDir() + "/turns.json"
	os.WriteFile(file, []byte(turns), 0o644)
	api, srv := newFakeAPI(t, "/v1/messages", file)
	llm := anthropic.NewClient(aoption.WithAPIKey("k"), aoption.WithBaseURL(srv.URL), aoption.WithMaxRetries(0))
	res, err := agentloop.Claude(context.Background(), c, llm, "m", "click", agentloop.Options{})
	if err != nil || res.Stop != agentloop.StopDone {
		t.Fatalf("run: %+v %v", res, err)
	}
	msgs, _ := get(api.request(1), "messages").([]any)
	block := get(msgs[len(msgs)-1], "content", 0)
	text, _ := get(block, "content", 0, "text").(string)
	if get(block, "is_error") != true || !strings.Contains(text, "outside") {
		t.Errorf("tool_result %v; want is_error with the farm's message", block)
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
		  "content":[{"type":"tool_use","id":"toolu_%d","name":"computer","input":{"action":"screenshot"}}]}`, i, i))
	}
	turns = append(turns, `{"id":"m9","type":"message","role":"assistant","model":"m","stop_reason":"end_turn",
	  "usage":{"input_tokens":1,"output_tokens":1},"content":[{"type":"text","text":"seen"}]}`)
	file := t.TempDir() + "/turns.json"
	os.WriteFile(file, []byte("["+strings.Join(turns, ",")+"]"), 0o644)
	api, srv := newFakeAPI(t, "/v1/messages", file)
	llm := anthropic.NewClient(aoption.WithAPIKey("k"), aoption.WithBaseURL(srv.URL), aoption.WithMaxRetries(0))
	if res, err := agentloop.Claude(context.Background(), c, llm, "m", "look", agentloop.Options{}); err != nil || res.Stop != agentloop.StopDone {
		t.Fatalf("run: %+v %v", res, err)
	}
	// The last request holds 5 tool results; only the latest 3 have images.
	var images []bool
	for _, m := range get(api.request(5), "messages").([]any) {
		if block := get(m, "content", 0); get(block, "type") == "tool_result" {
			has := false
			for _, c := range get(block, "content").([]any) {
				has = has || get(c, "type") == "image"
			}
			images = append(images, has)
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
	llm := anthropic.NewClient(aoption.WithAPIKey("k"), aoption.WithBaseURL(srv.URL), aoption.WithMaxRetries(0))
	res, err := agentloop.Claude(context.Background(), c, llm, "m", "task", agentloop.Options{MaxSteps: 2})
	if err != nil || res.Stop != agentloop.StopMaxSteps || res.Steps != 2 {
		t.Fatalf("run: %+v %v; want max_steps after 2", res, err)
	}
	if eps, _ := c.ListEpisodes(context.Background()); len(eps) != 0 {
		t.Errorf("episodes after the run: %+v", eps)
	}
}

// openAIFarm serves the farm behind a stand-in for the actions route's
// OpenAI support (another change of issue 11 adds it to the route): it
// turns {"tool":"computer_use_preview","input":<computer_call>} into the
// Claude input of the same action, decoding the item with openai-go.
func openAIFarm(t *testing.T, d *farmtest.Desktop) string {
	t.Helper()
	u, _ := url.Parse(d.Server.URL)
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/actions") {
			var body map[string]json.RawMessage
			b, _ := io.ReadAll(r.Body)
			json.Unmarshal(b, &body)
			if string(body["tool"]) == `"computer_use_preview"` {
				var call responses.ResponseComputerToolCall
				if err := json.Unmarshal(body["input"], &call); err != nil || call.Type != "computer_call" {
					http.Error(w, "stand-in: not a computer_call", http.StatusBadRequest)
					return
				}
				var in any
				switch a := call.Action.AsAny().(type) {
				case responses.ResponseComputerToolCallActionScreenshot:
					in = map[string]any{"action": "screenshot"}
				case responses.ResponseComputerToolCallActionClick:
					in = map[string]any{"action": "left_click", "coordinate": []int64{a.X, a.Y}}
				case responses.ResponseComputerToolCallActionType:
					in = map[string]any{"action": "type", "text": a.Text}
				default:
					http.Error(w, "stand-in: action not translated", http.StatusBadRequest)
					return
				}
				body["tool"], _ = json.Marshal("computer_20251124")
				body["input"], _ = json.Marshal(in)
				b, _ = json.Marshal(body)
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			r.ContentLength = int64(len(b))
		}
		r.Host = u.Host // the farm answers to its own name only
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestOpenAIRecordedTask(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, err := client.New(openAIFarm(t, d))
	if err != nil {
		t.Fatal(err)
	}
	api, srv := newFakeAPI(t, "/responses", "testdata/openai_turns.json")
	llm := openai.NewClient(ooption.WithAPIKey("test-key"), ooption.WithBaseURL(srv.URL), ooption.WithMaxRetries(0))
	var log bytes.Buffer
	res, err := agentloop.OpenAI(context.Background(), c, llm, agentloop.DefaultOpenAIModel, "type hello", agentloop.Options{Log: &log})
	t.Logf("step log:\n%s", log.String())
	if err != nil {
		t.Fatal(err)
	}
	checkTask(t, d, c, res)
	if res.Final != "I typed hello. Done." {
		t.Errorf("final text %q", res.Final)
	}

	first := api.request(0)
	tool := get(first, "tools", 0)
	if get(tool, "type") != "computer_use_preview" || get(tool, "display_width") != 1280.0 ||
		get(tool, "display_height") != 800.0 || get(tool, "environment") != "linux" {
		t.Errorf("tool declared as %v", tool)
	}
	if get(first, "truncation") != "auto" || get(first, "input") != "type hello" {
		t.Errorf("first request %v", first)
	}
	// Each later request continues the previous response with the
	// computer_call_output of its call, a screenshot as a data URL.
	for i, id := range []string{"call_fake_1", "call_fake_2", "call_fake_3"} {
		req := api.request(i + 1)
		item := get(req, "input", 0)
		if get(req, "previous_response_id") != fmt.Sprintf("resp_fake_%d", i+1) ||
			get(item, "type") != "computer_call_output" || get(item, "call_id") != id {
			t.Errorf("request %d: previous_response_id %v, input %v; want the output of %s", i+2,
				get(req, "previous_response_id"), item, id)
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

// TestOpenAISafetyCheckStops: a pending safety check stops the run unless
// the options acknowledge it.
func TestOpenAISafetyCheckStops(t *testing.T) {
	d := farmtest.ServeDesktop(t, web.Options{})
	c, _ := client.New(openAIFarm(t, d))
	turns := `[{"id":"r1","object":"response","created_at":1,"model":"computer-use-preview","status":"completed","output":[
	  {"type":"computer_call","id":"cu1","call_id":"c1","status":"completed","action":{"type":"screenshot"},
	   "pending_safety_checks":[{"id":"sc1","code":"malicious_instructions","message":"check the screen"}]}]}]`
	file := t.TempDir() + "/turns.json"
	os.WriteFile(file, []byte(turns), 0o644)
	_, srv := newFakeAPI(t, "/responses", file)
	llm := openai.NewClient(ooption.WithAPIKey("k"), ooption.WithBaseURL(srv.URL), ooption.WithMaxRetries(0))
	var log bytes.Buffer
	res, err := agentloop.OpenAI(context.Background(), c, llm, "m", "t", agentloop.Options{Log: &log})
	if err != nil || res.Stop != agentloop.StopRefused {
		t.Fatalf("run: %+v %v; want refused", res, err)
	}
	if !strings.Contains(log.String(), "malicious_instructions") {
		t.Errorf("the log does not show the check:\n%s", log.String())
	}
}
