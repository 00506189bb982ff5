package pool

import "errors"

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
