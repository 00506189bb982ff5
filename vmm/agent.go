package vmm

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
)

// agent is the QEMU guest agent of one VM, reached through libvirt's
// qemu-agent-command. One typed method per agent command over run.
type agent struct {
	hv  hypervisor
	dom libvirt.Domain
	vm  string

	// gate is open (non-nil, not closed) while libvirt reopens its agent
	// connection after a loadvm: calls wait for it to close (see
	// Manager.reopenAgent). nil: calls go straight through.
	gateMu sync.Mutex
	gate   chan struct{}
}

// hold makes calls wait until release: libvirt is about to close and reopen
// its connection to the agent.
func (a *agent) hold() {
	a.gateMu.Lock()
	defer a.gateMu.Unlock()
	if a.gate == nil {
		a.gate = make(chan struct{})
	}
}

// release lets calls through again.
func (a *agent) release() {
	a.gateMu.Lock()
	defer a.gateMu.Unlock()
	if a.gate != nil {
		close(a.gate)
		a.gate = nil
	}
}

// awaitOpen waits until the connection is not being reopened, or ctx ends.
func (a *agent) awaitOpen(ctx context.Context) error {
	a.gateMu.Lock()
	g := a.gate
	a.gateMu.Unlock()
	if g == nil {
		return nil
	}
	select {
	case <-g:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("agent on vm %s: waiting for libvirt to reopen its connection after a reset: %w", a.vm, ctx.Err())
	}
}

// agentCallTimeout bounds one agent round trip; long work (exec) polls.
const agentCallTimeout = 10 * time.Second

// agentReconnectWait bounds retries while libvirt's agent link is down.
const agentReconnectWait = 3 * time.Second

func (a *agent) run(ctx context.Context, name string, args, out any) error {
	return a.runArgs(ctx, name, func() any { return args }, out)
}

// idempotentAgentCommands may be re-sent after libvirt's connection dropped
// mid-call: they change nothing in the guest. guest-exec, guest-file-* and
// guest-set-time are not among them (a file read advances the file offset).
//
// Nor is guest-exec-status, though it only reads: qemu-ga frees a process's
// record in the very call that reports it exited (qmp_guest_exec_status in
// qga/commands.c, QEMU 7.2), so if the reply lost to "disappeared" said
// "exited", a retry answers "Invalid parameter 'pid'" and the exit code and
// output are gone: a retry saves only polls of a still running process. And
// the one cause of "disappeared" on a running VM seen here, libvirt closing
// its agent connection after a loadvm, no longer overlaps an exec: every
// call waits while the connection is reopened (the gate, Manager.reopenAgent)
// and an exec holds its VM against resets. The error is reported as it came.
var idempotentAgentCommands = map[string]bool{"guest-ping": true, "guest-info": true, "guest-get-time": true}

// runArgs is run with the arguments made afresh for each attempt, for
// commands whose arguments go stale while retrying (guest-set-time).
func (a *agent) runArgs(ctx context.Context, name string, args func() any, out any) error {
	if err := a.awaitOpen(ctx); err != nil {
		return err
	}
	return a.call(ctx, name, args, out)
}

// call is runArgs without waiting for the gate: for the pings that decide
// when it opens.
func (a *agent) call(ctx context.Context, name string, args func() any, out any) error {
	reply, err := a.attempt(ctx, name, args())
	// After a RAM restore libvirt drops and re-opens its agent connection
	// (seen for up to ~1 s here); a command in that window is retried rather
	// than failed, within agentReconnectWait. "not connected" means libvirt
	// did not pass the command to the guest, so retrying cannot run it twice.
	for deadline := time.Now().Add(agentReconnectWait); err != nil && notConnected(err) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s on vm %s: %w", name, a.vm, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
		reply, err = a.attempt(ctx, name, args())
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("agent %s on vm %s: %w", name, a.vm, ctx.Err())
		}
		// libvirt answers AGENT_UNRESPONSIVE when the agent did not answer
		// its guest-sync within libvirt's own wait (a stopped or wedged
		// qemu-ga): to the caller that is a timeout, not a failed command.
		// "not connected" (no agent on the channel) and "disappeared while
		// executing command" (the channel closed: the guest or QEMU went
		// away) stay agent errors.
		if libvirtCode(err) == libvirt.ErrAgentUnresponsive && !notConnected(err) && !strings.Contains(err.Error(), "disappeared") {
			return fmt.Errorf("agent %s on vm %s: the guest agent did not answer: %w: %w", name, a.vm, ErrTimeout, err)
		}
		return fmt.Errorf("agent %s on vm %s: %w: %w", name, a.vm, ErrAgent, err)
	}
	if err := decodeAgentReply(reply, out); err != nil {
		return fmt.Errorf("agent %s on vm %s: %w: %w", name, a.vm, ErrAgent, err)
	}
	return nil
}

func (a *agent) attempt(ctx context.Context, name string, args any) (string, error) {
	cmd, err := encodeAgentCommand(name, args)
	if err != nil {
		return "", err
	}
	if err := checkRPCString("agent command "+name, len(cmd)); err != nil {
		return "", err
	}
	return a.hv.agentCommand(ctx, a.dom, cmd, idempotentAgentCommands[name])
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
		err := a.ping(ctx)
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

func (a *agent) ping(ctx context.Context) error {
	return a.call(ctx, "guest-ping", func() any { return nil }, nil)
}

// setTime sets the guest clock; after a RAM restore it is back at snapshot time.
func (a *agent) setTime(ctx context.Context) error {
	return a.runArgs(ctx, "guest-set-time", func() any { return map[string]int64{"time": time.Now().UnixNano()} }, nil)
}

func (a *agent) execStart(ctx context.Context, req ExecRequest) (int, error) {
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
	if err := a.run(ctx, "guest-exec", args, &r); err != nil {
		return 0, err
	}
	return r.PID, nil
}

func (a *agent) execStatus(ctx context.Context, pid int) (execStatus, error) {
	var st execStatus
	err := a.run(ctx, "guest-exec-status", map[string]int{"pid": pid}, &st)
	return st, err
}

// maxInlineStdin is the most stdin sent inside the guest-exec command
// itself. It is one agentWriteChunk: qemu-ga was measured to stall on bigger
// messages, far below libvirt's own limit (maxRPCString).
const maxInlineStdin = agentWriteChunk

// exec runs argv to completion, the timeout or the end of ctx. On timeout
// or cancel the process is killed so nothing keeps running in the guest.
// Stdin larger than maxInlineStdin is first written to a guest file in
// chunks and fed to the program from there.
func (a *agent) exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	if len(req.Stdin) > maxInlineStdin {
		path := "/tmp/.deskfarm-stdin-" + newID()
		if err := a.writeFile(ctx, path, req.Stdin); err != nil {
			a.removeFile(ctx, path)
			return ExecResult{}, fmt.Errorf("exec %q on vm %s: stage stdin: %w", req.Argv[0], a.vm, err)
		}
		// sh opens the file as stdin, unlinks it and becomes the program,
		// so exit code and signals are the program's own.
		req.Argv = append([]string{"/bin/sh", "-c", `exec 0<"$0" && rm -f "$0" && exec "$@"`, path}, req.Argv...)
		req.Stdin = nil
	}
	pid, err := a.execStart(ctx, req)
	if err != nil {
		return ExecResult{}, err
	}
	kill := func() {
		// The agent has no kill command: ask the guest's own kill. ctx may
		// be over, so the kill gets a short budget of its own.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = a.execStart(kctx, ExecRequest{Argv: []string{"kill", "-9", fmt.Sprint(pid)}})
	}
	timer := time.NewTimer(req.Timeout)
	defer timer.Stop()
	started := time.Now()
	delay := 2 * time.Millisecond
	for {
		st, err := a.execStatus(ctx, pid)
		if err != nil {
			if ctx.Err() != nil {
				kill()
			}
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
		select {
		case <-ctx.Done():
			kill()
			return ExecResult{}, fmt.Errorf("exec %q on vm %s: %w", req.Argv[0], a.vm, ctx.Err())
		case <-timer.C:
			kill()
			return ExecResult{}, fmt.Errorf("exec %q on vm %s: %w after %s (process killed)", req.Argv[0], a.vm, ErrTimeout, req.Timeout)
		case <-time.After(delay):
		}
		delay = min(delay*2, execPollMax(time.Since(started)))
	}
}

// execPollMax is the longest wait between two guest-exec-status polls of a
// program that has run for d: 50 ms at first, so short commands answer
// quickly; 500 ms from 2 s on. Each poll costs the guest qemu-ga's work and
// the line it logs to the journal: measured in an osworld VM under TCG
// during a 45 s accessibility walk (whose relay is one long exec), 20
// polls a second took 12% of a vCPU in qemu-ga and 9% in systemd-journald.
func execPollMax(d time.Duration) time.Duration {
	if d < 2*time.Second {
		return 50 * time.Millisecond
	}
	return 500 * time.Millisecond
}

// agentReadChunk is the size of one guest-file-read round trip. libvirt's
// RPC caps a string at a few MiB; 1 MiB (1.4 MiB in base64) stays inside.
const agentReadChunk = 1 << 20

// agentWriteChunk is the size of one guest-file-write. Measured with qemu-ga
// 7.2 under TCG: writes up to 160 KiB take 50-80 ms, one of 256 KiB never
// completed (libvirt then reports the agent busy); 64 KiB leaves a margin.
const agentWriteChunk = 64 << 10

func (a *agent) readFile(ctx context.Context, path string, limit int) ([]byte, error) {
	var h int
	if err := a.run(ctx, "guest-file-open", map[string]string{"path": path, "mode": "r"}, &h); err != nil {
		return nil, fmt.Errorf("read file %s: %w", path, err)
	}
	defer a.closeFile(ctx, h)
	var data []byte
	// A broken or hostile agent could answer with short reads forever;
	// a real one fills each chunk until EOF, so twice the chunks the limit
	// allows (plus slack for short reads of pipes) is plenty.
	maxReads := 2*(limit/agentReadChunk) + 16
	for i := 0; ; i++ {
		if i == maxReads {
			return nil, fmt.Errorf("read file %s on vm %s: %w: no end after %d reads (%d bytes)", path, a.vm, ErrAgent, i, len(data))
		}
		var r fileRead
		if err := a.run(ctx, "guest-file-read", map[string]int{"handle": h, "count": agentReadChunk}, &r); err != nil {
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

func (a *agent) writeFile(ctx context.Context, path string, data []byte) error {
	var h int
	if err := a.run(ctx, "guest-file-open", map[string]string{"path": path, "mode": "w"}, &h); err != nil {
		return fmt.Errorf("write file %s: %w", path, err)
	}
	for off := 0; off < len(data); off += agentWriteChunk {
		end := min(off+agentWriteChunk, len(data))
		var r struct {
			Count int `json:"count"`
		}
		if err := a.run(ctx, "guest-file-write", map[string]any{"handle": h, "buf-b64": data[off:end]}, &r); err != nil {
			a.closeFile(ctx, h)
			return fmt.Errorf("write file %s: %w", path, err)
		}
		if r.Count != end-off {
			a.closeFile(ctx, h)
			return fmt.Errorf("write file %s on vm %s: %w: short write %d of %d", path, a.vm, ErrAgent, r.Count, end-off)
		}
	}
	if err := a.run(ctx, "guest-file-close", map[string]int{"handle": h}, nil); err != nil {
		return fmt.Errorf("write file %s: %w", path, err)
	}
	return nil
}

// closeFile closes a guest file handle, also after ctx ended: a handle left
// open stays open in qemu-ga until the guest restarts.
func (a *agent) closeFile(ctx context.Context, h int) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = a.run(cctx, "guest-file-close", map[string]int{"handle": h}, nil)
}

// removeFile deletes a guest file, best effort.
func (a *agent) removeFile(ctx context.Context, path string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = a.execStart(rctx, ExecRequest{Argv: []string{"rm", "-f", path}})
}
