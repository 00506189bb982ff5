// Package agentloop is deskfarm's reference agent loop (issue 11): a model
// drives a fresh episode's desktop through the computer-use tool of its
// own API until it says it is done or runs out of steps. It is what the
// Anthropic computer-use demo's loop is, on a deskfarm VM with a reset and
// a live view; `deskfarm agent run` is its command.
//
// It owns the loop and nothing else. The models are reached through their
// official SDKs: anthropic-sdk-go's Messages API with Claude's
// computer_toolset_20260801 (or, as an option, the older computer_20251124
// tool on the beta API), openai-go's Responses API with OpenAI's computer
// tool (or the older computer_use_preview). The farm is reached through
// package client: the tool calls go to the actions route as the model
// emitted them, a turn's batch in one request, and the route's answer goes
// back as the tool results. No server code is linked.
package agentloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/client"
)

// DefaultMaxSteps bounds a run that names no limit: model turns, each
// with its tool calls.
const DefaultMaxSteps = 30

// endTimeout bounds the end of the episode after the run, also when the
// run was canceled.
const endTimeout = time.Minute

// Stop reasons (Result.Stop).
const (
	StopDone     = "done"      // the model ended its turn without a tool call
	StopMaxSteps = "max_steps" // the step limit was reached
	StopRefused  = "refused"   // the loop would not go on (e.g. unacknowledged safety checks)
	StopModel    = "model"     // the model stopped for another reason (Result.StopReason: max_tokens, refusal, ...)
)

// The computer tools a run can give the model (Options.Tool). The first of
// each provider is its default: the generally available tool.
const (
	// ToolClaudeToolset is Claude's computer toolset: one tools[] entry for
	// the family, one tool_use block per action, several in a turn.
	ToolClaudeToolset = api.ToolClaudeToolset
	// ToolClaude20251124 is Claude's single computer tool of the
	// computer-use-2025-11-24 beta.
	ToolClaude20251124 = "computer_20251124"
	// ToolOpenAI is OpenAI's computer tool: a computer_call holds a batch
	// of actions.
	ToolOpenAI = api.ToolOpenAI
	// ToolOpenAIPreview is OpenAI's computer_use_preview tool: one action a
	// computer_call, for the computer-use-preview model.
	ToolOpenAIPreview = api.ToolOpenAIPreview
)

// ClaudeTools and OpenAITools list each provider's tools, the default
// first.
var (
	ClaudeTools = []string{ToolClaudeToolset, ToolClaude20251124}
	OpenAITools = []string{ToolOpenAI, ToolOpenAIPreview}
)

// DefaultModel is the model a run with tool uses unless told otherwise:
// DefaultClaudeModel and DefaultOpenAIModel for the default tools, and for
// an older tool the model it came out with. It is "" for an unknown tool.
func DefaultModel(tool string) string {
	switch tool {
	case ToolClaudeToolset:
		return DefaultClaudeModel
	case ToolClaude20251124:
		return claude20251124Model
	case ToolOpenAI:
		return DefaultOpenAIModel
	case ToolOpenAIPreview:
		return openAIPreviewModel
	}
	return ""
}

// ErrUnknownTool is returned for an Options.Tool the provider does not
// have.
var ErrUnknownTool = errors.New("unknown computer tool")

// pickTool returns the tool of a run: opts.Tool, or the provider's default
// (tools[0]) when it is "".
func pickTool(opts Options, tools []string) (string, error) {
	if opts.Tool == "" {
		return tools[0], nil
	}
	if !slices.Contains(tools, opts.Tool) {
		return "", fmt.Errorf("%w %q: this provider has %s", ErrUnknownTool, opts.Tool, strings.Join(tools, ", "))
	}
	return opts.Tool, nil
}

// Options configure a run.
type Options struct {
	// Tool is the computer tool the model is given, one of the provider's
	// (ClaudeTools, OpenAITools); "" means the provider's default.
	Tool string
	// Pool is the pool of the episode; "" lets the server choose.
	Pool string
	// TTLS is the episode's lease in seconds; 0 means the pool's default.
	TTLS float64
	// MaxSteps bounds the model turns; 0 means DefaultMaxSteps.
	MaxSteps int
	// Log receives one line per step; nil discards them.
	Log io.Writer
	// AcknowledgeSafetyChecks answers OpenAI's pending safety checks as
	// acknowledged; without it the run stops at the first one. Whether to
	// acknowledge is the operator's decision, so it is off by default.
	AcknowledgeSafetyChecks bool
	// KeepEpisode leaves the episode running after the run (to look at
	// it in the live view); it then ends with its lease.
	KeepEpisode bool
	// Record keeps the episode's trajectory on the farm (steps,
	// screenshots, video; each call carries the model's text of its turn
	// as the step's model_response). The run's last lines say where it
	// is.
	Record bool
}

// Result is how a run ended.
type Result struct {
	Episode api.Episode
	// Steps counts the model turns.
	Steps int
	// Stop is one of the Stop constants.
	Stop string
	// StopReason is the model API's own reason for its last answer, when
	// it gives one (Claude's stop_reason).
	StopReason string
	// Final is the model's last text.
	Final string
}

// run is one run's state shared by the providers: the farm, the episode
// and the step log.
type run struct {
	c      *client.Client
	opts   Options
	ep     api.Episode
	target client.Target
	// width and height are the screenshots' size: the coordinate space
	// the model is told.
	width, height int
	// turnText is the model's text of turn textStep, sent with the turn's
	// calls as their model_response.
	turnText string
	textStep int
}

// start leases the episode, says where to watch it, and measures the
// coordinate space with a first screenshot.
func start(ctx context.Context, c *client.Client, opts Options) (*run, error) {
	if opts.MaxSteps <= 0 {
		opts.MaxSteps = DefaultMaxSteps
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	req := api.StartEpisodeRequest{Pool: opts.Pool, TTLS: opts.TTLS}
	if opts.Record {
		req.Record = &opts.Record
	}
	ep, err := c.StartEpisode(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("start episode: %w", err)
	}
	r := &run{c: c, opts: opts, ep: ep, target: client.Episode(ep.ID)}
	r.logf("episode %s on vm %s (pool %s)", ep.ID, ep.VM, ep.Pool)
	r.logf("live view: %s", ep.ViewerURL)
	if opts.Record && !ep.Recording {
		r.logf("warning: the farm is not recording episode %s (a server without trajectories?)", ep.ID)
	}
	res, err := r.screenshot(ctx)
	if err != nil {
		return r, fmt.Errorf("first screenshot of episode %s: %w", ep.ID, err)
	}
	r.width, r.height = res.ScreenshotWidth, res.ScreenshotHeight
	r.logf("screen %dx%d (screenshot_size %s)", r.width, r.height, screenshotSize)
	return r, nil
}

// screenshotSize is the agent's coordinate space: the reference demo's
// scaling (XGA/WXGA/FWXGA by aspect ratio), kept for the whole run.
const screenshotSize = "auto"

// screenshot takes a screenshot at the run's screenshot size, as a neutral
// action: it is the loop's own look, in no model's vocabulary.
func (r *run) screenshot(ctx context.Context) (api.ActionsResponse, error) {
	return r.c.Act(ctx, r.target, api.ActionsRequest{Action: json.RawMessage(`{"kind":"screenshot"}`),
		ScreenshotSize: screenshotSize})
}

// maxed reports whether step is past the run's limit, and then records the
// stop; otherwise it counts the step.
func (r *run) maxed(step int, res *Result) bool {
	if step > r.opts.MaxSteps {
		res.Stop = StopMaxSteps
		r.logf("stopped: %d steps", r.opts.MaxSteps)
		return true
	}
	res.Steps = step
	return false
}

// finish ends the episode unless the options keep it, whatever became of
// the run's context.
func (r *run) finish(ctx context.Context, res *Result, err error) error {
	res.Episode = r.ep
	defer r.whereRecorded()
	if r.opts.KeepEpisode {
		r.logf("episode %s left running (it ends with its lease)", r.ep.ID)
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	ep, endErr := r.c.EndEpisode(ctx, r.ep.ID)
	if endErr != nil {
		return errors.Join(err, fmt.Errorf("end episode %s: %w", r.ep.ID, endErr))
	}
	res.Episode = ep
	r.logf("episode %s ended", r.ep.ID)
	return err
}

// whereRecorded says where a recorded run's trajectory is: its page and
// the command that exports it (a trajectory's id is its episode's).
func (r *run) whereRecorded() {
	if !r.opts.Record || !r.ep.Recording {
		return
	}
	page := r.ep.TrajectoryURL
	if strings.HasPrefix(page, "/") {
		page = r.c.Server() + page
	}
	r.logf("trajectory %s: %s", r.ep.ID, page)
	r.logf("export it: deskfarm episode export %s DIR", r.ep.ID)
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, format+"\n", args...)
}

// stepf logs a line of step n.
func (r *run) stepf(n int, format string, args ...any) {
	r.logf("[%d] "+format, append([]any{n}, args...)...)
}

// said logs the model's text of step n and keeps it as the run's last,
// and as the turn's model_response.
func (r *run) said(n int, res *Result, who, text string) {
	res.Final = text
	r.stepf(n, "%s: %s", who, clip(text, 200))
	if r.textStep != n {
		r.turnText, r.textStep = "", n
	}
	if r.turnText != "" {
		r.turnText += "\n"
	}
	r.turnText += text
}

// modelResponse is the model's text of step n, for its calls'
// model_response (kept only when the episode records).
func (r *run) modelResponse(n int) string {
	if r.textStep != n {
		return ""
	}
	return r.turnText
}

// clip shortens s for a log line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// describe says what an actions answer showed, for the step log.
func describe(res api.ActionsResponse) string {
	var parts []string
	if res.Text != "" {
		parts = append(parts, res.Text)
	}
	if res.Image != nil {
		parts = append(parts, fmt.Sprintf("screenshot %dx%d", res.Image.Width, res.Image.Height))
	}
	parts = append(parts, fmt.Sprintf("%.0f ms", res.DurationMS))
	return strings.Join(parts, ", ")
}
