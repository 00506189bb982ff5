package cua

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/desk"
)

// Answer fields beside "success", as Cua's handlers return them.
type (
	versionReply struct {
		Protocol int    `json:"protocol"`
		Package  string `json:"package"`
	}
	screenSize struct {
		Width  int `json:"width"`
		Height int `json:"height"`
	}
	screenSizeReply struct {
		Size screenSize `json:"size"`
	}
	cursorReply struct {
		Position struct {
			X int `json:"x"`
			Y int `json:"y"`
		} `json:"position"`
	}
	screenshotReply struct {
		ImageData string `json:"image_data"`
		Format    string `json:"format"`
	}
	commandReply struct {
		Stdout     string `json:"stdout"`
		Stderr     string `json:"stderr"`
		ReturnCode int    `json:"return_code"`
	}
	existsReply struct {
		Exists bool `json:"exists"`
	}
	filesReply struct {
		Files []string `json:"files"`
	}
	contentReply struct {
		Content string `json:"content"`
	}
	bytesReply struct {
		ContentB64 string `json:"content_b64"`
	}
	sizeReply struct {
		Size int64 `json:"size"`
	}
	pidReply struct {
		PID int `json:"pid"`
	}
	authReply struct {
		Message string `json:"message"`
	}
	// treeReply is the accessibility tree, as the AT-SPI walk rendered it
	// (atspi.ModeCua).
	treeReply struct {
		Tree json.RawMessage `json:"tree"`
	}
)

// failure is an answer that carries "success": false itself: Cua's
// handlers return such dicts, and main.py's {"success": True, **result}
// lets them override.
type failure interface{ failed() }

// commandTimeoutReply is run_command's answer on a timeout (base.py).
type commandTimeoutReply struct {
	Success    bool   `json:"success"` // always false
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ReturnCode int    `json:"return_code"`
}

func (commandTimeoutReply) failed() {}

// unsupportedReply refuses a command deskfarm does not serve, shaped like
// Cua's VNC backend refusal (backend_policy.vnc_unsupported_result).
type unsupportedReply struct {
	Success bool   `json:"success"` // always false
	Code    string `json:"code"`
	Error   string `json:"error"`
}

func (unsupportedReply) failed() {}

// errorReply is a failed command. Code is deskfarm's API error code
// (errorCode) when the failure has one a client can act on; Cua's own
// failures carry none, and its client reads only "error".
type errorReply struct {
	Success bool   `json:"success"` // always false
	Error   string `json:"error"`
	Code    string `json:"code,omitempty"`
}

func (errorReply) failed() {}

// encode returns the JSON answer: {"success": true, ...fields} or the
// failure itself. fields must marshal to a JSON object.
func encode(fields any, err error) []byte {
	if err != nil {
		fields = errorReply{Error: err.Error(), Code: errorCode(err)}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if e := enc.Encode(fields); e != nil {
		return encode(nil, e)
	}
	body := bytes.TrimSpace(buf.Bytes())
	if _, ok := fields.(failure); ok {
		return body
	}
	if len(body) < 2 || body[0] != '{' {
		return []byte(`{"success":false,"error":"internal: answer is not a JSON object"}`)
	}
	out := []byte(`{"success":true`)
	if rest := bytes.TrimSpace(body[1:]); len(rest) > 1 { // not "}"
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}

// errorCodes are the failures whose API error code a Cua answer carries, the
// code web gives the same error on the actions route: an agent is refused
// the same way whichever vocabulary it speaks.
var errorCodes = []struct {
	err  error
	code string
}{
	{desk.ErrHumanControl, api.CodeHumanControl},
	{desk.ErrClosed, api.CodeDisplayClosed},
}

func errorCode(err error) string {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}
