package pool

import "time"

// EpisodeState is where an episode is in its life.
type EpisodeState string

// Episode states.
const (
	EpisodeActive EpisodeState = "active" // the VM is the episode's
	EpisodeEnding EpisodeState = "ending" // the VM is being reset
	EpisodeEnded  EpisodeState = "ended"  // the VM is no longer the episode's
)

// End reasons.
const (
	ReasonDeleted = "deleted" // DELETE /v1/episodes/{id}
	ReasonExpired = "expired" // its TTL ran out
	ReasonVMDied  = "vm_died" // QEMU died; the VM was destroyed and replaced
	ReasonVMGone  = "vm_gone" // the VM disappeared (destroyed outside the pool, or lost across a restart)
)

// reasonText says in words why an episode ended, for errors a client reads.
var reasonText = map[string]string{
	ReasonDeleted: "it was deleted",
	ReasonExpired: "its TTL ran out",
	ReasonVMDied:  "its VM died (QEMU exited) and is being replaced",
	ReasonVMGone:  "its VM disappeared",
}

// DescribeReason is the end reason in words, with its code.
func DescribeReason(reason string) string {
	if t, ok := reasonText[reason]; ok {
		return t + " (" + reason + ")"
	}
	return reason
}

// Episode is one lease of a pool VM.
type Episode struct {
	ID    string
	VM    string
	Pool  string
	State EpisodeState
	// Warm is true when a warm VM served the start; false when one was
	// booted for it (BootSeconds says how long that took).
	Warm        bool
	BootSeconds float64
	CreatedAt   time.Time
	ExpiresAt   time.Time
	TTLSeconds  float64
	// ScreenshotSize is the pool's default for what the agent sees.
	ScreenshotSize string
	// CleanStart says the VM was at its ready snapshot, untouched since,
	// when the episode leased it. The lease state machine refuses to lease
	// a dirty VM, so it is always true; it is recorded so a client can see it.
	CleanStart bool
	// ResetBeforeLeaseMS is how long the reset took that made the VM clean
	// again after something touched it while unleased (or after a restart,
	// when what happened to it is unknown); 0 when it was clean already.
	ResetBeforeLeaseMS int64
	// Set once ended.
	EndedAt      *time.Time
	EndReason    string
	ResetSeconds float64
	// VMReplaced is true when the VM could not be reset and was destroyed;
	// the pool boots a replacement.
	VMReplaced bool
}

// PoolStatus is one pool's config and current sizes.
type PoolStatus struct {
	PoolConfig
	Warm    int
	Leased  int
	Booting int
	Ending  int // being reset or destroyed
	// VMs are the pool's VMs and their states (warm, leased, resetting),
	// by id. VMs still booting have no id yet; VMs being destroyed (dead,
	// failed a reset, evicted) have left the pool and are only counted in
	// Ending.
	VMs []MemberStatus
	// LastError is why the last background boot failed (e.g. vmm refused
	// it for lack of memory); empty once a boot succeeds. The pool retries
	// at RetryAt.
	LastError   string
	LastErrorAt *time.Time
	RetryAt     *time.Time
}

// MemberStatus is one pool VM as PoolStatus lists it.
type MemberStatus struct {
	VM    string
	State string
	// Dirty is true when something touched the VM since its last reset
	// began; it is reset before it is leased.
	Dirty   bool
	Episode string
}
