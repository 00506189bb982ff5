package vmm

import (
	"errors"
	"fmt"
	"time"
)

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
	// ErrHypervisorDown means libvirtd does not answer: the farm redials
	// it, and calls on VMs wait for it within their own deadlines.
	ErrHypervisorDown = errors.New("hypervisor unavailable")
)

// HypervisorDownError is Manager.Health's answer while libvirtd is gone:
// since when, and why the last dial failed. It wraps ErrHypervisorDown.
type HypervisorDownError struct {
	Socket string
	Since  time.Time
	Err    error // the last dial's error; nil before the first redial
}

func (e *HypervisorDownError) Error() string {
	why := "the connection dropped"
	if e.Err != nil {
		why = e.Err.Error()
	}
	return fmt.Sprintf("libvirtd at %s has not answered for %s (%s); deskfarm is reconnecting, and calls on VMs wait for it",
		e.Socket, time.Since(e.Since).Round(time.Second), why)
}

func (e *HypervisorDownError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrHypervisorDown}
	}
	return []error{ErrHypervisorDown, e.Err}
}
