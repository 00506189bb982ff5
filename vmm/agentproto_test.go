package vmm

import (
	"errors"
	"testing"
)

// capturedExecStatus was captured from qemu-ga 7.2 (Debian bookworm, tiny
// image) with `virsh qemu-agent-command DOM '{"execute":"guest-exec-status",...}'`
// after guest-exec of `sh -c 'echo hello; echo oops >&2; exit 3'`.
const capturedExecStatus = `{"return":{"exitcode":3,"err-data":"b29wcwo=","out-data":"aGVsbG8K","err-truncated":false,"out-truncated":false,"exited":true}}`

// handMadeError is hand-made in qemu-ga's documented shape
// (qga/qapi-schema.json), not captured: libvirt turns an agent's error reply
// into its own error (see the "file-open-missing" capture in
// testdata/captures.json), so deskfarm never sees this form through libvirt.
const handMadeError = `{"error":{"class":"GenericError","desc":"failed to open file '/nope': No such file or directory"}}`

func TestDecodeAgentReply(t *testing.T) {
	var st execStatus
	if err := decodeAgentReply(capturedExecStatus, &st); err != nil {
		t.Fatal(err)
	}
	if !st.Exited || st.ExitCode == nil || *st.ExitCode != 3 || string(st.OutData) != "hello\n" || string(st.ErrData) != "oops\n" {
		t.Fatalf("exec status: %+v", st)
	}
	st = execStatus{}
	caps := agentCaptures(t)
	if err := decodeAgentReply(caps["exec-status-running"].Output, &st); err != nil || st.Exited {
		t.Fatalf("running: %+v %v", st, err)
	}
	var fr fileRead
	if err := decodeAgentReply(caps["file-read"].Output, &fr); err != nil || string(fr.Data) != "tiny\n" || !fr.EOF || fr.Count != 5 {
		t.Fatalf("file read: %+v %v", fr, err)
	}
	var pid struct {
		PID int `json:"pid"`
	}
	if err := decodeAgentReply(caps["exec-start"].Output, &pid); err != nil || pid.PID == 0 {
		t.Fatalf("exec start: %+v %v", pid, err)
	}
	err := decodeAgentReply(handMadeError, nil)
	var ae *agentError
	if !errors.As(err, &ae) || ae.Class != "GenericError" {
		t.Fatalf("error reply: %v", err)
	}
	if err := decodeAgentReply(`{"return":`, nil); err == nil {
		t.Fatal("truncated reply accepted")
	}
}

func TestEncodeAgentCommand(t *testing.T) {
	s, err := encodeAgentCommand("guest-exec", map[string]any{"path": "echo", "arg": []string{"a b"}})
	if err != nil {
		t.Fatal(err)
	}
	if s != `{"execute":"guest-exec","arguments":{"arg":["a b"],"path":"echo"}}` {
		t.Fatal(s)
	}
	s, _ = encodeAgentCommand("guest-ping", nil)
	if s != `{"execute":"guest-ping"}` {
		t.Fatal(s)
	}
}
