package vmm

import (
	"context"

	"github.com/deskfarm/deskfarm/internal/fielderr"
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
)

// CreateOptions says what VM to make. Zero values take the documented defaults.
type CreateOptions struct {
	// Image is the recipe name, e.g. "desktop" or "tiny". Required.
	Image string `json:"image"`
	// MemoryMiB is guest RAM; default DefaultMemoryMiB, at least MinMemoryMiB.
	MemoryMiB int `json:"memory_mib"`
	// VCPUs is the number of virtual CPUs; default DefaultVCPUs, at most the host's CPUs.
	VCPUs int `json:"vcpus"`
	// Boot forces a full boot even when a saved ready state of this image
	// and size exists (for baselines; normally saved state is faster).
	Boot bool `json:"boot,omitempty"`
	// Width and Height set the guest screen; default 1280x800.
	Width  int `json:"width"`
	Height int `json:"height"`
	// Labels are kept in the domain's metadata and survive a deskfarm
	// restart, e.g. the pool a VM belongs to. Keys and values are short
	// printable strings (see ValidateLabels).
	Labels map[string]string `json:"labels,omitempty"`
	// Network is NetworkNone (the default: the guest has no network
	// interface at all) or NetworkUser (QEMU user-mode networking: the
	// guest reaches out through the host's stack, nothing reaches in except
	// Forwards).
	Network string `json:"network,omitempty"`
	// Forwards are host ports on 127.0.0.1 forwarded to guest TCP ports;
	// only with NetworkUser, at most MaxForwards.
	Forwards []Forward `json:"forwards,omitempty"`
}

// Network modes (CreateOptions.Network).
const (
	NetworkNone = "none"
	NetworkUser = "user"
)

// Forward forwards a host TCP port, bound to 127.0.0.1 only, to a guest
// TCP port (QEMU user-mode networking's hostfwd).
type Forward struct {
	GuestPort int `json:"guest_port" xml:"guest-port,attr"`
	HostPort  int `json:"host_port" xml:"host-port,attr"`
}

// MaxForwards bounds CreateOptions.Forwards.
const MaxForwards = 8

// Defaults and limits for CreateOptions.
const (
	DefaultMemoryMiB = 1024
	MinMemoryMiB     = 128
	DefaultVCPUs     = 2
	DefaultWidth     = 1280
	DefaultHeight    = 800
)

// VM describes one deskfarm VM.
type VM struct {
	ID        string    `json:"id"`
	Domain    string    `json:"domain"` // libvirt domain name, "deskfarm-<id>"
	Image     string    `json:"image"`
	ImageHash string    `json:"image_hash"`
	State     State     `json:"state"`
	MemoryMiB int       `json:"memory_mib"`
	VCPUs     int       `json:"vcpus"`
	Width     int       `json:"width"`
	Height    int       `json:"height"`
	Accel     string    `json:"accel"` // "kvm" or "tcg"
	CreatedAt time.Time `json:"created_at"`
	// BootSeconds is how long create took from define to the ready snapshot.
	BootSeconds float64 `json:"boot_seconds"`
	// Start says how the VM came up: StartBoot or StartSavedState.
	Start string `json:"start"`
	// VNCSocket is the unix socket of the VM's VNC server.
	VNCSocket string `json:"vnc_socket"`
	// Resets counts resets since the VM was created.
	Resets int `json:"resets"`
	// Labels are the VM's labels (CreateOptions.Labels, SetLabel).
	Labels map[string]string `json:"labels,omitempty"`
	// Network and Forwards are as created (CreateOptions).
	Network  string    `json:"network"`
	Forwards []Forward `json:"forwards,omitempty"`
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
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	Stdout   []byte `json:"stdout"`
	Stderr   []byte `json:"stderr"`
	// Truncated is true when the agent cut stdout or stderr (its limit is 16 MiB each).
	Truncated bool `json:"truncated,omitempty"`
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
}

// Label limits (ValidateLabels).
const (
	MaxLabels        = 16
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 253
)

// ValidateLabels checks label keys ([a-z0-9._-], 1-63 bytes, starting with a
// letter or digit) and values (printable ASCII without '<', '>' or '&',
// at most 253 bytes), and that there are at most MaxLabels.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fielderr.Newf("labels", ErrInvalid, "%d labels; at most %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if !validLabelKey(k) {
			return fielderr.Newf("labels", ErrInvalid, "key %q: want 1-%d of a-z, 0-9, '.', '_', '-', starting with a letter or digit", k, MaxLabelKeyLen)
		}
		if len(v) > MaxLabelValueLen {
			return fielderr.Newf("labels."+k, ErrInvalid, "value is %d bytes; at most %d", len(v), MaxLabelValueLen)
		}
		for _, r := range v {
			if r < 0x20 || r > 0x7e || r == '<' || r == '>' || r == '&' {
				return fielderr.Newf("labels."+k, ErrInvalid, "value %q: want printable ASCII without <, > or &", v)
			}
		}
	}
	return nil
}

func validLabelKey(k string) bool {
	if k == "" || len(k) > MaxLabelKeyLen {
		return false
	}
	for i, r := range k {
		alnum := r >= 'a' && r <= 'z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || r != '.' && r != '_' && r != '-') {
			return false
		}
	}
	return true
}
