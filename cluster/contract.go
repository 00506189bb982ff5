package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/deskfarm/deskfarm/pool"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and version of deskfarm's resources.
const (
	Group   = "deskfarm.dev"
	Version = "v1alpha1"
	// DefaultNamespace holds the namespaced objects unless --namespace says
	// otherwise.
	DefaultNamespace = "deskfarm"
)

// Labels on Desktop objects, for selectors and kubectl.
const (
	LabelNode    = "deskfarm.dev/node"
	LabelPool    = "deskfarm.dev/pool"
	LabelEpisode = "deskfarm.dev/episode" // set while leased
	LabelState   = "deskfarm.dev/state"
)

// GroupVersion of deskfarm's resources.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Local is the node's own farm as the agent needs it. *pool.Manager
// implements it.
type Local interface {
	// Desktops lists the local pool's VMs, each with its state
	// (pool.DesktopBooting ... pool.DesktopDead): what the agent publishes
	// as Desktop objects.
	Desktops() []pool.Desktop
	// Changed is signalled (coalesced) after any change Desktops would show.
	Changed() <-chan struct{}
	// StartOn leases the warm, clean VM vm of the named pool to a new
	// episode with the given id for ttl (0: the pool's default). It fails
	// with pool.ErrNotWarm when vm is not warm and unleased now.
	StartOn(ctx context.Context, poolName, vm, episode string, ttl time.Duration) (pool.Episode, error)
	// End ends a local episode (pool.Manager.End).
	End(ctx context.Context, episode, reason string) (pool.Episode, error)
	// SetPools makes cfg the local pools: new pools are added, changed
	// counts and TTLs apply at once, and a removed pool's free VMs are
	// destroyed (its leased ones when their episodes end).
	SetPools(ctx context.Context, cfg pool.Config) error
}

// Placement says where an episode lives.
type Placement struct {
	Episode string
	Desktop string // the Desktop object's name
	Node    string
	URL     string // the owner agent's base URL (--advertise)
	VM      string
	Pool    string
	Local   bool // the owner is this agent
	// ExpiresAt is the episode's expiry as claimed.
	ExpiresAt time.Time
}

// BindRequest is what a claiming agent sends the owner of a desktop it
// won: POST {owner}/v1/cluster/bind, authenticated with the cluster token.
type BindRequest struct {
	Desktop    string  `json:"desktop"`
	Episode    string  `json:"episode"`
	Pool       string  `json:"pool"`
	VM         string  `json:"vm"`
	TTLSeconds float64 `json:"ttl_s"`
}

// Errors, each mapped to its API code by web.
var (
	// ErrUnavailable: the apiserver did not answer (503 cluster_unavailable).
	ErrUnavailable = errors.New("cluster unavailable")
	// ErrNodeLost: the episode's node stopped renewing its Lease (410 node_lost).
	ErrNodeLost = errors.New("node lost")
	// ErrNoDesktop: no free desktop of the pool on any live node
	// (503 pool_full, as a single host's full pool).
	ErrNoDesktop = errors.New("no free desktop in the cluster")
	// ErrNotFound: no Desktop holds that episode (404 episode_not_found).
	ErrNotFound = errors.New("no desktop holds that episode")
)

// Front is what web needs of the agent. *Agent implements it.
type Front interface {
	// Node is this agent's node name.
	Node() string
	// Claim leases a free desktop of poolName anywhere in the cluster,
	// preferring this node, and binds it: locally (Local.StartOn) or
	// through the owner's bind route. On a bind failure the claim is
	// given back.
	Claim(ctx context.Context, poolName string, ttl time.Duration) (Placement, pool.Episode, error)
	// Locate finds the episode's desktop in the agent's cache (no
	// apiserver call: it works while the apiserver is down).
	Locate(episode string) (Placement, error)
	// Bind serves the bind route on the owner: it checks that the Desktop
	// object names this node and is claimed by req.Episode, then leases
	// the VM locally.
	Bind(ctx context.Context, req BindRequest) (pool.Episode, error)
	// Health is the agent's own view of the apiserver, for GET /healthz
	// (no apiserver call).
	Health() Health
}

// Health is an agent's view of the apiserver: whether its last node Lease
// renewal went through. The Lease is the agent's proof of life, so when
// renewals fail for a Lease duration other agents call the node lost.
type Health struct {
	Node string
	// Reachable: the last renewal succeeded.
	Reachable bool
	// Since is when the current run of successful renewals began, or, when
	// not Reachable, the first failure of the current run; zero before the
	// first renewal was tried.
	Since time.Time
	// LastRenewal is the last successful renewal; zero before the first.
	LastRenewal time.Time
	// LeaseDuration is the Lease's duration: once LastRenewal is older,
	// other agents call this node lost.
	LeaseDuration time.Duration
	// Err is the last failed renewal's error while not Reachable.
	Err error
}
