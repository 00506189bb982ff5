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

// claudeTool is the Claude computer tool the loop declares, and the tool
// its calls are sent to the actions route as.
const claudeTool = "computer_20251124"

// DefaultClaudeModel is the model `deskfarm agent run` uses unless told
// otherwise: the model computer_20251124 (and its beta header) came out
// with. Newer models may want Claude's computer_toolset_20260801 instead.
const DefaultClaudeModel = anthropic.ModelClaudeOpus4_5

// claudeMaxTokens bounds one model turn: a few sentences and a tool call.
const claudeMaxTokens = 4096

// keepImages is how many of the latest tool results keep their
// screenshots; older ones are replaced by a note, as the reference demo
// does (only_n_most_recent_images = 3), so a long run's requests do not
// grow by a screenshot a step.
const keepImages = 3

// Claude runs task on a fresh episode with model (e.g.
// DefaultClaudeModel) through the Messages API's computer_20251124 tool.
// It stops when the model ends a turn without a tool call, or after
// opts.MaxSteps turns, and then ends the episode.
func Claude(ctx context.Context, c *client.Client, llm anthropic.Client, model, task string, opts Options) (Result, error) {
	var res Result
	r, err := start(ctx, c, opts)
	if r == nil {
		return res, err
	}
	if err == nil {
		err = r.claude(ctx, llm, model, task, &res)
	}
	return res, r.finish(ctx, &res, err)
}

func (r *run) claude(ctx context.Context, llm anthropic.Client, model, task string, res *Result) error {
	tool := anthropic.BetaToolUnionParamOfComputerUseTool20251124(int64(r.height), int64(r.width))
	tool.OfComputerUseTool20251124.EnableZoom = anthropic.Bool(true)
	msgs := []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock(task))}
	var withImages []*anthropic.BetaToolResultBlockParam // oldest first
	for step := 1; ; step++ {
		if step > r.opts.MaxSteps {
			res.Stop = StopMaxSteps
			r.logf("stopped: %d steps", r.opts.MaxSteps)
			return nil
		}
		res.Steps = step
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
		for _, block := range msg.Content {
			switch b := block.AsAny().(type) {
			case anthropic.BetaTextBlock:
				res.Final = b.Text
				r.stepf(step, "claude: %s", clip(b.Text, 200))
			case anthropic.BetaToolUseBlock:
				results = append(results, r.claudeToolUse(ctx, step, b))
			}
		}
		if len(results) == 0 {
			res.Stop, res.StopReason = StopDone, string(msg.StopReason)
			if msg.StopReason != anthropic.BetaStopReasonEndTurn {
				res.Stop = StopModel
			}
			how := "done"
			if res.Stop != StopDone {
				how = "stopped"
			}
			r.logf("%s after %d steps (stop_reason %s)", how, step, msg.StopReason)
			return nil
		}
		for _, b := range results {
			if tr := b.OfToolResult; tr != nil && slices.ContainsFunc(tr.Content, isImage) {
				withImages = append(withImages, tr)
			}
		}
		for len(withImages) > keepImages {
			tr := withImages[0]
			withImages = withImages[1:]
			tr.Content = slices.DeleteFunc(tr.Content, isImage)
			tr.Content = append(tr.Content, anthropic.BetaToolResultBlockParamContentUnion{
				OfText: &anthropic.BetaTextBlockParam{Text: "(screenshot omitted: later ones show the screen)"}})
		}
		msgs = append(msgs, anthropic.NewBetaUserMessage(results...))
	}
}

// claudeToolUse plays one tool_use on the episode and returns its
// tool_result: the actions route's content as it came, or its error as
// an is_error result the model can read.
func (r *run) claudeToolUse(ctx context.Context, step int, b anthropic.BetaToolUseBlock) anthropic.BetaContentBlockParamUnion {
	input := json.RawMessage(b.JSON.Input.Raw()) // the input as the model emitted it
	if len(input) == 0 {
		input, _ = json.Marshal(b.Input) // a block not decoded from the wire
	}
	r.stepf(step, "%s %s", b.Name, clip(string(input), 160))
	if b.Name != "computer" {
		return anthropic.NewBetaToolResultBlock(b.ID, fmt.Sprintf("unknown tool %q: this loop has only computer", b.Name), true)
	}
	out, err := r.c.Act(ctx, r.target, api.ActionsRequest{Tool: claudeTool, Input: input, ScreenshotSize: screenshotSize})
	if err != nil {
		r.stepf(step, "  error: %v", err)
		msg := err.Error()
		if e, ok := errors.AsType[*api.Error](err); ok {
			msg = e.Message
		}
		return anthropic.NewBetaToolResultBlock(b.ID, msg, true)
	}
	r.stepf(step, "  → %s", describe(out))
	content, err := claudeContent(out.Content)
	if err != nil {
		return anthropic.NewBetaToolResultBlock(b.ID, err.Error(), true)
	}
	return anthropic.BetaContentBlockParamUnion{OfToolResult: &anthropic.BetaToolResultBlockParam{ToolUseID: b.ID, Content: content}}
}

func isImage(c anthropic.BetaToolResultBlockParamContentUnion) bool { return c.OfImage != nil }

// claudeContent converts the actions route's tool_result content, which
// is in Claude's wire shape already, to the SDK's param type.
func claudeContent(blocks []api.ContentBlock) ([]anthropic.BetaToolResultBlockParamContentUnion, error) {
	raw, err := json.Marshal(blocks)
	if err != nil {
		return nil, err
	}
	var out []anthropic.BetaToolResultBlockParamContentUnion
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("tool_result content: %w", err)
	}
	return out, nil
}
