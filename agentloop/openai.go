package agentloop

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// openAITool is OpenAI's computer tool type: the loop declares it, and its
// computer_call items go to the actions route under this name, as the
// model emitted them ({"tool":"computer_use_preview","input":<item>}).
const openAITool = "computer_use_preview"

// DefaultOpenAIModel is the model of OpenAI's computer_use_preview tool.
const DefaultOpenAIModel = responses.ResponsesModel("computer-use-preview")

// OpenAI runs task on a fresh episode with model (e.g.
// DefaultOpenAIModel) through the Responses API's computer_use_preview
// tool. It stops when a response holds no computer_call, after
// opts.MaxSteps responses, or at a pending safety check the options do
// not acknowledge; then it ends the episode.
//
// OpenAI's computer_call_output has no error form, so a call the farm
// refuses ends the run with that error.
func OpenAI(ctx context.Context, c *client.Client, llm openai.Client, model, task string, opts Options) (Result, error) {
	var res Result
	r, err := start(ctx, c, opts)
	if r == nil {
		return res, err
	}
	if err == nil {
		err = r.openai(ctx, llm, model, task, &res)
	}
	return res, r.finish(ctx, &res, err)
}

func (r *run) openai(ctx context.Context, llm openai.Client, model, task string, res *Result) error {
	params := responses.ResponseNewParams{
		Model: model,
		Tools: []responses.ToolUnionParam{{OfComputerUsePreview: &responses.ComputerUsePreviewToolParam{
			DisplayWidth: int64(r.width), DisplayHeight: int64(r.height),
			Environment: responses.ComputerUsePreviewToolEnvironmentLinux,
		}}},
		// OpenAI's guide: computer use requires truncation "auto".
		Truncation: responses.ResponseNewParamsTruncationAuto,
		Input:      responses.ResponseNewParamsInputUnion{OfString: openai.String(task)},
	}
	for step := 1; ; step++ {
		if step > r.opts.MaxSteps {
			res.Stop = StopMaxSteps
			r.logf("stopped: %d steps", r.opts.MaxSteps)
			return nil
		}
		res.Steps = step
		resp, err := llm.Responses.New(ctx, params)
		if err != nil {
			return fmt.Errorf("step %d: responses: %w", step, err)
		}
		if text := resp.OutputText(); text != "" {
			res.Final = text
			r.stepf(step, "openai: %s", clip(text, 200))
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
			out, err := r.openAICall(ctx, step, call, json.RawMessage(item.RawJSON()))
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
}

// openAICall plays one computer_call on the episode and returns the
// computer_call_output to send back.
func (r *run) openAICall(ctx context.Context, step int, call responses.ResponseComputerToolCall, item json.RawMessage) (responses.ResponseInputItemUnionParam, error) {
	r.stepf(step, "computer_call %s %s", call.Action.Type, clip(call.Action.RawJSON(), 160))
	out, err := r.c.Act(ctx, r.target, api.ActionsRequest{Tool: openAITool, Input: item, ScreenshotSize: screenshotSize})
	if err != nil {
		return responses.ResponseInputItemUnionParam{}, fmt.Errorf("computer_call %s: %w", call.CallID, err)
	}
	img := out.Image
	if img == nil {
		// An answer without an image (an answer shaped as the
		// computer_call_output item, which api.ActionsResponse does not
		// hold): the screen as it is now is what the model must see.
		shot, err := r.c.Act(ctx, r.target, api.ActionsRequest{Tool: claudeTool, Input: json.RawMessage(`{"action":"screenshot"}`),
			ScreenshotSize: screenshotSize})
		if err != nil {
			return responses.ResponseInputItemUnionParam{}, fmt.Errorf("screenshot after computer_call %s: %w", call.CallID, err)
		}
		out.Image = shot.Image
		if img = shot.Image; img == nil {
			return responses.ResponseInputItemUnionParam{}, fmt.Errorf("screenshot after computer_call %s: no image", call.CallID)
		}
	}
	r.stepf(step, "  → %s", describe(out))
	p := responses.ResponseInputItemParamOfComputerCallOutput(call.CallID, responses.ResponseComputerToolCallOutputScreenshotParam{
		ImageURL: openai.String("data:" + img.MediaType + ";base64," + img.Data)})
	for _, sc := range call.PendingSafetyChecks {
		// Only reached with Options.AcknowledgeSafetyChecks.
		p.OfComputerCallOutput.AcknowledgedSafetyChecks = append(p.OfComputerCallOutput.AcknowledgedSafetyChecks,
			responses.ResponseInputItemComputerCallOutputAcknowledgedSafetyCheckParam{ID: sc.ID,
				Code: openai.String(sc.Code), Message: openai.String(sc.Message)})
	}
	return p, nil
}
