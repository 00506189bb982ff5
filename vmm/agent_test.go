package vmm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/internal/fielderr"
)

func readyFarm(t *testing.T, hv *fakeHV) (*testFarm, VM) {
	t.Helper()
	f := newTestFarm(t, hv, nil)
	vm, err := f.m.Create(context.Background(), tinyOpts)
	if err != nil {
		t.Fatal(err)
	}
	hv.mu.Lock()
	hv.agentCmds = nil
	hv.mu.Unlock()
	return f, vm
}

type agentCmd struct {
	Execute   string         `json:"execute"`
	Arguments map[string]any `json:"arguments"`
}

func sentAgentCmds(t *testing.T, hv *fakeHV) []agentCmd {
	t.Helper()
	hv.mu.Lock()
	defer hv.mu.Unlock()
	var out []agentCmd
	for _, raw := range hv.agentCmds {
		if len(raw) > maxRPCString {
			t.Errorf("agent command of %d bytes sent, over libvirt's %d", len(raw), maxRPCString)
		}
		var c agentCmd
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// Stdin bigger than one agent message is written to a guest file in chunks
// and fed to the program from there; no single message grows with it.
func TestExecBigStdinIsStaged(t *testing.T) {
	hv := newFakeHV()
	f, vm := readyFarm(t, hv)
	stdin := []byte(strings.Repeat("0123456789abcdef", 20<<10)) // 320 KiB
	hv.agentReply = func(execute, cmd string) (string, bool) {
		switch execute {
		case "guest-file-open":
			return `{"return":1000}`, true
		case "guest-file-write":
			var c agentCmd
			json.Unmarshal([]byte(cmd), &c)
			b, _ := base64.StdEncoding.DecodeString(c.Arguments["buf-b64"].(string))
			n := len(b)
			return `{"return":{"count":` + itoa(n) + `,"eof":false}}`, true
		}
		return "", false
	}
	if _, err := f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"wc", "-c"}, Stdin: stdin}); err != nil {
		t.Fatal(err)
	}
	cmds := sentAgentCmds(t, hv)
	var writes int
	var path string
	var exec *agentCmd
	for i, c := range cmds {
		switch c.Execute {
		case "guest-file-open":
			path = c.Arguments["path"].(string)
		case "guest-file-write":
			writes++
		case "guest-exec":
			if exec == nil {
				exec = &cmds[i]
			}
		}
	}
	if writes != len(stdin)/agentWriteChunk {
		t.Errorf("%d chunk writes, want %d", writes, len(stdin)/agentWriteChunk)
	}
	if exec == nil {
		t.Fatal("no guest-exec sent")
	}
	if _, ok := exec.Arguments["input-data"]; ok {
		t.Error("big stdin also sent inline")
	}
	args, _ := json.Marshal(exec.Arguments["arg"])
	if !strings.Contains(string(args), path) || !strings.HasSuffix(string(args), `"wc","-c"]`) {
		t.Errorf("exec args %s do not feed %s to wc -c", args, path)
	}

	// Small stdin still goes inline.
	hv.mu.Lock()
	hv.agentCmds = nil
	hv.mu.Unlock()
	if _, err := f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"cat"}, Stdin: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if c := sentAgentCmds(t, hv); c[0].Execute != "guest-exec" || c[0].Arguments["input-data"] != "aGk=" {
		t.Errorf("small stdin: %+v", c[0])
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Oversized stdin is refused, naming the field, before anything is sent.
func TestExecStdinLimit(t *testing.T) {
	hv := newFakeHV()
	f, vm := readyFarm(t, hv)
	_, err := f.m.Exec(context.Background(), vm.ID, ExecRequest{Argv: []string{"cat"}, Stdin: make([]byte, MaxExecStdin+1)})
	if !errors.Is(err, ErrTooLarge) || fielderr.Field(err) != "stdin" {
		t.Fatalf("oversized stdin: %v", err)
	}
	if cmds := sentAgentCmds(t, hv); len(cmds) != 0 {
		t.Fatalf("sent %d agent commands", len(cmds))
	}
}

// An agent command libvirt would answer by dropping the connection is
// refused before it reaches the hypervisor.
func TestAgentRefusesOversizedCommand(t *testing.T) {
	hv := newFakeHV()
	a := &agent{hv: hv, vm: "x"}
	err := a.run(context.Background(), "guest-file-write", map[string]any{"handle": 1, "buf-b64": make([]byte, maxRPCString)}, nil)
	if !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized command: %v", err)
	}
	if len(hv.agentCmds) != 0 || len(hv.calls) != 0 {
		t.Fatal("oversized command reached the hypervisor")
	}
}

// A hostile agent answering file reads with one byte and no EOF forever is
// cut off by the iteration cap, not followed for 64 Mi round trips.
func TestReadFileHostileAgent(t *testing.T) {
	hv := newFakeHV()
	f, vm := readyFarm(t, hv)
	hv.agentReply = func(execute, cmd string) (string, bool) {
		switch execute {
		case "guest-file-open":
			return `{"return":7}`, true
		case "guest-file-read":
			return `{"return":{"count":1,"buf-b64":"eA==","eof":false}}`, true
		}
		return "", false
	}
	start := time.Now()
	_, err := f.m.ReadFile(context.Background(), vm.ID, "/etc/endless")
	if !errors.Is(err, ErrAgent) || !strings.Contains(err.Error(), "no end after") {
		t.Fatalf("endless read: %v", err)
	}
	t.Logf("gave up after %s", time.Since(start))
	// And the handle was closed.
	cmds := sentAgentCmds(t, hv)
	if last := cmds[len(cmds)-1]; last.Execute != "guest-file-close" {
		t.Fatalf("last command %s, want guest-file-close", last.Execute)
	}

	// A read that ctx ends stops at once.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	hv.mu.Lock()
	hv.block["agent:guest-file-read"] = make(chan struct{})
	hv.mu.Unlock()
	start = time.Now()
	if _, err := f.m.ReadFile(ctx, vm.ID, "/etc/endless"); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("read under a 20 ms ctx: %v after %s", err, time.Since(start))
	}
}
