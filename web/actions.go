package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
	"github.com/deskfarm/deskfarm/guestx"
	"github.com/deskfarm/deskfarm/player"
	"github.com/deskfarm/deskfarm/vocab"
)

const maxActionsBody = 4 << 20

func (s *server) noDisplay() error {
	return &httpError{status: http.StatusNotImplemented, code: api.CodeNoDisplay, msg: "this server has no display backend"}
}

// act serves POST /v1/vms/{id}/actions and an episode's actions: an
// agent's call in its own vocabulary (vocab.Decode), played through the
// VM's desk and answered in the agent's shape.
func (s *server) act(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	var body api.ActionsRequest
	if err := decodeJSON(w, r, &body, maxActionsBody); err != nil {
		return err
	}
	start := time.Now()
	res, err := s.runCall(t, body)
	if err != nil {
		if body.ErrorsAsResults {
			if out, ok := errorResult(body, err, time.Since(start)); ok {
				s.log.Info("action failed; answered as a tool result", "vm", t.vm, "episode", t.episode, "op", "actions", "tool", body.Tool, "err", err)
				writeJSON(w, http.StatusOK, out)
				return nil
			}
		}
		return err
	}
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	writeJSON(w, http.StatusOK, res)
	return nil
}

// runCall decodes, plays and answers one actions request.
func (s *server) runCall(t target, body api.ActionsRequest) (api.ActionsResponse, error) {
	opts := runOptions(body.RunOptions)
	if err := opts.Validate(); err != nil {
		return api.ActionsResponse{}, err
	}
	t.step.tool(body.Tool, body.ModelResponse)
	if body.ScreenshotSize == "" {
		body.ScreenshotSize = t.screenshotSize
	}
	size, err := parseSize(body.ScreenshotSize)
	if err != nil {
		return api.ActionsResponse{}, err
	}
	call, err := decodeCall(body)
	if errors.Is(err, vocab.ErrNotHostPlayable) && body.Tool == vocab.ToolPyautogui {
		return s.runInGuest(t, body, size, opts)
	}
	if err != nil {
		return api.ActionsResponse{}, err
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return api.ActionsResponse{}, err
	}
	var rep vocab.Reply
	sc, err := d.RunCall(t.ctx, size, func(ctx context.Context, r player.Runner) (err error) {
		rep, err = call.Run(ctx, t.step.runner(r), opts, replyOptions(body.ReplyOptions))
		return err
	})
	t.step.size(sc)
	if err != nil {
		return api.ActionsResponse{}, err
	}
	return callResponse(rep, sc.X, sc.Y)
}

// pyautoguiPrefix is what OSWorld's harness puts before pyautogui code it
// runs in the guest (desktop_env/controllers/python.py, run_python_script):
// the imports, and no fail-safe corner, which would abort an agent's drag
// to (0, 0).
const pyautoguiPrefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "

// guestCodeTimeout bounds pyautogui code run in the guest.
const guestCodeTimeout = 90 * time.Second

// runInGuest runs pyautogui code that is not host-playable in the guest's
// desktop session, as OSWorld does (python3 -c), then settles and answers
// with its output and a screenshot as an action request would.
func (s *server) runInGuest(t target, body api.ActionsRequest, size player.ScreenshotSize, opts player.RunOptions) (api.ActionsResponse, error) {
	code, err := pyautoguiCode(body.Input)
	if err != nil {
		return api.ActionsResponse{}, err
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return api.ActionsResponse{}, err
	}
	if since, ok := d.Human(); ok {
		return api.ActionsResponse{}, &desk.HumanControlError{VM: t.vm, Since: since}
	}
	gr, err := guestx.Run(t.ctx, s.farm, t.vm, guestx.Cmd{Argv: []string{"python3", "-c", pyautoguiPrefix + code}, Timeout: guestCodeTimeout})
	if err != nil {
		return api.ActionsResponse{}, fmt.Errorf("pyautogui code in the guest: %w", err)
	}
	// No actions: the settle and the screenshot the policy takes.
	res, err := d.Run(t.ctx, size, nil, opts)
	t.step.played(nil, res.Result, err)
	t.step.size(res.Screenshot)
	if err != nil {
		return api.ActionsResponse{}, err
	}
	out := actionsResponse(res.Result, res.Screenshot.X, res.Screenshot.Y, 0)
	out.Guest = &api.GuestRun{ExitCode: gr.ExitCode, Stdout: string(gr.Stdout), Stderr: string(gr.Stderr)}
	return out, nil
}

// pyautoguiCode reads the code of a pyautogui request: a JSON string, or
// {"command": code}, as vocab.Decode does.
func pyautoguiCode(input json.RawMessage) (string, error) {
	var code string
	if err := json.Unmarshal(input, &code); err == nil {
		return code, nil
	}
	var obj struct {
		Command *string `json:"command"`
	}
	if err := json.Unmarshal(input, &obj); err != nil || obj.Command == nil {
		return "", invalidf("input", `must be a JSON string of Python code, or {"command": code}`)
	}
	return *obj.Command, nil
}

// decodeCall turns the request into an agent call.
func decodeCall(b api.ActionsRequest) (*vocab.Call, error) {
	set := 0
	for _, present := range []bool{b.Tool != "" || len(b.Input) > 0, len(b.Action) > 0, len(b.Actions) > 0} {
		if present {
			set++
		}
	}
	if set != 1 {
		return nil, invalidf("tool", "give exactly one of tool+input (an agent's call), action or actions")
	}
	switch {
	case b.Tool != "":
		if len(b.Input) == 0 {
			return nil, invalidf("input", "required with tool %q", b.Tool)
		}
		return vocab.Decode(b.Tool, b.Input)
	case len(b.Input) > 0:
		return nil, invalidf("tool", "required with input: one of %s", strings.Join(vocab.Tools(), ", "))
	case len(b.Action) > 0:
		return vocab.Decode(vocab.ToolNeutral, append(append([]byte("["), b.Action...), ']'))
	default:
		if bytes.HasPrefix(bytes.TrimSpace(b.Actions), []byte("{")) {
			return nil, invalidf("actions", "must be a list; use action for a single one")
		}
		return vocab.Decode(vocab.ToolNeutral, b.Actions)
	}
}

// errorResult answers a failed request of a Claude agent that asked for
// errors as results: a tool_result with is_error and the error's text, or
// for a toolset turn that could not run at all, every block answered so.
// ok is false for other vocabularies, whose failures stay HTTP errors.
func errorResult(b api.ActionsRequest, err error, took time.Duration) (api.ActionsResponse, bool) {
	out := api.ActionsResponse{DurationMS: float64(took.Microseconds()) / 1000}
	switch {
	case isClaudeTool(b.Tool):
		tr, cerr := apiToolResult(vocab.ClaudeToolResult(b.ToolUseID, player.Result{}, err))
		if cerr != nil {
			return out, false
		}
		out.Content, out.ToolUseID, out.IsError = tr.Content, b.ToolUseID, true
		return out, true
	case b.Tool == string(vocab.ComputerToolset20260801):
		blocks, derr := vocab.DecodeToolset(b.Input)
		if derr != nil || len(blocks) == 0 {
			return out, false
		}
		for _, bl := range blocks {
			tr, cerr := apiToolResult(vocab.ClaudeToolResult(bl.ID, player.Result{}, err))
			if cerr != nil {
				return out, false
			}
			tr.ToolsetName = vocab.ToolsetName
			out.ToolResults = append(out.ToolResults, tr)
		}
		out.Content, out.IsError = out.ToolResults[0].Content, true
		return out, true
	}
	return out, false
}

func isClaudeTool(tool string) bool {
	switch vocab.ClaudeVersion(tool) {
	case vocab.Computer20241022, vocab.Computer20250124, vocab.Computer20251124:
		return true
	}
	return false
}

func parseSize(s string) (player.ScreenshotSize, error) {
	if s == "" {
		s = "auto"
	}
	size, err := player.ParseScreenshotSize(s)
	if err != nil {
		return size, invalidf("screenshot_size", "%v (accepted: auto, native, WxH)", err)
	}
	return size, nil
}

// screenshot serves GET /v1/vms/{id}/screenshot?format=png|jpeg&width=&height=&quality=&fresh=:
// the live framebuffer mirror (cursor included), scaled when asked.
func (s *server) screenshot(w http.ResponseWriter, r *http.Request, t target) error {
	if s.desks == nil {
		return s.noDisplay()
	}
	q := r.URL.Query()
	opts := desk.ScreenshotOptions{Encode: player.EncodeOptions{Format: player.ImageFormat(q.Get("format"))}}
	if v := q.Get("quality"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return invalidf("quality", "%q is not a number (1-100)", v)
		}
		opts.Encode.Quality = n
	}
	if err := opts.Encode.Validate(); err != nil {
		return err
	}
	size := "native"
	if t.screenshotSize != "" {
		size = t.screenshotSize
	}
	wq, hq := q.Get("width"), q.Get("height")
	switch {
	case wq != "" && hq != "":
		size = wq + "x" + hq
	case wq != "" || hq != "":
		return invalidf("width", "give both width and height, or neither")
	case q.Get("size") != "":
		size = q.Get("size")
	}
	var err error
	if opts.Size, err = parseSize(size); err != nil {
		return err
	}
	switch q.Get("fresh") {
	case "", "false", "0":
	case "true", "1":
		opts.Fresh = true
	default:
		return invalidf("fresh", "%q: accepted values are true and false", q.Get("fresh"))
	}
	d, err := s.desks.Get(t.ctx, t.vm)
	if err != nil {
		return err
	}
	out, mt, err := d.Screenshot(t.ctx, opts)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mt)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(out)
	return err
}
