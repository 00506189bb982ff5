package api

import (
	"encoding/json"
	"time"
)

// ActionsRequest is the body of POST /v1/vms/{id}/actions (and of an
// episode's actions). Exactly one of Tool+Input (an agent's call in its own
// vocabulary), Action or Actions (neutral actions, see package actions of
// the server) is set; the rest are run and reply options.
type ActionsRequest struct {
	// Tool is the tool type the agent declared, which selects the
	// vocabulary of Input (see Tools):
	//   - Claude's computer tool, "computer_20241022" to "computer_20251124":
	//     Input is the tool_use block's input;
	//   - "computer_toolset_20260801": Input is the turn's tool_use blocks
	//     (a JSON array, or one block), answered in ToolResults;
	//   - OpenAI's "computer_use_preview" or "computer": Input is the
	//     computer_call item the model emitted, answered in
	//     ComputerCallOutput;
	//   - OSWorld's "computer_13" (an action) and "pyautogui" (a JSON string
	//     of code, or {"command": code}; code that is not literal pyautogui
	//     calls runs in the guest's session, answered in Guest);
	//   - "neutral": Input is a neutral action list.
	Tool  string          `json:"tool,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// Action is one neutral action; Actions a list played in order.
	Action  json.RawMessage `json:"action,omitempty"`
	Actions json.RawMessage `json:"actions,omitempty"`
	// ScreenshotSize fixes the size of the screenshots the agent sees and of
	// its coordinate space: "auto" (XGA/WXGA/FWXGA by aspect ratio, as the
	// reference demo; the default), "native", or "WxH". Keep it fixed for a
	// session.
	ScreenshotSize string `json:"screenshot_size,omitempty"`
	// ModelResponse is the model's text for this call, kept in a recorded
	// episode's trajectory (OSWorld's traj.jsonl "response"); ignored
	// otherwise.
	ModelResponse string `json:"model_response,omitempty"`
	RunOptions
	ReplyOptions
}

// Tool types of ActionsRequest.Tool besides Claude's computer tool versions.
const (
	ToolClaudeToolset = "computer_toolset_20260801"
	ToolOpenAIPreview = "computer_use_preview"
	ToolOpenAI        = "computer"
	ToolOSWorld       = "computer_13"
	ToolPyautogui     = "pyautogui"
	ToolNeutral       = "neutral"
)

// ReplyOptions are how an actions request is answered.
type ReplyOptions struct {
	// ToolUseID is the id of the Claude tool_use block being answered; it
	// is echoed in ActionsResponse.ToolUseID.
	ToolUseID string `json:"tool_use_id,omitempty"`
	// ErrorsAsResults answers every failure of a Claude computer tool call
	// with 200 and a tool_result (IsError, a text block in Content) that an
	// agent loop can forward unchanged, instead of an HTTP error. A toolset
	// turn answers failures in its tool_results always; with this option
	// also the failures that stop the whole turn.
	ErrorsAsResults bool `json:"errors_as_results,omitempty"`
	// AcknowledgeSafetyChecks copies an OpenAI computer_call's
	// pending_safety_checks into the output's acknowledged_safety_checks.
	// Whether to acknowledge is the developer's decision: off by default.
	AcknowledgeSafetyChecks bool `json:"acknowledge_safety_checks,omitempty"`
}

// Screenshot policies (RunOptions.Screenshot).
const (
	// ScreenshotAuto (the default) takes a screenshot after the actions
	// unless the last one was an observation (screenshot, zoom,
	// cursor_position).
	ScreenshotAuto = "auto"
	// ScreenshotAlways takes one after the actions unless the last action
	// was a screenshot.
	ScreenshotAlways = "always"
	// ScreenshotNever returns only what screenshot and zoom actions capture.
	ScreenshotNever = "never"
)

// Image formats (RunOptions.Format, the screenshot route's format).
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
)

// RunOptions are the run options of an actions request. The zero value is
// the default.
type RunOptions struct {
	// SettleQuietMS is the quiet time of the settle wait; 0 means the
	// server's default. 1-10000.
	SettleQuietMS int `json:"settle_quiet_ms,omitempty"`
	// SettleMaxMS caps the settle wait; 0 means the server's default.
	// 1-60000, and at least SettleQuietMS.
	SettleMaxMS int `json:"settle_max_ms,omitempty"`
	// NoSettle skips settling entirely: screenshots show whatever the
	// screen holds at that instant.
	NoSettle bool `json:"no_settle,omitempty"`
	// NoGuestSettle settles on the screen alone: quiet means the screen
	// stopped changing, not also that the guest's vCPUs went idle.
	NoGuestSettle bool `json:"no_guest_settle,omitempty"`
	// Screenshot is the screenshot policy; "" means auto.
	Screenshot string `json:"screenshot,omitempty"`
	// Format is the image encoding, FormatPNG or FormatJPEG; "" means png.
	Format string `json:"format,omitempty"`
	// JPEGQuality is the JPEG quality, 1-100; 0 means the server's default.
	JPEGQuality int `json:"jpeg_quality,omitempty"`
}

// Point is a position in screenshot coordinates.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// ActionsResponse is the answer to an actions request: the Claude
// tool_result content plus the neutral fields, and the answer in the
// agent's own shape for the other vocabularies.
type ActionsResponse struct {
	// Content is the Claude tool_result content: a text block and/or an
	// image block (with IsError, the error's text block).
	Content []ContentBlock `json:"content"`
	// ToolUseID echoes ReplyOptions.ToolUseID.
	ToolUseID string `json:"tool_use_id,omitempty"`
	// IsError marks a Claude failure answered as a result
	// (ReplyOptions.ErrorsAsResults).
	IsError bool `json:"is_error,omitempty"`
	// ToolResults answers a computer_toolset_20260801 turn: one tool_result
	// per tool_use block, same ids, same order.
	ToolResults []ToolResult `json:"tool_results,omitempty"`
	// ComputerCallOutput answers an OpenAI computer_call: the input item the
	// agent loop sends back to the Responses API unchanged.
	ComputerCallOutput *ComputerCallOutput `json:"computer_call_output,omitempty"`
	// Terminal is OSWorld's DONE or FAIL, echoed (nothing was played).
	Terminal string `json:"terminal,omitempty"`
	// Guest is what pyautogui code that ran in the guest returned.
	Guest *GuestRun `json:"guest,omitempty"`
	// Text holds the output of cursor_position actions ("X=12,Y=34"), one
	// line each.
	Text string `json:"text,omitempty"`
	// Cursor is where the last cursor_position action found the pointer,
	// in screenshot coordinates: the same as Text, for code to read.
	Cursor *Point `json:"cursor,omitempty"`
	// Image is the last image captured: a zoom, an explicit screenshot, or
	// the screenshot taken after the actions.
	Image *Image `json:"image,omitempty"`
	// Executed counts the actions that completed.
	Executed int `json:"executed"`
	// SettleMS is the time spent waiting for the screen to settle.
	SettleMS float64 `json:"settle_ms"`
	// SettleTimedOut reports that a settle wait hit its maximum (the screen
	// kept changing, or the guest stayed busy).
	SettleTimedOut bool `json:"settle_timed_out,omitempty"`
	// SettleGuestBusy counts the settle rounds in which the screen was quiet
	// but the guest's vCPUs were still busy, so the settle waited on.
	SettleGuestBusy int `json:"settle_guest_busy,omitempty"`
	// Clipboard is the text a clipboard_get action read.
	Clipboard *string `json:"clipboard,omitempty"`
	// ScreenshotWidth and ScreenshotHeight are the agent's coordinate space.
	ScreenshotWidth  int     `json:"screenshot_width"`
	ScreenshotHeight int     `json:"screenshot_height"`
	DurationMS       float64 `json:"duration_ms"`
}

// ToolResult is a Claude tool_result content block.
type ToolResult struct {
	Type      string `json:"type"` // "tool_result"
	ToolUseID string `json:"tool_use_id"`
	// ToolsetName is the toolset of the tool_use answered ("computer" for
	// computer_toolset_20260801): the Messages API pairs a toolset member's
	// tool_result by it, so a loop can send the result on unchanged.
	ToolsetName string         `json:"toolset_name,omitempty"`
	Content     []ContentBlock `json:"content,omitempty"`
	IsError     bool           `json:"is_error,omitempty"`
}

// ComputerCallOutput is OpenAI's computer_call_output input item
// (ResponseInputItemComputerCallOutputParam in openai-go/v3).
type ComputerCallOutput struct {
	Type   string             `json:"type"` // "computer_call_output"
	CallID string             `json:"call_id"`
	Output ComputerScreenshot `json:"output"`
	// AcknowledgedSafetyChecks are set with ReplyOptions.AcknowledgeSafetyChecks.
	AcknowledgedSafetyChecks []SafetyCheck `json:"acknowledged_safety_checks,omitempty"`
}

// ComputerScreenshot is the output of a computer_call_output.
type ComputerScreenshot struct {
	Type     string `json:"type"`      // "computer_screenshot"
	ImageURL string `json:"image_url"` // a data: URL of the screenshot
}

// SafetyCheck is an OpenAI computer-use safety check.
type SafetyCheck struct {
	ID      string `json:"id"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// GuestRun is what a program run in the guest's desktop session returned.
type GuestRun struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// ContentBlock is a block of a Claude tool_result.
type ContentBlock struct {
	Type   string       `json:"type"` // "text" or "image"
	Text   string       `json:"text,omitempty"`
	Source *ImageSource `json:"source,omitempty"`
}

// ImageSource is the source of a Claude image block.
type ImageSource struct {
	Type      string `json:"type"` // "base64"
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// Image is an encoded image.
type Image struct {
	MediaType string `json:"media_type"` // "image/png" or "image/jpeg"
	Data      string `json:"data"`       // standard base64 of the encoded bytes
	Width     int    `json:"width"`
	Height    int    `json:"height"`
}

// ScreenshotOptions are the query of GET /v1/vms/{id}/screenshot. The zero
// value is a native-size PNG of the live screen mirror.
type ScreenshotOptions struct {
	// Format is FormatPNG or FormatJPEG; "" means png.
	Format string
	// Quality is the JPEG quality, 1-100; 0 means the server's default.
	Quality int
	// Width and Height scale the image; both or neither.
	Width, Height int
	// Size is "auto", "native" or "WxH"; used when Width and Height are 0.
	Size string
	// Fresh makes the server prove the mirror current first (about 30 ms),
	// for a screen changed by other means than actions.
	Fresh bool
}

// ControlResponse is the body of POST /v1/vms/{id}/control.
type ControlResponse struct {
	// ControlToken grants input: pass it as ?control_token= to the VNC
	// websocket (GET /v1/vms/{id}/vnc). It is valid until DELETE
	// /v1/vms/{id}/control.
	ControlToken string    `json:"control_token"`
	Since        time.Time `json:"since"`
}

// ControlStatus is the body of GET /v1/vms/{id}/control.
type ControlStatus struct {
	Human bool       `json:"human"`
	Since *time.Time `json:"since,omitempty"`
}

// ActivityEvent is one input action played on a VM, as the live view
// overlays it (GET /v1/vms/{id}/activity). Positions are native
// framebuffer pixels.
type ActivityEvent struct {
	// Seq numbers a VM's events from 1, in order.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Source is "agent" (POST /v1/vms/{id}/actions) or "human" (takeover).
	Source string `json:"source"`
	// Kind is the neutral action kind: click, type, key, move, drag, ...
	Kind   string   `json:"kind"`
	X      *int     `json:"x,omitempty"`
	Y      *int     `json:"y,omitempty"`
	FromX  *int     `json:"from_x,omitempty"`
	FromY  *int     `json:"from_y,omitempty"`
	Button string   `json:"button,omitempty"`
	Count  int      `json:"count,omitempty"`
	Keys   []string `json:"keys,omitempty"`
	Text   string   `json:"text,omitempty"`
	// Direction and Amount describe a scroll.
	Direction string `json:"direction,omitempty"`
	Amount    int    `json:"amount,omitempty"`
}
