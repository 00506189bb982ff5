package vocab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/deskfarm/deskfarm/actions"
	"github.com/deskfarm/deskfarm/player"
)

// ToolsetName is the toolset_name of Claude's computer toolset blocks.
const ToolsetName = "computer"

// ToolsetNotExecuted answers the blocks of a toolset turn after the first
// that failed: they are not run, because the model planned them on the
// assumption that the earlier ones worked.
const ToolsetNotExecuted = "Not executed: an earlier computer action in this turn failed."

// DecodeToolset reads a toolset turn's tool_use blocks (anthropic-sdk-go's
// ToolUseBlock, as the Messages API returns them): a JSON array of blocks,
// or one block object. Other content blocks of the assistant message (text,
// thinking) are skipped, so the message's content can be passed whole.
// Blocks are checked when they run, so that a bad block is answered in its
// own tool_result.
func DecodeToolset(data []byte) ([]anthropic.ToolUseBlock, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		data = append(append([]byte{'['}, data...), ']')
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil || len(raws) == 0 {
		return nil, actions.Invalid("input", nil, "must be a non-empty JSON array of tool_use blocks "+
			`({"type":"tool_use","id":...,"name":"left_click","toolset_name":"computer","input":{...}})`)
	}
	if err := actions.CheckCount(len(raws)); err != nil {
		return nil, actions.Renamed(err, "input")
	}
	var blocks []anthropic.ToolUseBlock
	for i, raw := range raws {
		var b anthropic.ToolUseBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, actions.InvalidAt(actions.Elem("input", i), nil, "not a tool_use block: "+err.Error())
		}
		if t := b.JSON.Type.Raw(); t != "" && t != `"tool_use"` {
			continue
		}
		if b.ID == "" {
			return nil, actions.InvalidAt(actions.Elem("input", i).Name("id"), nil, "required: the tool_result answers it")
		}
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 {
		return nil, actions.Invalid("input", nil, "holds no tool_use block")
	}
	return blocks, nil
}

// RunToolset plays a turn of Claude computer_toolset_20260801 blocks on r,
// in order, and answers each with a tool_result carrying its tool_use_id and
// toolset_name "computer", in the same order. A block that fails (it does not
// translate, or its actions fail) is answered with is_error and the error's
// text, in the block's own field names; every block after it is answered
// with is_error and ToolsetNotExecuted, and not run.
//
// Only the last block takes the screenshot the options' auto policy would
// take after each; earlier blocks settle but answer without an image unless
// they are themselves screenshot or zoom (the model sees the state once,
// after its plan ran). last is the Result of the last block that ran.
func RunToolset(ctx context.Context, r player.Runner, blocks []anthropic.ToolUseBlock, opts player.RunOptions) (results []anthropic.ToolResultBlockParam, last player.Result) {
	failed := false
	for i, b := range blocks {
		if failed {
			results = append(results, toolsetResult(b.ID, player.Result{}, fmt.Errorf("%s", ToolsetNotExecuted)))
			continue
		}
		o := opts
		if i < len(blocks)-1 && o.Policy() == player.ScreenshotAuto {
			o.Screenshot = player.ScreenshotNever
		}
		res, err := runToolsetBlock(ctx, r, b, o)
		last = res
		failed = err != nil
		results = append(results, toolsetResult(b.ID, res, err))
	}
	return results, last
}

func runToolsetBlock(ctx context.Context, r player.Runner, b anthropic.ToolUseBlock, opts player.RunOptions) (player.Result, error) {
	if b.ToolsetName != "" && b.ToolsetName != ToolsetName {
		return player.Result{}, actions.OneOf("toolset_name", actions.ErrUnsupportedAction, []string{ToolsetName},
			fmt.Sprintf("%q is not the computer toolset", b.ToolsetName))
	}
	acts, err := TranslateToolset(b.Name, b.Input)
	if err != nil {
		return player.Result{}, err
	}
	c := &Call{Tool: string(ComputerToolset20260801), Actions: acts}
	c.fieldsAll(toolsetAgentField)
	c.labelAll(b.Name)
	res, err := r.Run(ctx, acts, opts)
	if err != nil {
		return res, c.AgentError(err)
	}
	return res, nil
}

func toolsetResult(id string, res player.Result, err error) anthropic.ToolResultBlockParam {
	tr := ClaudeToolResult(id, res, err)
	tr.ToolsetName = anthropic.String(ToolsetName)
	return tr
}

// ClaudeToolResult returns the tool_result block answering toolUseID: on
// success the result's text and image, on failure is_error
// with one text block holding err's message, which names the agent's own
// fields when err came through Call.AgentError.
func ClaudeToolResult(toolUseID string, res player.Result, err error) anthropic.ToolResultBlockParam {
	tr := anthropic.ToolResultBlockParam{ToolUseID: toolUseID}
	if err != nil {
		tr.IsError = anthropic.Bool(true)
		tr.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: err.Error()}}}
		return tr
	}
	// A text block if there is text, then an image block if there is an
	// image: the SDK's types are Claude's wire, and web converts them.
	if res.Text != "" {
		tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfText: &anthropic.TextBlockParam{Text: res.Text}})
	}
	if res.Image != nil {
		tr.Content = append(tr.Content, anthropic.ToolResultBlockParamContentUnion{OfImage: &anthropic.ImageBlockParam{
			Source: anthropic.ImageBlockParamSourceUnion{OfBase64: &anthropic.Base64ImageSourceParam{
				Data: res.Image.Data, MediaType: anthropic.Base64ImageSourceMediaType(res.Image.MediaType),
			}},
		}})
	}
	return tr
}
