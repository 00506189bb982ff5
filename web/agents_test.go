package web

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3/responses"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/vmm"
)

// Every vocabulary reaches the actions route and is answered in its own
// shape. The desk plays on a still fake screen; guest input goes to the fake
// farm's Exec, which records it.

func postActions(t *testing.T, url, body string, want int) api.ActionsResponse {
	t.Helper()
	code, b := send(t, "POST", url+"/v1/vms/vm1/actions", body)
	if code != want {
		t.Fatalf("POST actions %s: %d %s, want %d", body, code, b, want)
	}
	var res api.ActionsResponse
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return res
}

func TestActionsOpenAIComputerCall(t *testing.T) {
	srv, _ := deskServer(t, Options{})
	// The item as the Responses API emits it (shape from openai-go v3.99.0
	// ResponseComputerToolCall; ids made up).
	item := `{"type":"computer_call","id":"cu_1","call_id":"call_7","status":"completed",
		"action":{"type":"click","button":"left","x":100,"y":50},
		"pending_safety_checks":[{"id":"sc_1","code":"malicious_instructions","message":"check"}]}`
	for _, ack := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"tool": "computer_use_preview", "input": json.RawMessage(item),
			"acknowledge_safety_checks": ack})
		res := postActions(t, srv.URL, string(body), 200)
		if res.ComputerCallOutput == nil {
			t.Fatalf("no computer_call_output: %+v", res)
		}
		raw, _ := json.Marshal(res.ComputerCallOutput)
		var out responses.ResponseInputItemComputerCallOutput
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		if out.CallID != "call_7" || string(out.Type) != "computer_call_output" || string(out.Output.Type) != "computer_screenshot" ||
			!strings.HasPrefix(out.Output.ImageURL, "data:image/png;base64,") {
			t.Errorf("computer_call_output %s", raw)
		}
		if got := len(out.AcknowledgedSafetyChecks); (got == 1) != ack {
			t.Errorf("acknowledge_safety_checks=%v: %d acknowledged in %s", ack, got, raw)
		}
	}
}

func TestActionsToolsetFailingMiddle(t *testing.T) {
	srv, _ := deskServer(t, Options{})
	turn := `[{"type":"tool_use","id":"tu_1","name":"left_click","input":{"coordinate":[10,10]}},
		{"type":"tool_use","id":"tu_2","name":"left_click","input":{"coordinate":[5000,10]}},
		{"type":"tool_use","id":"tu_3","name":"screenshot","input":{}}]`
	res := postActions(t, srv.URL, `{"tool":"computer_toolset_20260801","input":`+turn+`}`, 200)
	if len(res.ToolResults) != 3 {
		t.Fatalf("%d tool_results, want 3: %+v", len(res.ToolResults), res.ToolResults)
	}
	for i, id := range []string{"tu_1", "tu_2", "tu_3"} {
		tr := res.ToolResults[i]
		if tr.ToolUseID != id || tr.Type != "tool_result" || tr.ToolsetName != "computer" {
			t.Errorf("result %d: %s %s toolset_name %q", i, tr.Type, tr.ToolUseID, tr.ToolsetName)
		}
		if tr.IsError != (i > 0) {
			t.Errorf("result %d is_error=%v", i, tr.IsError)
		}
	}
	if c := res.ToolResults[1].Content; len(c) != 1 || !strings.Contains(c[0].Text, "coordinate") {
		t.Errorf("failed block's text %+v does not name coordinate", c)
	}
	if c := res.ToolResults[2].Content; len(c) != 1 || !strings.Contains(c[0].Text, "Not executed") {
		t.Errorf("block after the failure %+v", c)
	}
}

// TestActionsToolsetErrorsAsResults: a toolset turn that cannot run at all
// (here, bad run options) is answered, with errors_as_results, by one
// is_error tool_result per block, each carrying toolset_name as a result of
// a played turn does, so that an agent loop can send them on unchanged.
func TestActionsToolsetErrorsAsResults(t *testing.T) {
	srv, _ := deskServer(t, Options{})
	turn := `[{"type":"tool_use","id":"tu_1","name":"left_click","toolset_name":"computer","input":{"coordinate":[10,10]}},
		{"type":"tool_use","id":"tu_2","name":"screenshot","toolset_name":"computer","input":{}}]`
	res := postActions(t, srv.URL, `{"tool":"computer_toolset_20260801","input":`+turn+`,"settle_quiet_ms":20000,"errors_as_results":true}`, 200)
	if len(res.ToolResults) != 2 {
		t.Fatalf("%d tool_results, want 2: %+v", len(res.ToolResults), res)
	}
	for i, tr := range res.ToolResults {
		if tr.ToolUseID != []string{"tu_1", "tu_2"}[i] || !tr.IsError || tr.ToolsetName != "computer" ||
			len(tr.Content) != 1 || !strings.Contains(tr.Content[0].Text, "settle_quiet_ms") {
			t.Errorf("result %d: %+v", i, tr)
		}
	}
}

func TestActionsClaudeErrorsAsResults(t *testing.T) {
	srv, _ := deskServer(t, Options{})
	in := `"tool":"computer_20251124","input":{"action":"left_click","coordinate":[5000,10]}`
	code, b := send(t, "POST", srv.URL+"/v1/vms/vm1/actions", `{`+in+`}`)
	var e api.ErrorResponse
	_ = json.Unmarshal(b, &e)
	if code != 400 || e.Error.Field != "coordinate" {
		t.Errorf("without errors_as_results: %d %s", code, b)
	}
	res := postActions(t, srv.URL, `{`+in+`,"errors_as_results":true,"tool_use_id":"toolu_9"}`, 200)
	if !res.IsError || res.ToolUseID != "toolu_9" || len(res.Content) != 1 || res.Content[0].Type != "text" ||
		!strings.Contains(res.Content[0].Text, "coordinate") {
		t.Errorf("errors_as_results: %+v", res)
	}
	// A failure before anything runs (an unknown action) answers the same way.
	res = postActions(t, srv.URL, `{"tool":"computer_20251124","input":{"action":"fly"},"errors_as_results":true}`, 200)
	if !res.IsError || len(res.Content) != 1 {
		t.Errorf("unknown action as a result: %+v", res)
	}
	// Success echoes the id and keeps the content.
	res = postActions(t, srv.URL, `{"tool":"computer_20251124","input":{"action":"screenshot"},"tool_use_id":"toolu_1"}`, 200)
	if res.IsError || res.ToolUseID != "toolu_1" || len(res.Content) != 1 || res.Content[0].Type != "image" {
		t.Errorf("screenshot: %+v", res)
	}
}

func TestActionsGuestInput(t *testing.T) {
	srv, farm := deskServer(t, Options{})
	var execs []vmm.ExecRequest
	farm.ExecFn = func(r vmm.ExecRequest) (vmm.ExecResult, error) {
		execs = append(execs, r)
		if strings.Contains(strings.Join(r.Argv, " "), "xclip -selection clipboard -o") {
			return vmm.ExecResult{Stdout: []byte("Grüße ✓")}, nil
		}
		return vmm.ExecResult{}, nil
	}
	const text = "Grüße, café — naïve ✓ 日本語"
	body, _ := json.Marshal(map[string]any{"tool": "computer_20251124", "input": map[string]any{"action": "type", "text": text}})
	postActions(t, srv.URL, string(body), 200)
	var typed bool
	for _, r := range execs {
		if strings.Contains(strings.Join(r.Argv, " "), "shift+Insert") {
			typed = string(r.Stdin) == text
		}
	}
	if !typed {
		t.Errorf("non-ASCII text did not reach the guest's paste on stdin: %+v", execs)
	}
	res := postActions(t, srv.URL, `{"action":{"kind":"clipboard_get"}}`, 200)
	if res.Clipboard == nil || *res.Clipboard != "Grüße ✓" {
		t.Errorf("clipboard = %v", res.Clipboard)
	}
	// Code that is not literal pyautogui calls runs in the guest.
	farm.ExecFn = func(r vmm.ExecRequest) (vmm.ExecResult, error) {
		return vmm.ExecResult{ExitCode: 0, Stdout: []byte(strings.Join(r.Argv, "\x00"))}, nil
	}
	res = postActions(t, srv.URL, `{"tool":"pyautogui","input":"for i in range(2): pyautogui.press('a')"}`, 200)
	if res.Guest == nil || !strings.Contains(res.Guest.Stdout, "python3\x00-c\x00import pyautogui;") ||
		!strings.Contains(res.Guest.Stdout, "setpriv") {
		t.Errorf("pyautogui in the guest: %+v", res.Guest)
	}
}
