package web

import (
	"encoding/base64"
	"fmt"

	"github.com/deskfarm/deskfarm/vmm"
)

// Wire types of the /v1 API. The create body is vmm.CreateOptions and a VM is
// vmm.VM; both carry their own JSON tags.

// VMList is the body of GET /v1/vms.
type VMList struct {
	VMs []vmm.VM `json:"vms"`
}

// ResetResponse is the body of POST /v1/vms/{id}/reset.
type ResetResponse struct {
	ID           string  `json:"id"`
	ResetSeconds float64 `json:"reset_seconds"`
	ResetMS      int64   `json:"reset_ms"`
}

// MaxExecTimeout bounds ExecRequest.TimeoutS.
const MaxExecTimeout = 3600 // seconds

// ExecRequest is the body of POST /v1/vms/{id}/exec.
type ExecRequest struct {
	// Argv is the program and its arguments; Argv[0] is looked up in the
	// guest's PATH. Required.
	Argv []string `json:"argv"`
	// Stdin is standard input as text. At most one of Stdin and StdinB64.
	Stdin string `json:"stdin,omitempty"`
	// StdinB64 is standard input as standard base64, for bytes that are not text.
	StdinB64 string `json:"stdin_b64,omitempty"`
	// Env adds "K=V" entries to the program's environment.
	Env []string `json:"env,omitempty"`
	// TimeoutS bounds the run in seconds, in (0, MaxExecTimeout]; 0 or
	// absent means vmm.DefaultExecTimeout.
	TimeoutS float64 `json:"timeout_s,omitempty"`
}

// ExecResponse is the body of a finished exec, whatever the exit code.
//
// Stdout and Stderr hold the output as text when it is valid UTF-8. When it
// is not, the text field is empty and StdoutB64/StderrB64 hold the bytes in
// standard base64; the _b64 fields are absent otherwise. Use StdoutBytes and
// StderrBytes to get the bytes either way.
type ExecResponse struct {
	ExitCode  int    `json:"exit_code"`
	Signal    int    `json:"signal,omitempty"` // the signal that ended the program, if any
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	StdoutB64 string `json:"stdout_b64,omitempty"`
	StderrB64 string `json:"stderr_b64,omitempty"`
	// Truncated is true when the guest agent cut stdout or stderr.
	Truncated bool `json:"truncated,omitempty"`
}

// StdoutBytes returns the program's standard output.
func (r ExecResponse) StdoutBytes() ([]byte, error) {
	return outputBytes("stdout", r.Stdout, r.StdoutB64)
}

// StderrBytes returns the program's standard error.
func (r ExecResponse) StderrBytes() ([]byte, error) {
	return outputBytes("stderr", r.Stderr, r.StderrB64)
}

func outputBytes(name, text, b64 string) ([]byte, error) {
	if b64 == "" {
		return []byte(text), nil
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("decode %s_b64: %w", name, err)
	}
	return b, nil
}

// HealthResponse is the body of GET /healthz.
type HealthResponse struct {
	Status string `json:"status"` // "ok"
}

// ErrorResponse is the body of every error response.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody describes what went wrong.
type ErrorBody struct {
	Code    string `json:"code"` // one of the Code constants
	Message string `json:"message"`
	// Field names the JSON field or query parameter at fault, when known.
	Field string `json:"field,omitempty"`
}

// Error codes. Each vmm sentinel error has one code and one HTTP status.
const (
	CodeNotFound              = "not_found"              // 404, vmm.ErrNotFound or an unknown route
	CodeInvalidRequest        = "invalid_request"        // 400, vmm.ErrInvalid
	CodeBadJSON               = "bad_json"               // 400, the body is not a JSON object
	CodeUnknownImage          = "unknown_image"          // 400, vmm.ErrUnknownImage
	CodeImageNotBuilt         = "image_not_built"        // 409, vmm.ErrImageNotBuilt
	CodeBrokenImage           = "broken_image"           // 500, vmm.ErrBrokenImage
	CodeNotRunning            = "not_running"            // 409, vmm.ErrNotRunning
	CodeInsufficientResources = "insufficient_resources" // 507, vmm.ErrInsufficientResources
	CodeTooLarge              = "too_large"              // 413, vmm.ErrTooLarge or an oversized body
	CodeAgentError            = "agent_error"            // 502, vmm.ErrAgent
	CodeTimeout               = "timeout"                // 504, vmm.ErrTimeout
	CodeVMDead                = "vm_dead"                // 410, vmm.ErrDead
	CodeUnauthorized          = "unauthorized"           // 401, missing or wrong token
	CodeMethodNotAllowed      = "method_not_allowed"     // 405
	CodeCanceled              = "canceled"               // 499, the client went away (logged, never seen)
	CodeInternal              = "internal"               // 500, anything else
)
