package api

import (
	"encoding/base64"
	"fmt"
	"time"
)

// CreateOptions is the body of POST /v1/vms.
type CreateOptions struct {
	// Image is the recipe name, e.g. "desktop" or "tiny". Required.
	Image string `json:"image"`
	// MemoryMiB is guest RAM; 0 means the server's default (1024).
	MemoryMiB int `json:"memory_mib"`
	// VCPUs is the number of virtual CPUs; 0 means the server's default (2).
	VCPUs int `json:"vcpus"`
	// Boot forces a full boot even when a saved ready state exists.
	Boot bool `json:"boot,omitempty"`
	// Width and Height set the guest screen; 0 means 1280x800.
	Width  int `json:"width"`
	Height int `json:"height"`
	// Labels are kept with the VM across server restarts.
	Labels map[string]string `json:"labels,omitempty"`
	// Network is "none" (the default: no network interface at all) or
	// "user" (QEMU user-mode networking, outbound only, plus Forwards).
	Network string `json:"network,omitempty"`
	// Forwards are host ports on 127.0.0.1 forwarded to guest TCP ports;
	// only with network "user".
	Forwards []Forward `json:"forwards,omitempty"`
}

// VM states.
const (
	StateCreating = "creating" // lifecycle steps in progress
	StateReady    = "ready"    // running, at or after its ready snapshot
	StateBroken   = "broken"   // exists but is not usable (QEMU died, reset failed)
)

// VM describes one VM: the body of POST /v1/vms and GET /v1/vms/{id}.
type VM struct {
	ID        string    `json:"id"`
	Domain    string    `json:"domain"` // libvirt domain name, "deskfarm-<id>"
	Image     string    `json:"image"`
	ImageHash string    `json:"image_hash"`
	State     string    `json:"state"` // one of the State constants
	MemoryMiB int       `json:"memory_mib"`
	VCPUs     int       `json:"vcpus"`
	Width     int       `json:"width"`
	Height    int       `json:"height"`
	Accel     string    `json:"accel"` // "kvm" or "tcg"
	CreatedAt time.Time `json:"created_at"`
	// BootSeconds is how long create took from define to the ready snapshot.
	BootSeconds float64 `json:"boot_seconds"`
	// Start says how the VM came up: "boot", "saved-state" or "fork" (from another VM's state at a fork).
	Start string `json:"start"`
	// VNCSocket is the unix socket of the VM's VNC server, on the server's host.
	VNCSocket string `json:"vnc_socket"`
	// Resets counts resets since the VM was created.
	Resets int `json:"resets"`
	// Labels are the VM's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Network and Forwards are as created.
	Network  string    `json:"network"`
	Forwards []Forward `json:"forwards,omitempty"`
}

// VMList is the body of GET /v1/vms.
type VMList struct {
	VMs []VM `json:"vms"`
}

// ResetResponse is the body of POST /v1/vms/{id}/reset.
type ResetResponse struct {
	ID           string  `json:"id"`
	ResetSeconds float64 `json:"reset_seconds"`
	ResetMS      int64   `json:"reset_ms"`
}

// MaxExecTimeout bounds ExecRequest.TimeoutS, in seconds.
const MaxExecTimeout = 3600

// DefaultExecTimeout is the server's bound on an exec that names none.
const DefaultExecTimeout = 60 * time.Second

// MaxFileSize bounds a file read or written through the API, and exec's
// stdin, in bytes.
const MaxFileSize = 64 << 20

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
	// absent means DefaultExecTimeout.
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
	// Cluster is the node agent's view of the apiserver; absent on a
	// single host.
	Cluster *ClusterHealth `json:"cluster,omitempty"`
}

// ClusterHealth is a node agent's view of the apiserver, from its node
// Lease's renewals. An unreachable apiserver does not fail GET /healthz:
// the node's running episodes go on without it (new claims answer 503
// cluster_unavailable), and a readiness probe that failed on every node at
// once would cut them off.
type ClusterHealth struct {
	Node string `json:"node"`
	// APIServer is "ok" (the last Lease renewal went through),
	// "unreachable" (it failed; Error says how) or "unknown" (none tried
	// yet, just after start).
	APIServer string `json:"apiserver"`
	// Since is when APIServer last changed (RFC 3339), absent while unknown.
	Since string `json:"since,omitempty"`
	// LeaseRenewed is the node Lease's last renewal (RFC 3339), absent
	// before the first; LeaseSeconds is its duration: past it, other
	// agents call this node lost.
	LeaseRenewed string  `json:"lease_renewed,omitempty"`
	LeaseSeconds float64 `json:"lease_seconds"`
	Error        string  `json:"error,omitempty"`
}

// The values of ClusterHealth.APIServer.
const (
	APIServerOK          = "ok"
	APIServerUnreachable = "unreachable"
	APIServerUnknown     = "unknown"
)

// Forward forwards a host TCP port, bound to 127.0.0.1 only, to a guest
// TCP port (1024-65535, unique on the host).
type Forward struct {
	GuestPort int `json:"guest_port"`
	HostPort  int `json:"host_port"`
}
