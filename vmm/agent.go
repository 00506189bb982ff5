package vmm

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// agent is the QEMU guest agent of one VM, reached through libvirt's
// qemu-agent-command. One typed method per agent command over run.
type agent struct {
	hv  hypervisor
	dom libvirt.Domain
	vm  string
}

// agentCallTimeout bounds one agent round trip; long work (exec) polls.
const agentCallTimeout = 10 * time.Second

// agentReconnectWait bounds retries while libvirt's agent link is down.
const agentReconnectWait = 3 * time.Second

func (a *agent) run(name string, args, out any) error {
	return a.runArgs(name, func() any { return args }, out)
}

// runArgs is run with the arguments made afresh for each attempt, for
// commands whose arguments go stale while retrying (guest-set-time).
func (a *agent) runArgs(name string, args func() any, out any) error {
	reply, err := a.attempt(name, args())
	// After a RAM restore libvirt drops and re-opens its agent connection
	// (seen for up to ~1 s here); a command in that window is retried rather
	// than failed, within agentReconnectWait.
	for deadline := time.Now().Add(agentReconnectWait); err != nil && notConnected(err) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		reply, err = a.attempt(name, args())
	}
	if err != nil {
		return fmt.Errorf("agent %s on vm %s: %w: %w", name, a.vm, ErrAgent, err)
	}
	if err := decodeAgentReply(reply, out); err != nil {
		return fmt.Errorf("agent %s on vm %s: %w: %w", name, a.vm, ErrAgent, err)
	}
	return nil
}

func (a *agent) attempt(name string, args any) (string, error) {
	cmd, err := encodeAgentCommand(name, args)
	if err != nil {
		return "", err
	}
	return a.hv.agentCommand(a.dom, cmd, agentCallTimeout)
}

// notConnected reports the transient state right after boot or a RAM restore
// when libvirt has not yet seen the guest side of the agent channel open.
func notConnected(err error) bool {
	return err != nil && libvirtCode(err) == libvirt.ErrAgentUnresponsive && strings.Contains(err.Error(), "not connected")
}

// waitReady pings until the agent answers or ctx ends. Retrying is bounded by
// ctx: callers pass the budget they can afford.
func (a *agent) waitReady(ctx context.Context, died func() error) error {
	delay := 20 * time.Millisecond
	for {
		// Each ping retries through "not connected" for agentReconnectWait;
		// during boot the agent may also time out or not be started yet.
		err := a.ping()
		if err == nil {
			return nil
		}
		if derr := died(); derr != nil {
			return derr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for guest agent of vm %s: %w (last: %v)", a.vm, ErrTimeout, err)
		case <-time.After(delay):
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
}

func (a *agent) ping() error { return a.run("guest-ping", nil, nil) }

// setTime sets the guest clock; after a RAM restore it is back at snapshot time.
func (a *agent) setTime() error {
	return a.runArgs("guest-set-time", func() any { return map[string]int64{"time": time.Now().UnixNano()} }, nil)
}

func (a *agent) execStart(req ExecRequest) (int, error) {
	args := map[string]any{"path": req.Argv[0], "arg": req.Argv[1:], "capture-output": true}
	if len(req.Env) > 0 {
		args["env"] = req.Env
	}
	if len(req.Stdin) > 0 {
		args["input-data"] = req.Stdin // []byte marshals as base64, as the agent wants
	}
	var r struct {
		PID int `json:"pid"`
	}
	if err := a.run("guest-exec", args, &r); err != nil {
		return 0, err
	}
	return r.PID, nil
}

func (a *agent) execStatus(pid int) (execStatus, error) {
	var st execStatus
	err := a.run("guest-exec-status", map[string]int{"pid": pid}, &st)
	return st, err
}

// exec runs argv to completion or the timeout. On timeout the process is
// killed so nothing keeps running in the guest.
func (a *agent) exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	pid, err := a.execStart(req)
	if err != nil {
		return ExecResult{}, err
	}
	deadline := time.Now().Add(req.Timeout)
	delay := 2 * time.Millisecond
	for {
		st, err := a.execStatus(pid)
		if err != nil {
			return ExecResult{}, err
		}
		if st.Exited {
			res := ExecResult{Stdout: st.OutData, Stderr: st.ErrData, Truncated: st.OutTruncated || st.ErrTruncated}
			if st.ExitCode != nil {
				res.ExitCode = *st.ExitCode
			}
			if st.Signal != nil {
				res.Signal = *st.Signal
				res.ExitCode = 128 + *st.Signal
			}
			return res, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			// The agent has no kill command: ask the guest's own kill.
			_, _ = a.execStart(ExecRequest{Argv: []string{"kill", "-9", fmt.Sprint(pid)}})
			if ctx.Err() != nil {
				return ExecResult{}, fmt.Errorf("exec %q on vm %s: %w", req.Argv[0], a.vm, ctx.Err())
			}
			return ExecResult{}, fmt.Errorf("exec %q on vm %s: %w after %s (process killed)", req.Argv[0], a.vm, ErrTimeout, req.Timeout)
		}
		time.Sleep(delay)
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// agentReadChunk is the size of one guest-file-read round trip. libvirt's
// RPC caps a string at a few MiB; 1 MiB (1.4 MiB in base64) stays inside.
const agentReadChunk = 1 << 20

// agentWriteChunk is the size of one guest-file-write. Measured with qemu-ga
// 7.2 under TCG: writes up to 160 KiB take 50-80 ms, one of 256 KiB never
// completed (libvirt then reports the agent busy); 64 KiB leaves a margin.
const agentWriteChunk = 64 << 10

func (a *agent) readFile(path string, limit int) ([]byte, error) {
	var h int
	if err := a.run("guest-file-open", map[string]string{"path": path, "mode": "r"}, &h); err != nil {
		return nil, fmt.Errorf("read file %s: %w", path, err)
	}
	defer a.run("guest-file-close", map[string]int{"handle": h}, nil)
	var data []byte
	for {
		var r fileRead
		if err := a.run("guest-file-read", map[string]int{"handle": h, "count": agentReadChunk}, &r); err != nil {
			return nil, fmt.Errorf("read file %s: %w", path, err)
		}
		data = append(data, r.Data...)
		if len(data) > limit {
			return nil, fmt.Errorf("read file %s on vm %s: %w: more than %d bytes", path, a.vm, ErrTooLarge, limit)
		}
		if r.EOF || r.Count == 0 {
			return data, nil
		}
	}
}

func (a *agent) writeFile(path string, data []byte) error {
	var h int
	if err := a.run("guest-file-open", map[string]string{"path": path, "mode": "w"}, &h); err != nil {
		return fmt.Errorf("write file %s: %w", path, err)
	}
	for off := 0; off < len(data); off += agentWriteChunk {
		end := min(off+agentWriteChunk, len(data))
		var r struct {
			Count int `json:"count"`
		}
		if err := a.run("guest-file-write", map[string]any{"handle": h, "buf-b64": data[off:end]}, &r); err != nil {
			_ = a.run("guest-file-close", map[string]int{"handle": h}, nil)
			return fmt.Errorf("write file %s: %w", path, err)
		}
		if r.Count != end-off {
			_ = a.run("guest-file-close", map[string]int{"handle": h}, nil)
			return fmt.Errorf("write file %s on vm %s: %w: short write %d of %d", path, a.vm, ErrAgent, r.Count, end-off)
		}
	}
	if err := a.run("guest-file-close", map[string]int{"handle": h}, nil); err != nil {
		return fmt.Errorf("write file %s: %w", path, err)
	}
	return nil
}
