package pool

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the Manager returns wraps one of these (or a
// vmm error) with the operation and the pool, episode or VM.
var (
	// ErrInvalidConfig means a pool config failed validation.
	ErrInvalidConfig = errors.New("invalid pool config")
	// ErrUnknownPool means no pool has the given name.
	ErrUnknownPool = errors.New("unknown pool")
	// ErrEpisodeNotFound means no episode has the given id.
	ErrEpisodeNotFound = errors.New("episode not found")
	// ErrEpisodeEnded means the episode existed but has ended (deleted,
	// expired, or its VM died); its VM is no longer the caller's.
	ErrEpisodeEnded = errors.New("episode ended")
	// ErrPoolFull means the pool already holds its max VMs, all leased or booting.
	ErrPoolFull = errors.New("pool at its max")
	// ErrHostFull means vmm refused to boot a VM for lack of host memory
	// (vmm owns admission); the error also wraps vmm's, which names the
	// field (memory_mib) and wraps vmm.ErrInsufficientResources.
	ErrHostFull = errors.New("host memory exhausted")
	// ErrNotLeased means a call would change a pool VM that no episode
	// leases (warm, or being reset); lease it first (Owner, RequireLease).
	ErrNotLeased = errors.New("pool vm not leased")
	// ErrClosed means the Manager is closed.
	ErrClosed = errors.New("pool manager closed")
	// ErrNotWarm: StartOn named a VM that is not warm, clean and unleased.
	ErrNotWarm = errors.New("pool vm not warm")
)

// NotWarmError is StartOn's refusal of a VM that is not leasable now. It
// wraps ErrNotWarm.
type NotWarmError struct {
	VM, Pool string
	// State is the VM's state now (as Desktops lists it); "" when the pool
	// has no such VM (never had, or it is gone).
	State DesktopState
}

func (e *NotWarmError) Error() string {
	if e.State == "" {
		return fmt.Sprintf("vm %s: %v: pool %s has no such vm", e.VM, ErrNotWarm, e.Pool)
	}
	return fmt.Sprintf("vm %s of pool %s: %v: it is %s", e.VM, e.Pool, ErrNotWarm, e.State)
}

// Unwrap makes errors.Is(err, ErrNotWarm) true.
func (e *NotWarmError) Unwrap() error { return ErrNotWarm }
