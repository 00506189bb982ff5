package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
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
	Subscribe(ctx context.Context) <-chan vmm.Event
	SetLabel(ctx context.Context, id, key, value string) error
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
	// Now is the clock; default time.Now. For tests.
	Now func() time.Time
}

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

// Episode is one lease of a pool VM.
type Episode struct {
	ID    string       `json:"id"`
	VM    string       `json:"vm"`
	Pool  string       `json:"pool"`
	State EpisodeState `json:"state"`
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
	// when the episode leased it. The lease state machine refuses to lease
	// a dirty VM, so it is always true; it is recorded so a client can see it.
	CleanStart bool `json:"clean_start"`
	// ResetBeforeLeaseMS is how long the reset took that made the VM clean
	// again after something touched it while unleased (or after a restart,
	// when what happened to it is unknown); 0 when it was clean already.
	ResetBeforeLeaseMS int64 `json:"reset_before_lease_ms,omitempty"`
	// Set once ended.
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	EndReason    string     `json:"end_reason,omitempty"`
	ResetSeconds float64    `json:"reset_seconds,omitempty"`
	// VMReplaced is true when the VM could not be reset and was destroyed;
	// the pool boots a replacement.
	VMReplaced bool `json:"vm_replaced,omitempty"`
}

// PoolStatus is one pool's config and current sizes.
type PoolStatus struct {
	PoolConfig
	Warm    int `json:"warm"`
	Leased  int `json:"leased"`
	Booting int `json:"booting"`
	Ending  int `json:"ending"` // being reset or destroyed
	// VMs are the pool's VMs and their states (warm, leased, resetting,
	// destroying), by id; VMs still booting have no id yet.
	VMs []MemberStatus `json:"vms"`
	// LastError is why the last background boot failed (e.g. vmm refused
	// it for lack of memory); empty once a boot succeeds. The pool retries
	// at RetryAt.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	RetryAt     *time.Time `json:"retry_at,omitempty"`
}

// MemberStatus is one pool VM as PoolStatus lists it.
type MemberStatus struct {
	VM    string `json:"vm"`
	State string `json:"state"`
	// Dirty is true when something touched the VM since its last reset
	// began; it is reset before it is leased.
	Dirty   bool   `json:"dirty,omitempty"`
	Episode string `json:"episode,omitempty"`
}

// member is one VM of a pool; its state moves only through step (lease.go).
type member struct {
	key   string // VM id; "boot-N" while booting
	vm    string // "" while booting
	pool  string
	state memberState
	dirty bool
	// episode is the episode that holds the VM (leased, or resetting at its end).
	episode string
	// reserved is set on a boot made for one Start: the VM is that start's,
	// not offered to others.
	reserved bool
	// fits is false when the VM no longer matches its pool's spec.
	fits bool
	// cleanedMS is the duration of the reset that cleaned it since its last lease.
	cleanedMS int64
}

// lease is a live episode's runtime record.
type lease struct {
	ep       Episode
	ctx      context.Context // canceled when the episode ends: in-flight calls stop
	cancel   context.CancelFunc
	inflight int
	drained  chan struct{} // closed once the episode is no longer active and inflight is 0
	closed   bool          // drained is closed
	done     chan struct{} // closed once ended
}

func (l *lease) drainLocked() {
	if l.inflight == 0 && !l.closed && l.ep.State != EpisodeActive {
		l.closed = true
		close(l.drained)
	}
}

// waiter is a Start waiting for a VM that will turn warm (a boot or a reset
// in flight). It is handed a leased VM, or nothing (look again).
type waiter struct {
	ttl time.Duration
	ch  chan handoff // 1-buffered; written once
}

type handoff struct {
	mb *member
	ep Episode
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
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ReapInterval == 0 {
		opts.ReapInterval = time.Second
	}
	if opts.ReconcileInterval == 0 {
		opts.ReconcileInterval = 60 * time.Second
	}
	if opts.BootRetry == 0 {
		opts.BootRetry = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Manager{cfg: cfg, vms: vms, opts: opts, log: opts.Log,
		state: &stateFile{path: filepath.Join(opts.StateDir, StateFileName)}, met: newMetrics(),
		bootSem: make(chan struct{}, cfg.MaxBoots), kick: make(chan struct{}, 1),
		pools: map[string]*poolRT{}, members: map[string]*member{}, leases: map[string]*lease{},
		diedEarly: map[string]time.Time{}}
	for _, p := range cfg.Pools {
		m.pools[p.Name] = &poolRT{cfg: p}
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	// Subscribe before listing, so that nothing that happens between the
	// list and the loop is missed.
	events := vms.Subscribe(m.ctx)
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
			w.ch <- handoff{}
		}
		p.waiters = nil
	}
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
	return nil
}

// Config returns the pools' config.
func (m *Manager) Config() Config { return m.cfg }

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

func newEpisodeID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ep-" + hex.EncodeToString(b)
}

// stepLocked feeds in to mb's state machine and returns the effects to
// carry out. A refused input changes nothing.
func (m *Manager) stepLocked(mb *member, in input) (effects, error) {
	from := mb.state
	to, dirty, fx, err := step(mb.state, mb.dirty, in)
	if err != nil {
		m.log.Debug("pool member input refused", "op", in.String(), "vm", mb.vm, "pool", mb.pool, "state", from, "dirty", mb.dirty)
		return 0, err
	}
	mb.state, mb.dirty = to, dirty
	if to != stLeased && to != stResetting {
		mb.episode = ""
	}
	if to == stGone {
		delete(m.members, mb.key)
	}
	if from != to {
		m.log.Debug("pool member", "op", in.String(), "vm", mb.vm, "pool", mb.pool, "from", from, "to", to, "dirty", dirty)
	}
	if fx.has(fxWake) {
		m.wakeLocked(mb.pool)
	}
	return fx, nil
}

// wakeLocked hands clean warm VMs of a pool to waiting starts, first come
// first served, tells the other waiters to look again, and wakes the refill.
func (m *Manager) wakeLocked(pool string) {
	m.poke()
	p := m.pools[pool]
	if p == nil {
		return
	}
	for len(p.waiters) > 0 {
		mb := m.cleanWarmLocked(p)
		if mb == nil {
			break
		}
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		w.ch <- handoff{mb: mb, ep: m.leaseLocked(p, mb, w.ttl, true, 0)}
	}
	for _, w := range p.waiters {
		w.ch <- handoff{}
	}
	p.waiters = nil
}

// cleanWarmLocked returns a leasable member of p, or nil.
func (m *Manager) cleanWarmLocked(p *poolRT) *member {
	var best *member
	for _, mb := range m.members {
		if mb.pool == p.cfg.Name && mb.state == stWarm && !mb.dirty && !mb.reserved && mb.fits &&
			(best == nil || mb.key < best.key) {
			best = mb
		}
	}
	return best
}

// counts are a pool's members by what they will be.
type counts struct {
	total   int // every member: what Max bounds
	warm    int // warm, clean or dirty
	coming  int // will turn leasable without a start's help: background boots, resets, dirty warm VMs
	future  int // warm now or soon: warm, background boots, resets (what min_warm counts)
	leased  int
	booting int
	ending  int // resetting or destroying
	dying   int // destroying
}

func (m *Manager) countLocked(pool string) counts {
	var c counts
	for _, mb := range m.members {
		if mb.pool != pool {
			continue
		}
		c.total++
		switch mb.state {
		case stBooting:
			c.booting++
			if !mb.reserved {
				c.coming++
				c.future++
			}
		case stWarm:
			c.warm++
			c.future++
			if mb.dirty {
				c.coming++
			}
		case stLeased:
			c.leased++
		case stResetting:
			c.ending++
			c.coming++
			c.future++
		case stDestroying:
			c.ending++
			c.dying++
		}
	}
	return c
}

// snapshotLocked is the state file's content now, with its version.
func (m *Manager) snapshotLocked() snapshot {
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

// persist writes a snapshot taken under the lock, after unlocking. A
// failure is logged: the in-memory state stays authoritative for this
// process and the next write catches up.
func (m *Manager) persist(snap snapshot, op string) {
	if err := m.state.write(snap); err != nil {
		m.log.Error("save pool state", "op", op, "err", err)
	}
}

func (m *Manager) newLease(ep Episode) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	return &lease{ep: ep, ctx: ctx, cancel: cancel, drained: make(chan struct{}), done: make(chan struct{})}
}

// leaseLocked gives the clean warm member mb to a new episode. The caller
// then labels the VM and persists (finishLease).
func (m *Manager) leaseLocked(p *poolRT, mb *member, ttl time.Duration, warm bool, boot time.Duration) Episode {
	if _, err := m.stepLocked(mb, inLease); err != nil {
		panic("pool: leaseLocked on a member that cannot be leased: " + err.Error()) // callers pick clean warm members
	}
	now := m.opts.Now().UTC()
	ep := Episode{ID: newEpisodeID(), VM: mb.vm, Pool: p.cfg.Name, State: EpisodeActive, Warm: warm,
		CreatedAt: now, ExpiresAt: now.Add(ttl), TTLSeconds: ttl.Seconds(), ScreenshotSize: p.cfg.ScreenshotSize,
		CleanStart: true, ResetBeforeLeaseMS: mb.cleanedMS}
	if !warm {
		ep.BootSeconds = boot.Seconds()
	}
	mb.episode, mb.reserved, mb.cleanedMS = ep.ID, false, 0
	m.leases[ep.ID] = m.newLease(ep)
	return ep
}

// finishLease records a lease made under the lock: the episode label on the
// VM (its ownership), then the episode in the state file, and only then
// answers. If the label cannot be set, the lease is undone.
func (m *Manager) finishLease(mb *member, ep Episode) (Episode, error) {
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := m.vms.SetLabel(lctx, ep.VM, LabelEpisode, ep.ID)
	cancel()
	m.mu.Lock()
	if err != nil {
		l := m.leases[ep.ID]
		delete(m.leases, ep.ID)
		if l != nil {
			l.cancel()
			close(l.done)
		}
		fx, serr := m.stepLocked(mb, inAbort)
		m.mu.Unlock()
		if serr == nil {
			m.goReset(mb, fx, "abort")
		}
		return Episode{}, fmt.Errorf("lease vm %s: label it: %w", ep.VM, err)
	}
	if l := m.leases[ep.ID]; l == nil || l.ep.State != EpisodeActive {
		// The VM died while it was being labelled; the event loop ended
		// the episode before anyone saw it.
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("lease vm %s: %w before the lease was handed out", ep.VM, vmm.ErrDead)
	}
	snap := m.snapshotLocked()
	m.mu.Unlock()
	m.persist(snap, "lease")
	m.met.started.WithLabelValues(ep.Pool, strconv.FormatBool(ep.Warm)).Inc()
	m.log.Info("episode started", "op", "lease", "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "warm", ep.Warm,
		"ttl", time.Duration(ep.TTLSeconds*float64(time.Second)), "reset_before_lease_ms", ep.ResetBeforeLeaseMS)
	return ep, nil
}

// Start leases a VM of the named pool for ttl (0: the pool's default). A
// clean warm VM is leased at once; with none, a start waits for one that a
// boot or reset in flight will bring, or boots one for itself when the
// pool has room (Warm false, BootSeconds set). A full pool is ErrPoolFull;
// a boot vmm refuses for lack of host memory is ErrHostFull.
func (m *Manager) Start(ctx context.Context, poolName string, ttl time.Duration) (Episode, error) {
	m.mu.Lock()
	p, ok := m.pools[poolName]
	if !ok {
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %q: %w", poolName, ErrUnknownPool)
	}
	if ttl == 0 {
		ttl = p.cfg.DefaultTTL.Duration()
	}
	if ttl < 0 || ttl > p.cfg.MaxTTL.Duration() {
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: field ttl_s: %w: %g s is outside (0, %g]", poolName, vmm.ErrInvalid, ttl.Seconds(), float64(p.cfg.MaxTTL))
	}
	for {
		if m.closed {
			m.mu.Unlock()
			return Episode{}, ErrClosed
		}
		if mb := m.cleanWarmLocked(p); mb != nil {
			ep := m.leaseLocked(p, mb, ttl, true, 0)
			m.mu.Unlock()
			m.poke() // refill to min_warm
			return m.finishLease(mb, ep)
		}
		c := m.countLocked(poolName)
		if c.total < p.cfg.Max {
			break // boot one for this start
		}
		if c.coming <= len(p.waiters) {
			m.met.refused.WithLabelValues(poolName, "pool_full").Inc()
			m.mu.Unlock()
			return Episode{}, fmt.Errorf("start episode: pool %s: %w: %d of %d VMs leased, booting or being reset", poolName, ErrPoolFull, c.total, p.cfg.Max)
		}
		// The pool is full, but a VM no other start waits for will turn
		// warm: wait for it rather than refuse.
		w := &waiter{ttl: ttl, ch: make(chan handoff, 1)}
		p.waiters = append(p.waiters, w)
		m.mu.Unlock()
		select {
		case h := <-w.ch:
			if h.mb != nil {
				return m.finishLease(h.mb, h.ep)
			}
			m.mu.Lock()
			continue
		case <-ctx.Done():
		}
		m.mu.Lock()
		p.waiters = slices.DeleteFunc(p.waiters, func(x *waiter) bool { return x == w })
		select {
		case h := <-w.ch:
			if h.mb != nil {
				m.abortLocked(h.mb, h.ep.ID)
			}
		default:
		}
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: wait for a warm vm: %w", poolName, ctx.Err())
	}
	mb := m.addBootingLocked(p, true)
	m.mu.Unlock()

	// Wait for a boot slot; a VM may turn warm meanwhile.
	select {
	case m.bootSem <- struct{}{}:
	case <-ctx.Done():
		m.mu.Lock()
		m.stepLocked(mb, inBootFailed) //nolint:errcheck // booting takes boot_failed
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: wait to boot: %w", poolName, ctx.Err())
	}
	m.mu.Lock()
	if w := m.cleanWarmLocked(p); w != nil {
		m.stepLocked(mb, inBootFailed) //nolint:errcheck // booting takes boot_failed
		ep := m.leaseLocked(p, w, ttl, true, 0)
		m.mu.Unlock()
		<-m.bootSem
		return m.finishLease(w, ep)
	}
	m.mu.Unlock()
	vm, dur, err := m.boot(ctx, p, "lease")
	<-m.bootSem
	m.mu.Lock()
	if err != nil {
		m.stepLocked(mb, inBootFailed) //nolint:errcheck // booting takes boot_failed
		m.mu.Unlock()
		if errors.Is(err, vmm.ErrInsufficientResources) {
			m.met.refused.WithLabelValues(poolName, "host_full").Inc()
			return Episode{}, fmt.Errorf("start episode in pool %s: %w: %w", poolName, ErrHostFull, err)
		}
		return Episode{}, fmt.Errorf("start episode in pool %s: %w", poolName, err)
	}
	fx := m.bootedLocked(p, mb, vm)
	if mb.state != stWarm || mb.dirty {
		// It died (or was touched) before it could be leased: the pool
		// destroys (or cleans) it like any other.
		mb.reserved = false
		m.mu.Unlock()
		m.doDestroy(mb, fx, "lease")
		return Episode{}, fmt.Errorf("start episode in pool %s: vm %s: %w before it was leased", poolName, vm.ID, vmm.ErrDead)
	}
	ep := m.leaseLocked(p, mb, ttl, false, dur)
	m.mu.Unlock()
	return m.finishLease(mb, ep)
}

// abortLocked undoes a lease that was never handed out.
func (m *Manager) abortLocked(mb *member, id string) {
	if l := m.leases[id]; l != nil {
		delete(m.leases, id)
		l.cancel()
		close(l.done)
	}
	if fx, err := m.stepLocked(mb, inAbort); err == nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.resetMember(mb, fx, "abort")
		}()
	}
}

// addBootingLocked adds a member for a boot about to start.
func (m *Manager) addBootingLocked(p *poolRT, reserved bool) *member {
	m.bootN++
	mb := &member{key: fmt.Sprintf("boot-%d", m.bootN), pool: p.cfg.Name, state: stBooting, reserved: reserved, fits: true}
	m.members[mb.key] = mb
	return mb
}

// bootedLocked records a VM a boot made; a VM that died before this (its
// event came first) is passed on to destroy.
func (m *Manager) bootedLocked(p *poolRT, mb *member, vm vmm.VM) effects {
	delete(m.members, mb.key)
	mb.key, mb.vm = vm.ID, vm.ID
	m.members[mb.key] = mb
	fx, _ := m.stepLocked(mb, inBooted)
	if _, died := m.diedEarly[vm.ID]; died {
		delete(m.diedEarly, vm.ID)
		fx, _ = m.stepLocked(mb, inDied)
	}
	return fx
}

// boot creates one VM to pool p's spec, labelled as p's. The caller holds
// a boot slot.
func (m *Manager) boot(ctx context.Context, p *poolRT, op string) (vmm.VM, time.Duration, error) {
	start := time.Now()
	m.log.Debug("pool boot started", "op", op, "pool", p.cfg.Name, "image", p.cfg.Image)
	opts := p.cfg.createOptions()
	opts.Labels = map[string]string{LabelPool: p.cfg.Name}
	vm, err := m.vms.Create(ctx, opts)
	d := time.Since(start)
	if err != nil {
		if ctx.Err() == nil {
			m.met.failures.WithLabelValues(p.cfg.Name, "boot").Inc()
		}
		m.log.Warn("pool boot failed", "op", op, "pool", p.cfg.Name, "duration", d.Round(time.Millisecond), "err", err)
		return vm, d, fmt.Errorf("boot %s vm: %w", p.cfg.Image, err)
	}
	m.met.boot.WithLabelValues(p.cfg.Name).Observe(d.Seconds())
	m.log.Debug("pool boot finished", "op", op, "pool", p.cfg.Name, "vm", vm.ID, "duration", d.Round(time.Millisecond))
	return vm, d, nil
}

// Acquire pins an active episode's VM for one call: the episode cannot end
// (its VM cannot be reset and leased again) until release is called. The
// returned context is canceled when the episode ends, so End never waits
// long. Errors: ErrEpisodeNotFound, ErrEpisodeEnded.
func (m *Manager) Acquire(ctx context.Context, id string) (vm string, callCtx context.Context, release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.leases[id]
	if l == nil {
		return "", nil, nil, m.goneLocked(id)
	}
	if l.ep.State != EpisodeActive {
		return "", nil, nil, fmt.Errorf("episode %s: %w (ending)", id, ErrEpisodeEnded)
	}
	if !m.opts.Now().Before(l.ep.ExpiresAt) {
		return "", nil, nil, fmt.Errorf("episode %s: %w (expired at %s)", id, ErrEpisodeEnded, l.ep.ExpiresAt.Format(time.RFC3339))
	}
	l.inflight++
	callCtx, cancel := context.WithCancel(ctx)
	stopAfter := context.AfterFunc(l.ctx, cancel)
	var once sync.Once
	release = func() {
		once.Do(func() {
			stopAfter()
			cancel()
			m.mu.Lock()
			l.inflight--
			l.drainLocked()
			m.mu.Unlock()
		})
	}
	return l.ep.VM, callCtx, release, nil
}

// Owner says whether vmID is a pool VM, of which pool, and the episode
// that leases it ("" when none does: it is warm, booting, being reset or
// destroyed). web refuses mutating calls on a pooled VM with no episode.
func (m *Manager) Owner(vmID string) (pool, episode string, pooled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mb := m.members[vmID]
	if mb == nil {
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
	defer m.mu.Unlock()
	if mb := m.members[vmID]; mb != nil {
		m.stepLocked(mb, inTouch) //nolint:errcheck // a gone member needs no mark
	}
}

// goneLocked is the error for an episode id with no live lease.
func (m *Manager) goneLocked(id string) error {
	for i := len(m.ended) - 1; i >= 0; i-- {
		if e := m.ended[i]; e.ID == id {
			return fmt.Errorf("episode %s: %w (%s at %s)", id, ErrEpisodeEnded, e.EndReason, e.EndedAt.Format(time.RFC3339))
		}
	}
	return fmt.Errorf("episode %q: %w", id, ErrEpisodeNotFound)
}

// Get returns an episode, live or recently ended.
func (m *Manager) Get(id string) (Episode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[id]; l != nil {
		return l.ep, nil
	}
	for i := len(m.ended) - 1; i >= 0; i-- {
		if m.ended[i].ID == id {
			return m.ended[i], nil
		}
	}
	return Episode{}, fmt.Errorf("episode %q: %w", id, ErrEpisodeNotFound)
}

// List returns the live episodes, oldest first.
func (m *Manager) List() []Episode {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Episode, 0, len(m.leases))
	for _, l := range m.leases {
		out = append(out, l.ep)
	}
	slices.SortFunc(out, func(a, b Episode) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
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
			if mb.pool == p.cfg.Name && mb.vm != "" {
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

// End ends an episode: calls in flight on it are canceled and waited for,
// its VM is reset to the ready snapshot and goes back to the pool, or is
// destroyed (and replaced) when the reset fails or the pool has no room.
// Ending an episode being ended waits for that and returns its result.
func (m *Manager) End(ctx context.Context, id, reason string) (Episode, error) {
	m.mu.Lock()
	l := m.leases[id]
	if l == nil {
		err := m.goneLocked(id)
		m.mu.Unlock()
		return Episode{}, err
	}
	if l.ep.State != EpisodeActive {
		m.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return Episode{}, fmt.Errorf("end episode %s: %w", id, ctx.Err())
		}
		return m.Get(id)
	}
	mb := m.members[l.ep.VM]
	var fx effects
	if mb != nil && mb.episode == id {
		var err error
		if fx, err = m.stepLocked(mb, inEnd); err != nil {
			mb = nil
		}
	} else {
		mb = nil
	}
	l.ep.State, l.ep.EndReason = EpisodeEnding, reason
	l.cancel()
	l.drainLocked()
	snap := m.snapshotLocked()
	m.mu.Unlock()
	m.persist(snap, "end")

	log := m.log.With("episode", id, "vm", l.ep.VM, "pool", l.ep.Pool)
	select {
	case <-l.drained:
	case <-time.After(30 * time.Second):
		log.Warn("calls on the episode still running 30 s after cancel; resetting anyway", "op", "end")
	}
	var (
		res      vmm.ResetResult
		resetErr = fmt.Errorf("vm %s: %w", l.ep.VM, vmm.ErrNotFound)
	)
	if mb != nil {
		res, resetErr = m.unlabelAndReset(mb, fx, "end")
	}
	m.mu.Lock()
	var after effects
	if mb != nil {
		after = m.resetDoneLocked(mb, resetErr)
	}
	switch {
	case resetErr == nil:
		m.met.reset.WithLabelValues(l.ep.Pool).Observe(res.Duration.Seconds())
		l.ep.ResetSeconds = res.Duration.Seconds()
	case errors.Is(resetErr, vmm.ErrNotFound):
		reason = ReasonVMGone
		l.ep.VMReplaced = true
	default:
		if errors.Is(resetErr, vmm.ErrDead) || errors.Is(resetErr, vmm.ErrNotRunning) {
			reason = ReasonVMDied
		}
		l.ep.VMReplaced = true
		log.Warn("reset at episode end failed; destroying the vm", "op", "end", "err", resetErr)
	}
	ep := m.endLocked(l, reason)
	snap = m.snapshotLocked()
	m.mu.Unlock()
	m.persist(snap, "end")
	log.Info("episode ended", "op", "end", "reason", reason, "reset_ms", res.Duration.Milliseconds(), "vm_replaced", ep.VMReplaced)
	m.doDestroy(mb, after, "end")
	return ep, nil
}

// endLocked records a live episode as ended and drops its lease.
func (m *Manager) endLocked(l *lease, reason string) Episode {
	delete(m.leases, l.ep.ID)
	l.cancel()
	now := m.opts.Now().UTC()
	ep := l.ep
	ep.State, ep.EndedAt, ep.EndReason = EpisodeEnded, &now, reason
	l.ep = ep
	l.drainLocked()
	close(l.done)
	m.ended = append(m.ended, ep)
	if len(m.ended) > maxEnded {
		m.ended = slices.Clone(m.ended[len(m.ended)-maxEnded:])
	}
	m.met.ended.WithLabelValues(ep.Pool, reason).Inc()
	return ep
}

// unlabelAndReset carries out a reset's effects outside the lock: the
// episode label is removed first (no one can lease the VM while it is
// resetting), then the VM goes back to its ready snapshot. Not the caller's
// context: a client hanging up must not leave the VM half reset.
func (m *Manager) unlabelAndReset(mb *member, fx effects, op string) (vmm.ResetResult, error) {
	if fx.has(fxUnlabel) {
		lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := m.vms.SetLabel(lctx, mb.vm, LabelEpisode, ""); err != nil && !errors.Is(err, vmm.ErrNotFound) {
			// A stale label is harmless: recovery finds no live episode
			// for it and treats the VM as dirty.
			m.log.Warn("remove episode label", "op", op, "vm", mb.vm, "err", err)
		}
		cancel()
	}
	if !fx.has(fxReset) {
		return vmm.ResetResult{}, nil
	}
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return m.vms.Reset(rctx, mb.vm)
}

// resetDoneLocked feeds a reset's outcome to mb and evicts a VM that no
// longer fits its pool; it returns the effects left (destroy).
func (m *Manager) resetDoneLocked(mb *member, err error) effects {
	if err != nil {
		fx, serr := m.stepLocked(mb, inResetFailed)
		if serr == nil {
			kind := "reset"
			if errors.Is(err, vmm.ErrDead) || errors.Is(err, vmm.ErrNotRunning) {
				kind = "died"
			}
			m.met.failures.WithLabelValues(mb.pool, kind).Inc()
		}
		return fx
	}
	fx, serr := m.stepLocked(mb, inResetOK)
	if serr != nil {
		return 0
	}
	if m.overLocked(mb) {
		fx, _ = m.stepLocked(mb, inEvict)
	}
	return fx
}

// overLocked says whether a warm member must leave its pool: the pool is
// gone from the config, the VM is not to its spec, or the pool holds more
// than its max.
func (m *Manager) overLocked(mb *member) bool {
	p := m.pools[mb.pool]
	if p == nil || !mb.fits {
		return true
	}
	// VMs already on their way out do not count: a destroy that failed
	// (and is retried) must not make the pool evict another.
	c := m.countLocked(mb.pool)
	return c.total-c.dying > p.cfg.Max
}

// goReset carries out a reset in the background (an aborted lease).
func (m *Manager) goReset(mb *member, fx effects, op string) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.resetMember(mb, fx, op)
	}()
}

// resetMember resets mb and feeds the outcome back; a failed reset
// destroys it.
func (m *Manager) resetMember(mb *member, fx effects, op string) {
	start := time.Now()
	res, err := m.unlabelAndReset(mb, fx, op)
	if err != nil {
		m.log.Warn("reset pool vm failed; destroying it", "op", op, "vm", mb.vm, "pool", mb.pool, "err", err)
	}
	m.mu.Lock()
	if err == nil {
		// Set before reset_ok, which may hand the VM to a waiting start.
		mb.cleanedMS = max(time.Since(start).Milliseconds(), res.Duration.Milliseconds(), 1)
	}
	after := m.resetDoneLocked(mb, err)
	m.mu.Unlock()
	m.doDestroy(mb, after, op)
}

// doDestroy destroys mb's VM when fx says so, and records it gone.
func (m *Manager) doDestroy(mb *member, fx effects, op string) {
	if mb == nil || !fx.has(fxDestroy) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := m.vms.Destroy(ctx, mb.vm)
	cancel()
	if err != nil && !errors.Is(err, vmm.ErrNotFound) {
		// Keep it destroying; the safety reconcile tries again.
		m.log.Error("destroy pool vm", "op", op, "vm", mb.vm, "pool", mb.pool, "err", err)
		return
	}
	m.log.Info("pool vm destroyed", "op", op, "vm", mb.vm, "pool", mb.pool)
	m.mu.Lock()
	m.stepLocked(mb, inDestroyed) //nolint:errcheck // the destroyed event may have come first
	m.mu.Unlock()
}

// goDestroy is doDestroy in the background (from the event loop, which
// must not wait for libvirt).
func (m *Manager) goDestroy(mb *member, fx effects, op string) {
	if !fx.has(fxDestroy) {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.doDestroy(mb, fx, op)
	}()
}

func (m *Manager) poolNames() []string {
	return slices.Sorted(maps.Keys(m.pools))
}
