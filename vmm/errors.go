package vmm

import "errors"

// Sentinel errors. Callers test them with errors.Is; every returned error
// wraps one of these (or a libvirt/agent error) with the operation and the VM.
var (
	// ErrNotFound means no VM has the given id.
	ErrNotFound = errors.New("vm not found")
	// ErrInvalid means a request field is out of range or malformed.
	ErrInvalid = errors.New("invalid request")
	// ErrUnknownImage means the image name is not a known recipe.
	ErrUnknownImage = errors.New("unknown image")
	// ErrImageNotBuilt means the recipe exists but its image is not in the cache.
	ErrImageNotBuilt = errors.New("image not built")
	// ErrBrokenImage means the cached image is present but unusable.
	ErrBrokenImage = errors.New("broken image")
	// ErrNotRunning means the operation needs a running, ready VM.
	ErrNotRunning = errors.New("vm not running")
	// ErrInsufficientResources means the host cannot hold the requested VM.
	ErrInsufficientResources = errors.New("insufficient host resources")
	// ErrTooLarge means a file or output exceeded its size limit.
	ErrTooLarge = errors.New("size limit exceeded")
	// ErrAgent means the guest agent failed or did not answer.
	ErrAgent = errors.New("guest agent error")
	// ErrTimeout means a bounded wait ran out.
	ErrTimeout = errors.New("timed out")
	// ErrDead means the VM's QEMU process is gone.
	ErrDead = errors.New("vm process died")
)
