package agentloop

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/deskfarm/deskfarm/api"
)

// toolsetName is the toolset_name of the computer toolset's tool_use
// blocks, and of the tool_results that answer them.
const toolsetName = "computer"

// computerToolset declares Claude's computer toolset with every member
// enabled. Every member is enabled by default (anthropic-sdk-go v2.15.0,
// ComputerToolset20260801Param), but a member's default may change with the
// API; deskfarm's actions route plays all of them, so the loop says so.
// The toolset has no display size: the model measures the screen from its
// screenshots, which are the run's screenshot size.
func computerToolset() anthropic.ToolUnionParam {
	on := anthropic.Bool(true)
	return anthropic.ToolUnionParam{OfComputerToolset20260801: &anthropic.ComputerToolset20260801Param{
		Configs: anthropic.ComputerToolsetConfigsParam{
			CursorPosition: anthropic.ComputerCursorPositionConfigParam{Enabled: on},
			DoubleClick:    anthropic.ComputerDoubleClickConfigParam{Enabled: on},
			HoldKey:        anthropic.ComputerHoldKeyConfigParam{Enabled: on},
			Key:            anthropic.ComputerKeyConfigParam{Enabled: on},
			LeftClick:      anthropic.ComputerLeftClickConfigParam{Enabled: on},
			LeftClickDrag:  anthropic.ComputerLeftClickDragConfigParam{Enabled: on},
			LeftMouseDown:  anthropic.ComputerLeftMouseDownConfigParam{Enabled: on},
			LeftMouseUp:    anthropic.ComputerLeftMouseUpConfigParam{Enabled: on},
			MiddleClick:    anthropic.ComputerMiddleClickConfigParam{Enabled: on},
			MouseMove:      anthropic.ComputerMouseMoveConfigParam{Enabled: on},
			RightClick:     anthropic.ComputerRightClickConfigParam{Enabled: on},
			Screenshot:     anthropic.ComputerScreenshotConfigParam{Enabled: on},
			Scroll:         anthropic.ComputerScrollConfigParam{Enabled: on},
			TripleClick:    anthropic.ComputerTripleClickConfigParam{Enabled: on},
			Type:           anthropic.ComputerTypeConfigParam{Enabled: on},
			Wait:           anthropic.ComputerWaitConfigParam{Enabled: on},
			Zoom:           anthropic.ComputerZoomConfigParam{Enabled: on},
		},
	}}
}

// claudeToolset is the loop of Claude's computer toolset, on the generally
// available Messages API: the tool_use blocks of a turn go to the actions
// route in one request, which plays them in order and answers each.
func (r *run) claudeToolset(ctx context.Context, llm anthropic.Client, model, task string, res *Result) error {
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(task))}
	var withImages []*[]anthropic.ToolResultBlockParamContentUnion // oldest first
	note := anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: imagesOmitted}}
	isImage := func(c anthropic.ToolResultBlockParamContentUnion) bool { return c.OfImage != nil }
	for step := 1; !r.maxed(step, res); step++ {
		msg, err := llm.Messages.New(ctx, anthropic.MessageNewParams{
			Model:     model,
			MaxTokens: claudeMaxTokens,
			Messages:  msgs,
			Tools:     []anthropic.ToolUnionParam{computerToolset()},
		})
		if err != nil {
			return fmt.Errorf("step %d: messages: %w", step, err)
		}
		msgs = append(msgs, msg.ToParam())
		var uses []anthropic.ToolUseBlock
		for _, block := range msg.Content {
			switch b := block.AsAny().(type) {
			case anthropic.TextBlock:
				r.said(step, res, "claude", b.Text)
			case anthropic.ToolUseBlock:
				uses = append(uses, b)
			}
		}
		if len(uses) == 0 {
			r.claudeStop(step, res, string(msg.StopReason))
			return nil
		}
		results := r.toolsetTurn(ctx, step, uses)
		blocks := make([]anthropic.ContentBlockParamUnion, len(results))
		contents := make([]*[]anthropic.ToolResultBlockParamContentUnion, len(results))
		for i := range results {
			blocks[i] = anthropic.ContentBlockParamUnion{OfToolResult: &results[i]}
			contents[i] = &results[i].Content
		}
		withImages = keepLatestImages(withImages, contents, isImage, note)
		msgs = append(msgs, anthropic.NewUserMessage(blocks...))
	}
	return nil
}

// toolsetTurn plays a turn's tool_use blocks and returns their
// tool_results in the blocks' order. The toolset's blocks go to the actions
// route as one computer_toolset_20260801 request, as the model emitted
// them; its tool_results (toolset_name, is_error, the blocks not run after
// a failure) are sent on as they came. A block of another tool, and every
// block when the request fails, is answered here with is_error.
func (r *run) toolsetTurn(ctx context.Context, step int, uses []anthropic.ToolUseBlock) []anthropic.ToolResultBlockParam {
	results := make([]anthropic.ToolResultBlockParam, len(uses))
	var batch []json.RawMessage
	var at []int // index in uses of each block of batch
	for i, b := range uses {
		if b.ToolsetName != toolsetName {
			r.stepf(step, "%s %s", b.Name, clip(string(b.Input), 160))
			results[i] = toolResultError(b, fmt.Sprintf("unknown tool %q: this loop has only the %s toolset", b.Name, toolsetName))
			continue
		}
		r.stepf(step, "%s %s %s", b.ToolsetName, b.Name, clip(string(b.Input), 160))
		raw := json.RawMessage(b.RawJSON()) // the block as the model emitted it
		if len(raw) == 0 {
			raw, _ = json.Marshal(b.ToParam()) // a block not decoded from the wire
		}
		batch, at = append(batch, raw), append(at, i)
	}
	if len(batch) == 0 {
		return results
	}
	input, _ := json.Marshal(batch)
	out, err := r.c.Act(ctx, r.target, api.ActionsRequest{Tool: ToolClaudeToolset, Input: input,
		ScreenshotSize: screenshotSize, ModelResponse: r.modelResponse(step), ReplyOptions: api.ReplyOptions{ErrorsAsResults: true}})
	if err == nil && len(out.ToolResults) != len(batch) {
		err = fmt.Errorf("the farm answered %d blocks with %d tool_results", len(batch), len(out.ToolResults))
	}
	if err != nil {
		r.stepf(step, "  error: %v", err)
		for _, i := range at {
			results[i] = toolResultError(uses[i], errorText(err))
		}
		return results
	}
	r.stepf(step, "  → %s", describe(out))
	for k, i := range at {
		tr := out.ToolResults[k]
		if tr.IsError && len(tr.Content) > 0 {
			r.stepf(step, "  %s: %s", uses[i].Name, clip(tr.Content[0].Text, 160))
		}
		if err := convert(tr, &results[i]); err != nil {
			results[i] = toolResultError(uses[i], fmt.Sprintf("the farm's tool_result: %v", err))
		} else if tr.ToolUseID != uses[i].ID {
			results[i] = toolResultError(uses[i], fmt.Sprintf("the farm answered %s where %s was due", tr.ToolUseID, uses[i].ID))
		}
	}
	return results
}

// toolResultError answers b with is_error and msg, as a toolset member's
// result when b is one.
func toolResultError(b anthropic.ToolUseBlock, msg string) anthropic.ToolResultBlockParam {
	tr := *anthropic.NewToolResultBlock(b.ID, msg, true).OfToolResult
	if b.ToolsetName != "" {
		tr.ToolsetName = anthropic.String(b.ToolsetName)
	}
	return tr
}
