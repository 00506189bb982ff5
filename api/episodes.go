package api

import "time"

// StartEpisodeRequest is the body of POST /v1/episodes.
type StartEpisodeRequest struct {
	// Pool names the pool; omitted, the farm's first pool (the default
	// config's "desktop").
	Pool string `json:"pool"`
	// TTLS is the lease in seconds; 0 or absent means the pool's default_ttl_s.
	TTLS float64 `json:"ttl_s,omitempty"`
	// Record keeps the episode's trajectory (steps, screenshots, video)
	// under the state dir; omitted, the pool's "record" default.
	Record *bool `json:"record,omitempty"`
	// RecordOptions are what the recording keeps beyond steps and video.
	RecordOptions *RecordOptions `json:"record_options,omitempty"`
}

// Episode states.
const (
	EpisodeActive = "active" // the VM is the episode's
	EpisodeEnding = "ending" // the VM is being reset or destroyed
	EpisodeEnded  = "ended"
)

// Episode is an episode as the API shows it: the body of POST
// /v1/episodes, GET and DELETE /v1/episodes/{id}.
type Episode struct {
	ID    string `json:"id"`
	VM    string `json:"vm"`
	Pool  string `json:"pool"`
	State string `json:"state"` // one of the Episode state constants
	// Warm is true when a warm VM served the start; false when one was
	// booted for it (BootSeconds says how long that took).
	Warm        bool      `json:"warm"`
	BootSeconds float64   `json:"boot_seconds,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	TTLSeconds  float64   `json:"ttl_s"`
	// ScreenshotSize is the pool's default for what the agent sees.
	ScreenshotSize string `json:"screenshot_size"`
	// CleanStart says the VM was at its ready snapshot, untouched since,
	// when the episode leased it (always true: the pool resets a VM that
	// anything touched before leasing it).
	CleanStart bool `json:"clean_start"`
	// ResetBeforeLeaseMS is how long the reset took that made the VM clean
	// again after something touched it while unleased (or after a server
	// restart); absent when none was needed.
	ResetBeforeLeaseMS int64 `json:"reset_before_lease_ms,omitempty"`
	// Set once ended.
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	EndReason    string     `json:"end_reason,omitempty"`
	ResetSeconds float64    `json:"reset_seconds,omitempty"`
	// VMReplaced is true when the VM could not be reset and was destroyed;
	// the pool boots a replacement.
	VMReplaced bool `json:"vm_replaced,omitempty"`
	// ViewerURL is the VM's live view in a browser.
	ViewerURL string `json:"viewer_url"`
	// Recording is true while the episode's trajectory is being recorded;
	// TrajectoryURL is then its page (/trajectories/{id}).
	Recording     bool   `json:"recording,omitempty"`
	TrajectoryURL string `json:"trajectory_url,omitempty"`
	// OSWorldAddress is set for VMs that serve OSWorld's in-VM API (image
	// osworld): "host:server_port:chromium_port:vnc_port:vlc_port", what
	// an OSWorld provider's get_ip_address returns (package osworld).
	OSWorldAddress string `json:"osworld_address,omitempty"`
	// Node and URL are set by an agent of a cluster (serve --kubeconfig):
	// the node whose agent runs the episode's VM and that agent's base URL
	// (its --advertise). Any agent serves the episode's routes, proxying
	// them to the owner; a client may also call URL directly.
	Node string `json:"node,omitempty"`
	URL  string `json:"url,omitempty"`
}

// EpisodeList is the body of GET /v1/episodes.
type EpisodeList struct {
	Episodes []Episode `json:"episodes"`
}

// Pool is one pool's config and current sizes, as GET /v1/pools lists it.
type Pool struct {
	Name           string  `json:"name"`
	Image          string  `json:"image"`
	MemoryMiB      int     `json:"memory_mib"`
	VCPUs          int     `json:"vcpus"`
	Width          int     `json:"width"`
	Height         int     `json:"height"`
	MinWarm        int     `json:"min_warm"`
	Max            int     `json:"max"`
	ScreenshotSize string  `json:"screenshot_size"`
	DefaultTTLS    float64 `json:"default_ttl_s"`
	MaxTTLS        float64 `json:"max_ttl_s"`
	// Network is the pool's VMs' network ("none" or "user"; omitted for
	// the default, none) and Forwards the guest TCP ports each gets a host
	// port for (each VM's record lists its host ports).
	Network  string `json:"network,omitempty"`
	Forwards []int  `json:"forwards,omitempty"`
	// Record is the pool's default for StartEpisodeRequest.Record, and
	// RecordOptions what its recordings keep (omitted when nothing).
	Record        bool           `json:"record,omitempty"`
	RecordOptions *RecordOptions `json:"record_options,omitempty"`

	Warm    int `json:"warm"`
	Leased  int `json:"leased"`
	Booting int `json:"booting"`
	Ending  int `json:"ending"` // being reset or destroyed
	// VMs are the pool's VMs and their states (warm, leased, resetting).
	// VMs still booting have no id yet; VMs being destroyed are only
	// counted in Ending.
	VMs []PoolVM `json:"vms"`
	// LastError is why the last background boot failed; empty once a boot
	// succeeds. The pool retries at RetryAt.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	RetryAt     *time.Time `json:"retry_at,omitempty"`
}

// PoolList is the body of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// PoolVM is one VM of a pool.
type PoolVM struct {
	VM    string `json:"vm"`
	State string `json:"state"`
	// Dirty is true when something touched the VM since its last reset
	// began; it is reset before it is leased.
	Dirty   bool   `json:"dirty,omitempty"`
	Episode string `json:"episode,omitempty"`
}
