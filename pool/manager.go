package pool

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
)

// VMs is what the pool needs from the VM layer; *vmm.Manager and
// *vmmtest.Farm implement it.
type VMs interface {
	Create(ctx context.Context, opts vmm.CreateOptions) (vmm.VM, error)
	List(ctx context.Context) ([]vmm.VM, error)
	Get(ctx context.Context, id string) (vmm.VM, error)
	Destroy(ctx context.Context, id string) error
	Reset(ctx context.Context, id string) (vmm.ResetResult, error)
	Subscribe(ctx context.Context, name string) <-chan vmm.Event
	SetLabel(ctx context.Context, id, key, value string) error
	// DropSnapshots removes a VM's named snapshots (issue 17): a VM goes
	// back to its pool holding none.
	DropSnapshots(ctx context.Context, id string) error
	// Fork starts new VMs from a VM's current state (Manager.Fork).
	Fork(ctx context.Context, id string, opts vmm.ForkOptions) ([]vmm.VM, error)
}

// Labels the pool keeps on its VMs (vmm.VM.Labels). They are the record of
// ownership: read back after a restart, never guessed.
const (
	// LabelPool names the pool a VM belongs to; set when it is created.
	LabelPool = "pool"
	// LabelEpisode names the episode that leases the VM; set at lease,
	// removed when the episode ends.
	LabelEpisode = "episode"
)

// Options configures New. Zero values take the defaults noted.
type Options struct {
	// StateDir is the farm's state dir (the vmm.Manager's, which holds its
	// flock); the pool state file lives there. Required.
	StateDir string
	// Log receives structured logs. Default slog.Default().
	Log *slog.Logger
	// Registerer gets the pool's Prometheus metrics; nil registers none.
	Registerer prometheus.Registerer
	// ReapInterval is how often expired leases are looked for. Default 1 s.
	ReapInterval time.Duration
	// ReconcileInterval is how often the pools are checked against vmm's
	// List, a safety net behind the lifecycle events (see eventLoop).
	// Default 60 s.
	ReconcileInterval time.Duration
	// BootRetry is how long a pool waits after a failed background boot;
	// it doubles with each failure in a row, up to 10 times. Default 30 s.
	BootRetry time.Duration
	// LabelTimeout bounds setting or removing an episode label (a libvirt
	// metadata write). Default DefaultLabelTimeout.
	LabelTimeout time.Duration
	// ResetTimeout bounds a reset to the ready snapshot. Default
	// DefaultResetTimeout.
	ResetTimeout time.Duration
	// DestroyTimeout bounds destroying a VM. Default DefaultDestroyTimeout.
	DestroyTimeout time.Duration
	// DrainTimeout is how long an ending episode's canceled calls are
	// waited for before its VM is reset anyway. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// ListTimeout bounds the safety reconcile's List. Default
	// DefaultListTimeout.
	ListTimeout time.Duration
	// Now is the clock; default time.Now. For tests.
	Now func() time.Time
}

// Defaults of Options' timeouts. They bound calls that normally take well
// under a second (docs/benchmarks.md: reset) and only matter when libvirt
// or a guest hangs.
const (
	DefaultLabelTimeout   = 30 * time.Second
	DefaultResetTimeout   = 2 * time.Minute
	DefaultDestroyTimeout = time.Minute
	DefaultDrainTimeout   = 30 * time.Second
	DefaultListTimeout    = time.Minute
)

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&o.ReapInterval, time.Second)
	set(&o.ReconcileInterval, 60*time.Second)
	set(&o.BootRetry, 30*time.Second)
	set(&o.LabelTimeout, DefaultLabelTimeout)
	set(&o.ResetTimeout, DefaultResetTimeout)
	set(&o.DestroyTimeout, DefaultDestroyTimeout)
	set(&o.DrainTimeout, DefaultDrainTimeout)
	set(&o.ListTimeout, DefaultListTimeout)
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

type poolRT struct {
	cfg     PoolConfig
	waiters []*waiter
	fails   int // background boots failed in a row
	retryAt time.Time
	lastErr string
	errAt   time.Time
}

// maxEnded bounds the ended episodes kept for answering "ended, because".
const maxEnded = 256

// Manager keeps the pools warm and leases their VMs to episodes. All its
// methods are safe for concurrent use. Its mutex guards memory only: no vmm
// call and no file write happens while it is held.
type Manager struct {
	cfg   Config
	vms   VMs
	opts  Options
	log   *slog.Logger
	state *stateFile
	met   *metrics

	bootSem chan struct{} // bounds concurrent boots
	kick    chan struct{} // wakes the refill loop
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	pools   map[string]*poolRT
	members map[string]*member // by key
	leases  map[string]*lease  // by episode id
	ended   []Episode
	seq     uint64 // state version, bumped on every episode change
	bootN   int
	closed  bool
	// diedEarly holds VMs of a pool that died before their Create returned
	// (the event can beat the pool's record of them).
	diedEarly map[string]time.Time
	// creating holds the pool (by name) of VMs vmm defined for a boot whose
	// Create has not returned yet (its EventCreated), for Desktops: a VM
	// is listed as booting before the pool records it.
	creating map[string]string
	// changed is closed at the next change (changes.go); nil when no one
	// waits.
	changed chan struct{}
}

// New recovers the pools' state from the VMs' labels and the state file in
// the state dir, and starts the background loops: refill, reaper and the
// lifecycle event loop. cfg must be valid.
func New(ctx context.Context, vms VMs, cfg Config, opts Options) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.StateDir == "" {
		return nil, fmt.Errorf("pool options: StateDir is required: %w", ErrInvalidConfig)
	}
	opts = opts.withDefaults()
	m := &Manager{cfg: cfg, vms: vms, opts: opts, log: opts.Log,
		state: &stateFile{path: filepath.Join(opts.StateDir, StateFileName)}, met: newMetrics(),
		bootSem: make(chan struct{}, cfg.MaxBoots), kick: make(chan struct{}, 1),
		pools: map[string]*poolRT{}, members: map[string]*member{}, leases: map[string]*lease{},
		diedEarly: map[string]time.Time{}, creating: map[string]string{}}
	for _, p := range cfg.Pools {
		m.pools[p.Name] = &poolRT{cfg: p}
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	// Subscribe before listing, so that nothing that happens between the
	// list and the loop is missed.
	events := vms.Subscribe(m.ctx, "pool")
	toFinish, err := m.recover(ctx)
	if err != nil {
		m.stop()
		return nil, err
	}
	if opts.Registerer != nil {
		if err := m.met.register(opts.Registerer, sizeCollector{m}); err != nil {
			m.stop()
			return nil, fmt.Errorf("register pool metrics: %w", err)
		}
	}
	m.wg.Add(3)
	go m.eventLoop(events)
	go m.refillLoop()
	go m.reapLoop()
	for _, ep := range toFinish {
		m.goEnd(ep.ID, ep.EndReason)
	}
	m.poke()
	return m, nil
}

// Close stops the background work; a boot in flight is canceled (vmm
// removes the half-made VM) and Starts waiting for a VM return ErrClosed.
// VMs and leases stay: a new Manager on the same state dir takes them over.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	for _, p := range m.pools {
		for _, w := range p.waiters {
			w.ch <- grant{}
		}
		p.waiters = nil
	}
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
	return nil
}

// Config returns the pools' config: New's, or the last SetPools'.
func (m *Manager) Config() Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// goEnd ends an episode in the background (reaper, recovery).
func (m *Manager) goEnd(id, reason string) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.End(m.ctx, id, reason) //nolint:errcheck // logged by End
	}()
}

// snapshotLocked is the state file's content now, with its version.
func (m *Manager) snapshotLocked() snapshot {
	m.changedLocked()
	m.seq++
	st := persisted{Version: stateVersion, Ended: slices.Clone(m.ended), Episodes: []Episode{}}
	for _, l := range m.leases {
		st.Episodes = append(st.Episodes, l.ep)
	}
	slices.SortFunc(st.Episodes, func(a, b Episode) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return snapshot{seq: m.seq, st: st}
}

// Owner says whether vmID is a pool VM, of which pool, and the episode
// that leases it ("" when none does: it is warm, booting, being reset or
// destroyed). web refuses mutating calls on a pooled VM with no episode.
func (m *Manager) Owner(vmID string) (pool, episode string, pooled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[vmID]
	if mb == nil {
		// A VM vmm is still creating for a pool is the pool's already: a
		// call on it while it boots must be refused, not let through to
		// dirty a VM the pool then leases unreset (the soak's dirty lease).
		if p, ok := m.creating[vmID]; ok {
			return p, "", true
		}
		return "", "", false
	}
	if mb.state == stLeased {
		if l := m.leases[mb.episode]; l != nil && l.ep.State == EpisodeActive {
			return mb.pool, mb.episode, true
		}
	}
	return mb.pool, "", true
}

// RequireLease returns nil when vmID may be changed by a caller: it is not
// a pool VM, or an active episode leases it. Otherwise the error wraps
// ErrNotLeased and names the VM and pool.
func (m *Manager) RequireLease(vmID string) error {
	pool, ep, pooled := m.Owner(vmID)
	if pooled && ep == "" {
		return fmt.Errorf("vm %s of pool %s: %w: lease it with POST /v1/episodes", vmID, pool, ErrNotLeased)
	}
	return nil
}

// Touch records that a call may have changed vmID's guest (an action, an
// exec, a file write, a human takeover). A touched VM is reset before it
// is leased again. It is cheap and does no I/O; a VM that is not a pool
// VM is ignored.
func (m *Manager) Touch(vmID string) {
	m.mu.Lock()
	mb := m.members[vmID]
	if mb == nil {
		m.mu.Unlock()
		return
	}
	t := m.targetLocked(mb, "touch")
	fx, _ := m.stepLocked(mb, inTouch) // refused: a gone member needs no mark
	m.mu.Unlock()
	m.carry(mb, fx, t, carrying{}) // at most wake: memory only
}

// Pools returns every pool's config, sizes and VMs, by name.
func (m *Manager) Pools() []PoolStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PoolStatus, 0, len(m.pools))
	for _, p := range m.pools {
		c := m.countLocked(p.cfg.Name)
		s := PoolStatus{PoolConfig: p.cfg, Warm: c.warm, Leased: c.leased, Booting: c.booting, Ending: c.ending, VMs: []MemberStatus{}}
		for _, mb := range m.members {
			if mb.pool == p.cfg.Name && mb.vm != "" && mb.state != stDestroying {
				s.VMs = append(s.VMs, MemberStatus{VM: mb.vm, State: mb.state.String(), Dirty: mb.dirty, Episode: mb.episode})
			}
		}
		slices.SortFunc(s.VMs, func(a, b MemberStatus) int { return strings.Compare(a.VM, b.VM) })
		if p.lastErr != "" {
			at, retry := p.errAt, p.retryAt
			s.LastError, s.LastErrorAt, s.RetryAt = p.lastErr, &at, &retry
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PoolStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (m *Manager) poolNames() []string {
	return slices.Sorted(maps.Keys(m.pools))
}
