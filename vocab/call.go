package vocab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/deskfarm/deskfarm/internal/fielderr"
	"github.com/openai/openai-go/v3/responses"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// Tool names Decode accepts besides the Claude versions.
const (
	// ToolNeutral is deskfarm's own action list (DecodeActions).
	ToolNeutral = "neutral"
	// ToolOpenAIPreview and ToolOpenAI are OpenAI's computer-use tool types
	// (ComputerUsePreviewToolParam, ComputerToolParam in openai-go/v3).
	ToolOpenAIPreview = "computer_use_preview"
	ToolOpenAI        = "computer"
	// ToolOSWorld is OSWorld's computer_13 action space.
	ToolOSWorld = "computer_13"
	// ToolPyautogui is OSWorld's pyautogui action space: Python code.
	ToolPyautogui = "pyautogui"
)

// Tools lists every tool name Decode accepts.
func Tools() []string {
	return append(claudeToolNames(), ToolOpenAIPreview, ToolOpenAI, ToolOSWorld, ToolPyautogui, ToolNeutral)
}

// Call is one agent call decoded into neutral actions, with what it takes to
// answer in the agent's own vocabulary.
type Call struct {
	// Tool is the vocabulary, as named in the request.
	Tool string
	// Actions are the neutral actions to play (none for a toolset turn,
	// whose blocks RunToolset plays one by one, or an OSWorld DONE/FAIL).
	Actions []actions.Action
	// Terminal is "DONE" or "FAIL" for OSWorld's episode signals.
	Terminal string
	// Toolset holds the tool_use blocks of a computer_toolset_20260801 turn.
	Toolset []anthropic.ToolUseBlock
	// OpenAI is the computer_call item of an OpenAI call.
	OpenAI *responses.ResponseComputerToolCall

	// fields names, per action, the agent's field for an executor field
	// ("x" -> "coordinate"); nil entries keep the neutral name.
	fields []func(fielderr.Path) fielderr.Path
	// labels name, per action, the agent's action for a StepError; ""
	// keeps "actions[i] (kind)".
	labels []string
}

// Decode turns an agent's call into a Call: the one entry for every
// vocabulary. tool selects it:
//   - computer_20241022, computer_20250124, computer_20251124: input is a
//     Claude computer tool input (TranslateClaude);
//   - computer_toolset_20260801: input is the turn's tool_use blocks, a JSON
//     array (or one block object), run with Call.Run or RunToolset;
//   - computer_use_preview, computer: input is an OpenAI computer_call item
//     (or a bare action object) (TranslateOpenAICall);
//   - computer_13: input is an OSWorld computer_13 action (TranslateOSWorld);
//   - pyautogui: input is a JSON string of Python code, or {"command":
//     code}; code other than literal pyautogui calls fails with
//     ErrNotHostPlayable, for the caller to run it in the guest instead
//     (TranslatePyautogui);
//   - neutral or "": input is a neutral action list (DecodeActions).
//
// Errors are *FieldError in the agent's vocabulary; an unknown tool names
// "tool".
func Decode(tool string, input json.RawMessage) (*Call, error) {
	c := &Call{Tool: tool}
	var err error
	switch tool {
	case string(Computer20241022), string(Computer20250124), string(Computer20251124):
		c.Actions, err = TranslateClaude(ClaudeVersion(tool), input)
		c.fieldsAll(claudeAgentField)
		c.labelAll(tool + " " + claudeActionName(input))
	case string(ComputerToolset20260801):
		c.Toolset, err = DecodeToolset(input)
	case ToolOpenAIPreview, ToolOpenAI:
		var oc *OpenAICall
		if oc, err = TranslateOpenAICall(input); err == nil {
			c.Actions, c.OpenAI, c.fields, c.labels = oc.Actions, oc.Item, oc.fields, oc.labels
		}
	case ToolOSWorld:
		c.Actions, c.Terminal, err = TranslateOSWorld(input)
		c.fieldsAll(osworldAgentField)
		c.labelAll(ToolOSWorld + " " + osworldActionName(input))
	case ToolPyautogui:
		var code string
		if code, err = pyautoguiCode(input); err == nil {
			c.Actions, err = TranslatePyautogui(code)
		}
	case ToolNeutral, "":
		c.Actions, err = actions.DecodeActions(input)
	default:
		err = actions.OneOf("tool", actions.ErrUnsupportedAction, Tools(),
			fmt.Sprintf("unknown tool %q; accepted are %s", tool, strings.Join(Tools(), ", ")))
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// constant returns a vocabulary's translate function for an action without
// fields: it always answers acts.
func constant[In any](acts ...actions.Action) func(In) ([]actions.Action, error) {
	return func(In) ([]actions.Action, error) { return slices.Clone(acts), nil }
}

// fieldsAll names the fields of every action with f.
func (c *Call) fieldsAll(f func(a actions.Action, field fielderr.Path) fielderr.Path) {
	c.fields = make([]func(fielderr.Path) fielderr.Path, len(c.Actions))
	for i, a := range c.Actions {
		c.fields[i] = func(field fielderr.Path) fielderr.Path { return f(a, field) }
	}
}

// labelAll labels every action's StepError with label.
func (c *Call) labelAll(label string) {
	c.labels = make([]string, len(c.Actions))
	for i := range c.labels {
		c.labels[i] = strings.TrimSpace(label)
	}
}

// claudeActionName reads the action of a Claude tool input, for labels.
func claudeActionName(input []byte) string {
	var in struct{ Action string }
	_ = json.Unmarshal(input, &in)
	return in.Action
}

// osworldActionName reads the action_type of a computer_13 action.
func osworldActionName(input []byte) string {
	var in struct {
		ActionType string `json:"action_type"`
	}
	_ = json.Unmarshal(input, &in)
	return in.ActionType
}

// AgentError puts an error from running c.Actions in the agent's terms: a
// refused field ("actions[0].x") gets the agent's own name ("coordinate",
// "action.x", "actions[2].path[1]"), and a failure while playing names the
// agent's action ("actions[1] (drag): ..." rather than the executor's
// index). Other errors are returned unchanged.
func (c *Call) AgentError(err error) error {
	if se, ok := errors.AsType[*actions.StepError](err); ok {
		if se.Index < len(c.labels) && c.labels[se.Index] != "" {
			cp := *se
			cp.Label = c.labels[se.Index]
			return &cp
		}
		return err
	}
	list, rest, _ := fielderr.PathOf(err).Head()
	elem, field, ok := rest.Head()
	if list.Name != "actions" || !ok || elem.Name != "" {
		return err
	}
	i := elem.Index
	if i >= len(c.fields) || c.fields[i] == nil {
		return err
	}
	return fielderr.Rename(err, func(fielderr.Path) fielderr.Path { return c.fields[i](field) })
}

// ReplyOptions are per-request options of how Call.Run answers.
type ReplyOptions struct {
	// ErrorsAsResults answers a failed Claude call with a tool_result
	// holding is_error and the error's text, which an agent loop can
	// forward unchanged, instead of returning the error.
	ErrorsAsResults bool `json:"errors_as_results,omitempty"`
	// ToolUseID is the tool_use id a Claude tool_result answers.
	ToolUseID string `json:"tool_use_id,omitempty"`
	// AcknowledgeSafetyChecks copies an OpenAI computer_call's
	// pending_safety_checks into the output's acknowledged_safety_checks.
	// Acknowledging is the developer's or operator's decision, so it is off
	// by default and the loop adds them itself.
	AcknowledgeSafetyChecks bool `json:"acknowledge_safety_checks,omitempty"`
}

// Reply is the answer to a Call in its vocabulary; which fields are set
// depends on the tool.
type Reply struct {
	// Result is what the actions returned (for a toolset turn, the last
	// block that ran).
	Result player.Result
	// Claude is the tool_result of a single-tool Claude call.
	Claude *anthropic.ToolResultBlockParam
	// Toolset are the tool_results of a toolset turn, one per block, in
	// order.
	Toolset []anthropic.ToolResultBlockParam
	// OpenAI is the computer_call_output item of an OpenAI call.
	OpenAI *responses.ResponseInputItemComputerCallOutputParam
	// Terminal is OSWorld's DONE or FAIL (nothing was run).
	Terminal string
}

// Run plays the call on r and builds the reply in the call's vocabulary.
// Errors carry the agent's field names (AgentError). With
// ro.ErrorsAsResults a Claude failure is answered in Reply.Claude instead;
// a toolset turn always answers failures in its tool_results.
func (c *Call) Run(ctx context.Context, r player.Runner, opts player.RunOptions, ro ReplyOptions) (Reply, error) {
	var rep Reply
	switch {
	case c.Terminal != "":
		rep.Terminal = c.Terminal
		return rep, nil
	case c.Toolset != nil:
		rep.Toolset, rep.Result = RunToolset(ctx, r, c.Toolset, opts)
		return rep, nil
	case c.OpenAI != nil:
		// The output is a screenshot: always take one after the actions.
		opts.Screenshot = player.ScreenshotAlways
	}
	res, err := r.Run(ctx, c.Actions, opts)
	rep.Result = res
	if err != nil {
		err = c.AgentError(err)
	}
	switch {
	case c.isClaude() && (err == nil || ro.ErrorsAsResults):
		tr := ClaudeToolResult(ro.ToolUseID, res, err)
		rep.Claude = &tr
		return rep, nil
	case err != nil:
		return rep, err
	case c.OpenAI != nil:
		out, err := OpenAIOutput(c.OpenAI, res, ro.AcknowledgeSafetyChecks)
		if err != nil {
			return rep, err
		}
		rep.OpenAI = &out
	}
	return rep, nil
}

func (c *Call) isClaude() bool {
	switch ClaudeVersion(c.Tool) {
	case Computer20241022, Computer20250124, Computer20251124:
		return true
	}
	return false
}

// claudeAgentField names an executor field in Claude's computer tool input.
func claudeAgentField(_ actions.Action, f fielderr.Path) fielderr.Path {
	switch f.Base() {
	case "x", "y", "via":
		return fielderr.Name("coordinate")
	case "from":
		return fielderr.Name("start_coordinate")
	case "region", "width", "height":
		return fielderr.Name("region")
	case "text", "keys", "modifiers":
		return fielderr.Name("text")
	case "duration_ms":
		return fielderr.Name("duration")
	case "direction":
		return fielderr.Name("scroll_direction")
	case "amount":
		return fielderr.Name("scroll_amount")
	case "button", "count", "kind", "":
		return fielderr.Name("action")
	}
	return f
}

// toolsetAgentField names an executor field in a toolset block: as Claude's
// tool, but the action is the block's name.
func toolsetAgentField(a actions.Action, f fielderr.Path) fielderr.Path {
	if p := claudeAgentField(a, f); len(p) != 1 || p.Base() != "action" {
		return p
	}
	return fielderr.Name("name")
}

// osworldParam is the path of a computer_13 parameter.
func osworldParam(name string) fielderr.Path { return fielderr.Name("parameters").Name(name) }

// osworldAgentField names an executor field in a computer_13 action.
func osworldAgentField(a actions.Action, f fielderr.Path) fielderr.Path {
	switch f.Base() {
	case "x", "y", "via", "from":
		return osworldParam("x")
	case "text":
		return osworldParam("text")
	case "keys", "modifiers":
		return osworldParam("keys")
	case "button":
		return osworldParam("button")
	case "count":
		return osworldParam("num_clicks")
	case "direction", "amount":
		if s, ok := a.(actions.Scroll); ok && (s.Direction == actions.ScrollLeft || s.Direction == actions.ScrollRight) {
			return osworldParam("dx")
		}
		return osworldParam("dy")
	case "kind", "":
		return fielderr.Name("action_type")
	}
	return f
}
