package vmm

import (
	"encoding/json"
	"fmt"
)

// This file is the QEMU guest agent's wire format, kept apart from the I/O
// so it can be tested on captured replies (qemu-ga 7.2, Debian bookworm).

// agentError is an error object the guest agent returned.
type agentError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *agentError) Error() string { return e.Class + ": " + e.Desc }

// encodeAgentCommand renders {"execute": name, "arguments": args}.
func encodeAgentCommand(name string, args any) (string, error) {
	req := struct {
		Execute   string `json:"execute"`
		Arguments any    `json:"arguments,omitempty"`
	}{name, args}
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encode agent command %s: %w", name, err)
	}
	return string(b), nil
}

// decodeAgentReply reads {"return": ...} into out, or returns the agent's
// {"error": ...} as an *agentError.
func decodeAgentReply(reply string, out any) error {
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *agentError     `json:"error"`
	}
	if err := json.Unmarshal([]byte(reply), &r); err != nil {
		return fmt.Errorf("decode agent reply %.200q: %w", reply, err)
	}
	if r.Error != nil {
		return r.Error
	}
	if out == nil || len(r.Return) == 0 {
		return nil
	}
	if err := json.Unmarshal(r.Return, out); err != nil {
		return fmt.Errorf("decode agent return %.200q: %w", r.Return, err)
	}
	return nil
}

// execStatus is guest-exec-status's return (qemu-ga 7.2).
type execStatus struct {
	Exited       bool   `json:"exited"`
	ExitCode     *int   `json:"exitcode"`
	Signal       *int   `json:"signal"`
	OutData      []byte `json:"out-data"` // base64 on the wire; encoding/json decodes it
	ErrData      []byte `json:"err-data"`
	OutTruncated bool   `json:"out-truncated"`
	ErrTruncated bool   `json:"err-truncated"`
}

// fileRead is guest-file-read's return.
type fileRead struct {
	Count int    `json:"count"`
	Data  []byte `json:"buf-b64"`
	EOF   bool   `json:"eof"`
}
