package vmm

import (
	"context"
	"net"
	"time"
)

// State is a VM's lifecycle state as deskfarm sees it.
type State string

// VM states.
const (
	StateCreating State = "creating" // lifecycle steps in progress
	StateReady    State = "ready"    // running, at or after its ready snapshot
	StateBroken   State = "broken"   // domain exists but is not usable (QEMU died, reset failed)
)

// How a VM came up (VM.Start).
const (
	// StartBoot: booted from the image, then snapshotted when ready.
	StartBoot = "boot"
	// StartSavedState: restored from the saved ready state of an earlier VM
	// of the same image and size, on a copy of its overlay; no boot.
	StartSavedState = "saved-state"
	// StartFork: restored from another VM's state at a Fork.
	StartFork = "fork"
)

// VM describes one deskfarm VM.
type VM struct {
	ID        string
	Domain    string // libvirt domain name, "deskfarm-<id>"
	Image     string
	ImageHash string
	State     State
	MemoryMiB int
	VCPUs     int
	Width     int
	Height    int
	Accel     string // "kvm" or "tcg"
	CreatedAt time.Time
	// BootSeconds is how long create took from define to the ready snapshot.
	BootSeconds float64
	// Start says how the VM came up: StartBoot, StartSavedState or StartFork.
	Start string
	// VNCSocket is the unix socket of the VM's VNC server.
	VNCSocket string
	// Resets counts resets since the VM was created.
	Resets int
	// Labels are the VM's labels (CreateOptions.Labels, SetLabel).
	Labels map[string]string
	// Network and Forwards are as created (CreateOptions).
	Network  string
	Forwards []Forward
}

// ExecRequest runs a program in the guest through the guest agent.
type ExecRequest struct {
	Argv []string // Argv[0] is the program, looked up in the guest's PATH
	// Stdin is optional, at most MaxExecStdin bytes. Up to 64 KiB travel in
	// the exec command; more is staged in a guest file first.
	Stdin   []byte
	Env     []string      // optional, "K=V"
	Timeout time.Duration // 0 means DefaultExecTimeout
}

// DefaultExecTimeout bounds an exec that names no timeout.
const DefaultExecTimeout = 60 * time.Second

// ExecResult is what a guest program returned.
type ExecResult struct {
	ExitCode int
	Signal   int
	Stdout   []byte
	Stderr   []byte
	// Truncated is true when the agent cut stdout or stderr (its limit is 16 MiB each).
	Truncated bool
}

// ResetResult says how a reset went.
type ResetResult struct {
	Duration time.Duration
}

// MaxFileSize bounds ReadFile and WriteFile.
const MaxFileSize = 64 << 20

// MaxExecStdin bounds ExecRequest.Stdin.
const MaxExecStdin = MaxFileSize

// Farm is what the API and CLI need from the VM layer. Implemented by *Manager.
//
// Semantics:
//   - Create returns only once the VM is ready (booted, session up, agent
//     answering, ready snapshot taken); on any failure it has removed all it made.
//   - Destroy removes the domain, overlay, snapshot data and sockets; it is
//     idempotent for a VM that is half gone, and ErrNotFound for an unknown id.
//   - Reset returns a ready VM to its ready snapshot; ErrNotRunning otherwise.
type Farm interface {
	Create(ctx context.Context, opts CreateOptions) (VM, error)
	List(ctx context.Context) ([]VM, error)
	Get(ctx context.Context, id string) (VM, error)
	Destroy(ctx context.Context, id string) error
	Reset(ctx context.Context, id string) (ResetResult, error)
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	// Subscribe returns the lifecycle events published after the call (see
	// Event); the channel closes when ctx ends or the farm closes. name
	// says who subscribes, for the queue metrics (Bus).
	Subscribe(ctx context.Context, name string) <-chan Event
	// SetLabel sets (or, with "", removes) one label of a VM; labels
	// survive restarts.
	SetLabel(ctx context.Context, id, key, value string) error
	// DialA11y connects to a VM's accessibility port (Manager.DialA11y).
	DialA11y(ctx context.Context, id string) (net.Conn, error)
	// Health is nil while the farm can reach its hypervisor
	// (Manager.Health).
	Health() error
}
