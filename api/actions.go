package api

import (
	"encoding/json"
	"time"
)

// ActionsRequest is the body of POST /v1/vms/{id}/actions (and of an
// episode's actions). Exactly one of Tool+Input (a Claude computer-use tool
// call), Action or Actions (neutral actions, see package actions of the
// server) is set; the rest are run options.
type ActionsRequest struct {
	// Tool is the Claude tool type, e.g. "computer_20251124".
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
	RunOptions
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
	// Screenshot is the screenshot policy; "" means auto.
	Screenshot string `json:"screenshot,omitempty"`
	// Format is the image encoding, FormatPNG or FormatJPEG; "" means png.
	Format string `json:"format,omitempty"`
	// JPEGQuality is the JPEG quality, 1-100; 0 means the server's default.
	JPEGQuality int `json:"jpeg_quality,omitempty"`
}

// ActionsResponse is the answer to an actions request: the Claude
// tool_result content plus the neutral fields.
type ActionsResponse struct {
	// Content is the Claude tool_result content: a text block and/or an
	// image block.
	Content []ContentBlock `json:"content"`
	// Text holds the output of cursor_position actions ("X=12,Y=34"), one
	// line each.
	Text string `json:"text,omitempty"`
	// Image is the last image captured: a zoom, an explicit screenshot, or
	// the screenshot taken after the actions.
	Image *Image `json:"image,omitempty"`
	// Executed counts the actions that completed.
	Executed int `json:"executed"`
	// SettleMS is the time spent waiting for the screen to settle.
	SettleMS float64 `json:"settle_ms"`
	// SettleTimedOut reports that a settle wait hit its maximum (the screen
	// kept changing).
	SettleTimedOut bool `json:"settle_timed_out,omitempty"`
	// ScreenshotWidth and ScreenshotHeight are the agent's coordinate space.
	ScreenshotWidth  int     `json:"screenshot_width"`
	ScreenshotHeight int     `json:"screenshot_height"`
	DurationMS       float64 `json:"duration_ms"`
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
