package agentloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// DefaultClaudeModel is the model `deskfarm agent run` gives Claude's
// computer toolset unless told otherwise: the newest Opus anthropic-sdk-go
// v2.15.0 names, the one its deprecation note for claude-opus-4-5 says to
// migrate to.
const DefaultClaudeModel = anthropic.ModelClaudeOpus5_5

// claude20251124Model is the model of the older computer_20251124 tool:
// the one that tool (and its beta header) came out with.
const claude20251124Model = anthropic.ModelClaudeOpus4_5

// claudeMaxTokens bounds one model turn: a few sentences and tool calls.
const claudeMaxTokens = 4096

// keepImages is how many of the latest tool results keep their
// screenshots; older ones are replaced by a note, as the reference demo
// does (only_n_most_recent_images = 3), so a long run's requests do not
// grow by a screenshot a step.
const keepImages = 3

// imagesOmitted replaces the screenshots of older tool results.
const imagesOmitted = "(screenshot omitted: later ones show the screen)"

// Claude runs task on a fresh episode with model (e.g.
// DefaultModel(opts.Tool)) through the Messages API and the Claude
// computer tool opts.Tool names: by default computer_toolset_20260801, a
// turn's tool_use blocks played as one batch; computer_20251124 on the beta
// API, one tool_use at a time. It stops when the model ends a turn without
// a tool call, or after opts.MaxSteps turns, and then ends the episode.
func Claude(ctx context.Context, c *client.Client, llm anthropic.Client, model, task string, opts Options) (Result, error) {
	var res Result
	tool, err := pickTool(opts, ClaudeTools)
	if err != nil {
		return res, err
	}
	r, err := start(ctx, c, opts)
	if r == nil {
		return res, err
	}
	if err == nil {
		r.logf("claude %s with %s", model, tool)
		if tool == ToolClaudeToolset {
			err = r.claudeToolset(ctx, llm, model, task, &res)
		} else {
			err = r.claude20251124(ctx, llm, model, task, &res)
		}
	}
	return res, r.finish(ctx, &res, err)
}

// claudeStop records how a turn without tool calls ended the run.
func (r *run) claudeStop(step int, res *Result, stopReason string) {
	res.Stop, res.StopReason = StopDone, stopReason
	how := "done"
	if stopReason != string(anthropic.StopReasonEndTurn) {
		res.Stop, how = StopModel, "stopped"
	}
	r.logf("%s after %d steps (stop_reason %s)", how, step, stopReason)
}

// keepLatestImages drops the images of all but the keepImages latest tool
// results in held (pointers to their content, oldest first) after adding
// added, the newest; C is a tool_result content block of either API.
func keepLatestImages[C any](held, added []*[]C, isImage func(C) bool, note C) []*[]C {
	for _, c := range added {
		if slices.ContainsFunc(*c, isImage) {
			held = append(held, c)
		}
	}
	for len(held) > keepImages {
		*held[0] = append(slices.DeleteFunc(*held[0], isImage), note)
		held = held[1:]
	}
	return held
}

// errorText is what the model reads of a failed actions request: the
// farm's message, without the client's wrapping.
func errorText(err error) string {
	if e, ok := errors.AsType[*api.Error](err); ok {
		return e.Message
	}
	return err.Error()
}

// claude20251124 is the loop of the single computer_20251124 tool, on the
// beta API it lives in: each tool_use is one actions request.
func (r *run) claude20251124(ctx context.Context, llm anthropic.Client, model, task string, res *Result) error {
	tool := anthropic.BetaToolUnionParamOfComputerUseTool20251124(int64(r.height), int64(r.width))
	tool.OfComputerUseTool20251124.EnableZoom = anthropic.Bool(true)
	msgs := []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(task))}
	var withImages []*[]anthropic.BetaToolResultBlockParamContentUnion // oldest first
	note := anthropic.BetaToolResultBlockParamContentUnion{OfText: &anthropic.BetaTextBlockParam{Text: imagesOmitted}}
	isImage := func(c anthropic.BetaToolResultBlockParamContentUnion) bool { return c.OfImage != nil }
	for step := 1; !r.maxed(step, res); step++ {
		msg, err := llm.Beta.Messages.New(ctx, anthropic.BetaMessageNewParams{
			Model:     model,
			MaxTokens: claudeMaxTokens,
			Messages:  msgs,
			Tools:     []anthropic.BetaToolUnionParam{tool},
			Betas:     []anthropic.AnthropicBeta{anthropic.AnthropicBetaComputerUse2025_11_24},
		})
		if err != nil {
			return fmt.Errorf("step %d: messages: %w", step, err)
		}
		msgs = append(msgs, msg.ToParam())
		var results []anthropic.BetaContentBlockParamUnion
		var contents []*[]anthropic.BetaToolResultBlockParamContentUnion
		for _, block := range msg.Content {
			switch b := block.AsAny().(type) {
			case anthropic.BetaTextBlock:
				r.said(step, res, "claude", b.Text)
			case anthropic.BetaToolUseBlock:
				tr := r.claudeToolUse(ctx, step, b)
				results = append(results, anthropic.BetaContentBlockParamUnion{OfToolResult: tr})
				contents = append(contents, &tr.Content)
			}
		}
		if len(results) == 0 {
			r.claudeStop(step, res, string(msg.StopReason))
			return nil
		}
		withImages = keepLatestImages(withImages, contents, isImage, note)
		msgs = append(msgs, anthropic.NewBetaUserMessage(results...))
	}
	return nil
}

// claudeToolUse plays one tool_use on the episode and returns its
// tool_result: the actions route's content as it came, or its error as
// an is_error result the model can read.
func (r *run) claudeToolUse(ctx context.Context, step int, b anthropic.BetaToolUseBlock) *anthropic.BetaToolResultBlockParam {
	input := json.RawMessage(b.JSON.Input.Raw()) // the input as the model emitted it
	if len(input) == 0 {
		input, _ = json.Marshal(b.Input) // a block not decoded from the wire
	}
	r.stepf(step, "%s %s", b.Name, clip(string(input), 160))
	fail := func(msg string) *anthropic.BetaToolResultBlockParam {
		return anthropic.NewBetaToolResultBlock(b.ID, msg, true).OfToolResult
	}
	if b.Name != "computer" {
		return fail(fmt.Sprintf("unknown tool %q: this loop has only computer", b.Name))
	}
	out, err := r.c.Act(ctx, r.target, api.ActionsRequest{Tool: ToolClaude20251124, Input: input, ScreenshotSize: screenshotSize,
		ModelResponse: r.modelResponse(step)})
	if err != nil {
		r.stepf(step, "  error: %v", err)
		return fail(errorText(err))
	}
	r.stepf(step, "  → %s", describe(out))
	var content []anthropic.BetaToolResultBlockParamContentUnion
	if err := convert(out.Content, &content); err != nil {
		return fail(fmt.Sprintf("tool_result content: %v", err))
	}
	return &anthropic.BetaToolResultBlockParam{ToolUseID: b.ID, Content: content}
}

// convert converts the actions route's answer, which is in the model API's
// wire shape already, to the SDK's param type, through that JSON.
func convert(from, to any) error {
	raw, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, to)
}
