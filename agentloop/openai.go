package agentloop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// DefaultOpenAIModel is the model `deskfarm agent run --provider openai`
// gives OpenAI's computer tool unless told otherwise: the model the tool
// came out with (openai-go's CHANGELOG: "gpt-5.4, tool search tool, and new
// computer tool").
const DefaultOpenAIModel = openai.ChatModelGPT5_4

// openAIPreviewModel is the model of the computer_use_preview tool.
const openAIPreviewModel = responses.ResponsesModelComputerUsePreview

// OpenAI runs task on a fresh episode with model (e.g.
// DefaultModel(opts.Tool)) through the Responses API and the OpenAI
// computer tool opts.Tool names: by default computer, whose computer_call
// holds a batch of actions; computer_use_preview, one action a call. Each
// computer_call goes to the actions route as the model emitted it, and the
// route's computer_call_output goes back. It stops when a response holds no
// computer_call, after opts.MaxSteps responses, or at a pending safety check
// the options do not acknowledge; then it ends the episode.
//
// OpenAI's computer_call_output has no error form, so a call the farm
// refuses ends the run with that error.
func OpenAI(ctx context.Context, c *client.Client, llm openai.Client, model, task string, opts Options) (Result, error) {
	var res Result
	tool, err := pickTool(opts, OpenAITools)
	if err != nil {
		return res, err
	}
	r, err := start(ctx, c, opts)
	if r == nil {
		return res, err
	}
	if err == nil {
		r.logf("openai %s with %s", model, tool)
		err = r.openai(ctx, llm, tool, model, task, &res)
	}
	return res, r.finish(ctx, &res, err)
}

// openAIToolParam declares tool. The GA computer tool has no display size
// (the model measures the screen from its screenshots); the preview tool
// is told the run's screenshot size.
func (r *run) openAIToolParam(tool string) responses.ToolUnionParam {
	if tool == ToolOpenAIPreview {
		return responses.ToolUnionParam{OfComputerUsePreview: &responses.ComputerUsePreviewToolParam{
			DisplayWidth: int64(r.width), DisplayHeight: int64(r.height),
			Environment: responses.ComputerUsePreviewToolEnvironmentLinux,
		}}
	}
	return responses.ToolUnionParam{OfComputer: &responses.ComputerToolParam{}}
}

func (r *run) openai(ctx context.Context, llm openai.Client, tool, model, task string, res *Result) error {
	params := responses.ResponseNewParams{
		Model: model,
		Tools: []responses.ToolUnionParam{r.openAIToolParam(tool)},
		// A long run outgrows the context window; "auto" drops the oldest
		// items instead of failing (OpenAI's guide requires it of
		// computer_use_preview).
		Truncation: responses.ResponseNewParamsTruncationAuto,
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String(task)},
	}
	for step := 1; !r.maxed(step, res); step++ {
		resp, err := llm.Responses.New(ctx, params)
		if err != nil {
			return fmt.Errorf("step %d: responses: %w", step, err)
		}
		if text := resp.OutputText(); text != "" {
			r.said(step, res, "openai", text)
		}
		var outputs responses.ResponseInputParam
		for _, item := range resp.Output {
			if item.Type != "computer_call" {
				continue
			}
			call := item.AsComputerCall()
			if len(call.PendingSafetyChecks) > 0 && !r.opts.AcknowledgeSafetyChecks {
				for _, sc := range call.PendingSafetyChecks {
					r.stepf(step, "safety check %s: %s", sc.Code, sc.Message)
				}
				res.Stop = StopRefused
				r.logf("stopped: the model asks to acknowledge safety checks (--ack-safety-checks)")
				return nil
			}
			out, err := r.openAICall(ctx, step, tool, call, json.RawMessage(item.RawJSON()))
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			outputs = append(outputs, out)
		}
		if len(outputs) == 0 {
			res.Stop = StopDone
			r.logf("done after %d steps", step)
			return nil
		}
		params.PreviousResponseID = openai.String(resp.ID)
		params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: outputs}
	}
	return nil
}

// openAICall plays one computer_call on the episode, its action or its
// batch of actions in order, and returns the route's computer_call_output
// to send back: the screenshot after the actions, and the acknowledged
// safety checks when the options acknowledge them.
func (r *run) openAICall(ctx context.Context, step int, tool string, call responses.ResponseComputerToolCall, item json.RawMessage) (responses.ResponseInputItemUnionParam, error) {
	var kinds []string
	if call.JSON.Actions.Valid() {
		for _, a := range call.Actions {
			kinds = append(kinds, a.Type)
		}
	} else {
		kinds = append(kinds, call.Action.Type)
	}
	r.stepf(step, "computer_call %s %s", strings.Join(kinds, ","), clip(actionsJSON(call), 160))
	out, err := r.c.Act(ctx, r.target, api.ActionsRequest{Tool: tool, Input: item, ScreenshotSize: screenshotSize,
		ModelResponse: r.modelResponse(step), ReplyOptions: api.ReplyOptions{AcknowledgeSafetyChecks: r.opts.AcknowledgeSafetyChecks}})
	if err != nil {
		return responses.ResponseInputItemUnionParam{}, fmt.Errorf("computer_call %s: %w", call.CallID, err)
	}
	r.stepf(step, "  → %s", describe(out))
	if out.ComputerCallOutput == nil {
		return responses.ResponseInputItemUnionParam{}, fmt.Errorf("computer_call %s: the farm's answer holds no computer_call_output", call.CallID)
	}
	var p responses.ResponseInputItemComputerCallOutputParam
	if err := convert(out.ComputerCallOutput, &p); err != nil {
		return responses.ResponseInputItemUnionParam{}, fmt.Errorf("computer_call_output of %s: %w", call.CallID, err)
	}
	return responses.ResponseInputItemUnionParam{OfComputerCallOutput: &p}, nil
}

// actionsJSON is the call's action or actions as the model emitted them,
// for the step log.
func actionsJSON(call responses.ResponseComputerToolCall) string {
	if call.JSON.Actions.Valid() {
		return call.JSON.Actions.Raw()
	}
	return call.Action.RawJSON()
}
