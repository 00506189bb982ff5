package api

import (
	"encoding/json"
	"time"
)

// Trajectories (issue 16): every recorded episode's steps, screenshots and
// video, kept under the state dir after the episode ends. A trajectory's id
// is its episode's id (a recording started on a VM outside an episode gets
// an id of its own, "tr-" and 12 hex digits).
//
// These are wire types and the on-disk format too: a trajectory's
// deskfarm/trajectory.jsonl holds one TrajectoryStep per line, and
// deskfarm/info.json its TrajectoryInfo.

// Step actors.
const (
	ActorAgent  = "agent"  // an API client: actions, Cua, MCP, exec, files
	ActorPerson = "person" // a person's input during takeover
)

// Step kinds.
const (
	KindActions       = "actions"       // POST .../actions, any vocabulary
	KindCua           = "cua"           // a Cua command
	KindExec          = "exec"          // POST .../exec
	KindFileRead      = "file_read"     // GET .../files
	KindFileWrite     = "file_write"    // PUT .../files
	KindDemonstration = "demonstration" // a person's input, coalesced
	KindSnapshot      = "snapshot"      // a named snapshot saved, reverted or deleted
)

// Snapshot step operations (StepSnapshot.Op).
const (
	SnapshotSave   = "save"
	SnapshotRevert = "revert"
	SnapshotDelete = "delete"
)

// Trajectory states.
const (
	TrajectoryRecording   = "recording"
	TrajectoryFinished    = "finished"
	TrajectoryInterrupted = "interrupted" // the server stopped while recording
)

// TrajectoryStep is one step of a trajectory: one agent call or one
// coalesced piece of a person's input.
type TrajectoryStep struct {
	// Step numbers the steps from 1.
	Step  int       `json:"step"`
	Time  time.Time `json:"time"`
	Actor string    `json:"actor"` // ActorAgent or ActorPerson
	Kind  string    `json:"kind"`  // one of the Kind constants
	// Tool is the vocabulary of an actions step (ActionsRequest.Tool, or
	// "neutral"), "cua" or "mcp" for those, empty otherwise.
	Tool string `json:"tool,omitempty"`
	// Request is the body exactly as the agent sent it (for a Cua command
	// its JSON; for exec, the request; absent for a person's step).
	Request json.RawMessage `json:"request,omitempty"`
	// Actions are the neutral actions the step became (actions.Action's
	// neutral JSON), in the coordinates of ScreenshotSize; replay plays
	// these.
	Actions json.RawMessage `json:"actions,omitempty"`
	// Response is the answer exactly as returned, except that the base64
	// data of an image the answer carried is replaced by "sha256:" and the
	// hex SHA-256 of the image's bytes: those bytes are the step's
	// Screenshots.After file.
	Response json.RawMessage `json:"response,omitempty"`
	// Status is the HTTP status answered (0 for a person's step).
	Status int `json:"status,omitempty"`
	// IsError is true when the answer was an error: an HTTP error (Error
	// set) or a tool result with is_error.
	IsError bool       `json:"is_error,omitempty"`
	Error   *ErrorBody `json:"error,omitempty"`
	// ModelResponse is what the agent said it thought, when its client sent
	// it (ActionsRequest.ModelResponse); OSWorld's traj.jsonl "response".
	ModelResponse string  `json:"model_response,omitempty"`
	SettleMS      float64 `json:"settle_ms,omitempty"`
	DurationMS    float64 `json:"duration_ms,omitempty"`
	// Cursor is where the pointer was after the step, in native pixels.
	Cursor *Point `json:"cursor,omitempty"`
	// ScreenshotSize is the size of the agent's screenshots ("WxH") and the
	// coordinate space of Actions; a person's steps are at native size.
	ScreenshotSize string      `json:"screenshot_size"`
	NativeSize     string      `json:"native_size"`
	Screenshots    StepScreens `json:"screenshots"`
	// A11yTree names the file of the accessibility tree after the step
	// (OSWorld's XML), when recorded with a11y on an image with AT-SPI.
	A11yTree string        `json:"a11y_tree,omitempty"`
	Exec     *StepExec     `json:"exec,omitempty"`
	File     *StepFile     `json:"file,omitempty"`
	Snapshot *StepSnapshot `json:"snapshot,omitempty"`
	// Dropped says what of the step was not kept and why (the recorder's
	// queue was full, the disk was full).
	Dropped string `json:"dropped,omitempty"`
}

// StepScreens names a step's screenshot files, relative to the
// trajectory's deskfarm/ directory. Before and After are at the step's
// ScreenshotSize (After is exactly the image the agent got, when it got
// one); the native ones at the VM's native size. Equal pictures share a
// file (a step's Before is often the previous step's After).
type StepScreens struct {
	Before       string `json:"before,omitempty"`
	After        string `json:"after,omitempty"`
	BeforeNative string `json:"before_native,omitempty"`
	AfterNative  string `json:"after_native,omitempty"`
	// AfterSHA256 is the hex SHA-256 of After's bytes.
	AfterSHA256 string `json:"after_sha256,omitempty"`
}

// StepExec is an exec step: what ran and what came back, in sizes.
type StepExec struct {
	Argv        []string `json:"argv"`
	ExitCode    int      `json:"exit_code"`
	StdoutBytes int      `json:"stdout_bytes"`
	StderrBytes int      `json:"stderr_bytes"`
}

// StepSnapshot is a snapshot step: a named snapshot saved, reverted to or
// deleted (issue 17). A revert's after screenshot is the reverted desktop,
// so a trajectory that branches back says where to, and a replay repeats
// it.
type StepSnapshot struct {
	Op   string `json:"op"` // SnapshotSave, SnapshotRevert or SnapshotDelete
	Name string `json:"name"`
}

// StepFile is a file step: the guest path and the bytes moved, hashed.
// Kept names the copy of the contents when the recording keeps files.
type StepFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Kept   string `json:"kept,omitempty"`
}

// RecordOptions are what a recording keeps beyond the steps, screenshots
// and video.
type RecordOptions struct {
	// A11y keeps the accessibility tree after each step, on images with
	// AT-SPI (osworld); it runs after the step's answer, never delaying it.
	A11y bool `json:"a11y,omitempty"`
	// KeepFiles keeps the contents of files read and written, not only
	// their hashes.
	KeepFiles bool `json:"keep_files,omitempty"`
	// NoVideo records no video.
	NoVideo bool `json:"no_video,omitempty"`
}

// TrajectoryInfo describes a trajectory: the body of GET
// /v1/trajectories/{id} (with Steps) and a row of GET /v1/trajectories.
type TrajectoryInfo struct {
	ID      string        `json:"id"`
	Episode string        `json:"episode,omitempty"`
	VM      string        `json:"vm"`
	Pool    string        `json:"pool,omitempty"`
	Image   string        `json:"image,omitempty"`
	State   string        `json:"state"` // one of the Trajectory states
	Options RecordOptions `json:"options"`
	// ScreenshotSize is the episode's default screenshot size; NativeSize
	// the VM's screen.
	ScreenshotSize string     `json:"screenshot_size,omitempty"`
	NativeSize     string     `json:"native_size,omitempty"`
	StartedAt      time.Time  `json:"started_at"`
	EndedAt        *time.Time `json:"ended_at,omitempty"`
	EndReason      string     `json:"end_reason,omitempty"`
	Steps          int        `json:"steps"`
	Bytes          int64      `json:"bytes"`
	// Video names the recording's file ("recording.mp4"), empty without
	// one; VideoSeconds is its length once finished.
	Video        string  `json:"video,omitempty"`
	VideoSeconds float64 `json:"video_seconds,omitempty"`
	// Stopped says why recording stopped before the episode ended (the
	// disk is full, the budget is spent, stopped by a client).
	Stopped string `json:"stopped,omitempty"`
	// Result is the score a client reported (PUT .../result); OSWorld's
	// result.txt.
	Result *float64 `json:"result,omitempty"`
	// URL is the trajectory's page.
	URL string `json:"url,omitempty"`
}

// Trajectory is GET /v1/trajectories/{id}: the info and every step.
type Trajectory struct {
	TrajectoryInfo
	StepList []TrajectoryStep `json:"step_list"`
}

// TrajectoryList is GET /v1/trajectories, newest first.
type TrajectoryList struct {
	Trajectories []TrajectoryInfo `json:"trajectories"`
	// TotalBytes is what they take on disk; BudgetBytes the limit, past
	// which the oldest finished ones are removed.
	TotalBytes  int64 `json:"total_bytes"`
	BudgetBytes int64 `json:"budget_bytes"`
}

// StartRecordingRequest is the body of POST /v1/vms/{id}/recording.
type StartRecordingRequest struct {
	RecordOptions
}

// TrajectoryResultRequest is the body of PUT /v1/trajectories/{id}/result.
type TrajectoryResultRequest struct {
	Result float64 `json:"result"`
}

// OSWorldTrajLine is one line of an export's traj.jsonl, OSWorld's layout
// (lib_run_single.py): one per step, its screenshot the step's After at
// step_{step_num}_{action_timestamp}.png.
type OSWorldTrajLine struct {
	StepNum int `json:"step_num"`
	// ActionTimestamp is the step's time as "%Y%m%d@%H%M%S".
	ActionTimestamp string `json:"action_timestamp"`
	// Action is the agent's call (the request's input, or the code of a
	// pyautogui call) or a person's neutral action list.
	Action         any            `json:"action"`
	Response       string         `json:"response"`
	Reward         float64        `json:"reward"`
	Done           bool           `json:"done"`
	Info           map[string]any `json:"info"`
	ScreenshotFile string         `json:"screenshot_file"`
}

// Export formats of GET /v1/episodes/{id}/trajectory?format=.
const (
	ExportTar = "tar"
	ExportZip = "zip"
)
