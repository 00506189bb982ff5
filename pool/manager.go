package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
)

// VMs is what the pool needs from the VM layer; *vmm.Manager implements it.
type VMs interface {
	Create(ctx context.Context, opts vmm.CreateOptions) (vmm.VM, error)
	List(ctx context.Context) ([]vmm.VM, error)
	Get(ctx context.Context, id string) (vmm.VM, error)
	Destroy(ctx context.Context, id string) error
	Reset(ctx context.Context, id string) (vmm.ResetResult, error)
}

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
	// ReconcileInterval is how often pools are checked against the VM layer
	// (VMs removed behind the pool's back, warm VMs missing). Default 10 s.
	ReconcileInterval time.Duration
	// BootRetry is how long a pool waits after a failed background boot.
	// Default 30 s.
	BootRetry time.Duration
	// AfterReset is called with a VM's id after it was reset (e.g. to
	// release input held on its display). Optional.
	AfterReset func(vm string)
	// BeforeDestroy is called with a VM's id before the pool destroys it
	// (e.g. to close its display connection). Optional.
	BeforeDestroy func(vm string)
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
}

// slot is a pool VM's state.
type slot string

const (
	slotWarm       slot = "warm"
	slotLeased     slot = "leased"
	slotEnding     slot = "ending"
	slotDestroying slot = "destroying"
)

type member struct {
	vm     string
	pool   string
	state  slot
	memMiB int
}

// lease is a live episode's runtime record.
type lease struct {
	ep       Episode
	ctx      context.Context // canceled when the episode ends: in-flight calls stop
	cancel   context.CancelFunc
	inflight int
	drained  chan struct{} // closed once ending and inflight is 0
	done     chan struct{} // closed once ended
}

type poolRT struct {
	cfg          PoolConfig
	bootingWarm  int // background boots in flight
	bootingLease int // boots for a waiting start
	waiting      int // starts waiting for a background boot to finish
	// warmed is closed (and replaced) when a background boot ends, to wake
	// waiting starts.
	warmed     chan struct{}
	retryAfter time.Time
}

// maxEnded bounds the ended episodes kept for answering "ended, because".
const maxEnded = 256

// Manager keeps the pools warm and leases their VMs to episodes. All its
// methods are safe for concurrent use.
type Manager struct {
	cfg    Config
	vms    VMs
	opts   Options
	log    *slog.Logger
	state  stateFile
	met    *metrics
	hostMB int // memory VMs may use, after the reserve

	bootSem chan struct{} // bounds concurrent boots
	kick    chan struct{} // wakes the refill loop
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	pools    map[string]*poolRT
	members  map[string]*member // by VM id
	leases   map[string]*lease  // by episode id
	ended    []Episode
	pending  map[string]pendingBoot // by boot id
	closed   bool
	toFinish []Episode // episodes found ending at recovery
}

// New recovers the pools' state from the state dir, reconciles it with the
// VMs vms has (a vmm.Manager adopts running domains), and starts the
// background refill and reaper. cfg must be valid.
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
		opts.ReconcileInterval = 10 * time.Second
	}
	if opts.BootRetry == 0 {
		opts.BootRetry = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	host := cfg.HostMemoryMiB
	if host == 0 {
		host = hostMemTotalMiB()
	}
	m := &Manager{cfg: cfg, vms: vms, opts: opts, log: opts.Log, state: stateFile{path: filepath.Join(opts.StateDir, StateFileName)},
		met: newMetrics(), hostMB: host - cfg.HostReserveMiB,
		bootSem: make(chan struct{}, cfg.MaxBoots), kick: make(chan struct{}, 1),
		pools: map[string]*poolRT{}, members: map[string]*member{}, leases: map[string]*lease{}, pending: map[string]pendingBoot{}}
	for _, p := range cfg.Pools {
		m.pools[p.Name] = &poolRT{cfg: p, warmed: make(chan struct{})}
	}
	if err := m.recover(ctx); err != nil {
		return nil, err
	}
	if opts.Registerer != nil {
		if err := m.met.register(opts.Registerer, sizeCollector{m}); err != nil {
			return nil, fmt.Errorf("register pool metrics: %w", err)
		}
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	m.wg.Add(2)
	go m.refillLoop()
	go m.reapLoop()
	for _, ep := range m.toFinish {
		reason := ep.EndReason
		if reason == "" {
			reason = ReasonDeleted
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.End(m.ctx, ep.ID, reason) //nolint:errcheck // logged by End
		}()
	}
	m.poke()
	return m, nil
}

// Close stops the background work; a boot in flight is canceled (vmm
// removes the half-made VM). VMs and leases stay: a new Manager on the same
// state dir takes them over.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.stop()
	m.wg.Wait()
	return nil
}

// SetHooks sets Options.AfterReset and Options.BeforeDestroy after New,
// for a display layer built later than the pools. Call it before serving.
func (m *Manager) SetHooks(afterReset, beforeDestroy func(vm string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opts.AfterReset, m.opts.BeforeDestroy = afterReset, beforeDestroy
}

func (m *Manager) hooks() (afterReset, beforeDestroy func(vm string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.opts.AfterReset, m.opts.BeforeDestroy
}

// Config returns the pools' config.
func (m *Manager) Config() Config { return m.cfg }

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func newEpisodeID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "ep-" + hex.EncodeToString(b)
}

// hostMemTotalMiB reads MemTotal; 0 when unknown (admission then refuses all).
func hostMemTotalMiB() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.Atoi(f[1])
			return kb / 1024
		}
	}
	return 0
}

// recover loads the state file and reconciles it with the VM layer:
// members whose VM is gone are dropped (their episodes end as vm_gone), a
// VM leased twice keeps its first episode, and VMs booted for a pool but
// not yet recorded when deskfarm died are claimed by that pool.
func (m *Manager) recover(ctx context.Context) error {
	st, err := m.state.load()
	if err != nil {
		return err
	}
	vms, err := m.vms.List(ctx)
	if err != nil {
		return fmt.Errorf("recover pools: list vms: %w", err)
	}
	byID := map[string]vmm.VM{}
	for _, v := range vms {
		byID[v.ID] = v
	}
	now := m.opts.Now()
	for id, pm := range st.Members {
		v, ok := byID[id]
		if !ok {
			m.log.Warn("pool vm gone across restart", "op", "recover", "vm", id, "pool", pm.Pool)
			continue
		}
		m.members[id] = &member{vm: id, pool: pm.Pool, state: slotWarm, memMiB: v.MemoryMiB}
	}
	for _, ep := range st.Episodes {
		mb := m.members[ep.VM]
		switch {
		case mb == nil:
			m.log.Warn("episode's vm gone across restart; ending it", "op", "recover", "episode", ep.ID, "vm", ep.VM)
			m.tombstoneLocked(ep, ReasonVMGone, now)
			continue
		case mb.state != slotWarm:
			m.log.Error("vm leased twice in state file; keeping the first lease", "op", "recover", "episode", ep.ID, "vm", ep.VM)
			m.tombstoneLocked(ep, ReasonVMGone, now)
			continue
		}
		mb.state = slotLeased
		l := m.newLease(ep)
		m.leases[ep.ID] = l
		if ep.State == EpisodeEnding {
			// Died mid-reset: finish the end once running.
			l.ep.State, l.ep.EndReason = EpisodeActive, ""
			m.toFinish = append(m.toFinish, ep)
		}
		m.log.Info("lease recovered", "op", "recover", "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "expires_at", ep.ExpiresAt)
	}
	m.ended = st.Ended
	// Claim VMs booted for a pool whose record was lost (crash between
	// create returning and the state write).
	for _, pb := range st.Pending {
		p, ok := m.pools[pb.Pool]
		if !ok {
			continue
		}
		for _, v := range vms {
			if _, taken := m.members[v.ID]; taken || v.State != vmm.StateReady || !p.cfg.matches(v) ||
				v.CreatedAt.Before(pb.Started.Truncate(time.Second)) {
				continue
			}
			m.members[v.ID] = &member{vm: v.ID, pool: pb.Pool, state: slotWarm, memMiB: v.MemoryMiB}
			m.log.Info("claimed vm booted before a crash", "op", "recover", "vm", v.ID, "pool", pb.Pool)
			break
		}
	}
	return m.persistLocked()
}

func (m *Manager) newLease(ep Episode) *lease {
	ctx, cancel := context.WithCancel(context.Background())
	return &lease{ep: ep, ctx: ctx, cancel: cancel, drained: make(chan struct{}), done: make(chan struct{})}
}

// persistLocked writes the state file. Callers hold m.mu (or own m alone).
func (m *Manager) persistLocked() error {
	st := persisted{Version: stateVersion, Members: map[string]persistedMember{}, Ended: m.ended}
	for id, mb := range m.members {
		st.Members[id] = persistedMember{Pool: mb.pool}
	}
	for _, l := range m.leases {
		st.Episodes = append(st.Episodes, l.ep)
	}
	slices.SortFunc(st.Episodes, func(a, b Episode) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, pb := range m.pending {
		st.Pending = append(st.Pending, pb)
	}
	return m.state.save(st)
}

// persist saves and logs a failure: the in-memory state stays authoritative
// for this process; the next successful save catches up.
func (m *Manager) persist(op string) {
	if err := m.persistLocked(); err != nil {
		m.log.Error("save pool state", "op", op, "err", err)
	}
}

func (m *Manager) tombstoneLocked(ep Episode, reason string, now time.Time) Episode {
	ep.State = EpisodeEnded
	ep.EndedAt = &now
	if ep.EndReason == "" {
		ep.EndReason = reason
	}
	m.ended = append(m.ended, ep)
	if len(m.ended) > maxEnded {
		m.ended = slices.Clone(m.ended[len(m.ended)-maxEnded:])
	}
	return ep
}

// memory returns the guest memory held by pool members, boots in flight
// and the farm's other VMs, and the admission limit.
func (m *Manager) memory() (used, limit int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usedLocked(), m.hostMB
}

func (m *Manager) usedLocked() int {
	used, booting := 0, 0
	for _, mb := range m.members {
		used += mb.memMiB
	}
	for _, p := range m.pools {
		used += (p.bootingWarm + p.bootingLease) * p.cfg.MemoryMiB
		booting += p.bootingWarm + p.bootingLease
	}
	// VMs made outside the pools (POST /v1/vms) count too. A pool boot in
	// flight is listed as "creating" before the pool learns its id: skip as
	// many of those as the pools have boots in flight.
	vms, _ := m.vms.List(context.Background())
	for _, v := range vms {
		if _, ok := m.members[v.ID]; ok {
			continue
		}
		if v.State == vmm.StateCreating && booting > 0 {
			booting--
			continue
		}
		used += v.MemoryMiB
	}
	return used
}

// admitLocked says whether pool p may take one more VM.
func (m *Manager) admitLocked(p *poolRT) error {
	n := p.bootingWarm + p.bootingLease
	for _, mb := range m.members {
		if mb.pool == p.cfg.Name {
			n++
		}
	}
	if n >= p.cfg.Max {
		return fmt.Errorf("pool %s: %w: %d of %d VMs leased, booting or being reset", p.cfg.Name, ErrPoolFull, n, p.cfg.Max)
	}
	if used := m.usedLocked(); used+p.cfg.MemoryMiB > m.hostMB {
		return fmt.Errorf("pool %s: %w: %w: VMs hold %d MiB, another needs %d, the limit is %d MiB (host memory less a %d MiB reserve)",
			p.cfg.Name, ErrHostFull, vmm.ErrInsufficientResources, used, p.cfg.MemoryMiB, m.hostMB, m.cfg.HostReserveMiB)
	}
	return nil
}

// takeWarmLocked returns a warm member of pool p whose VM still exists,
// dropping members whose VM vanished.
func (m *Manager) takeWarmLocked(p *poolRT) *member {
	var warm []*member
	for _, mb := range m.members {
		if mb.pool == p.cfg.Name && mb.state == slotWarm {
			warm = append(warm, mb)
		}
	}
	slices.SortFunc(warm, func(a, b *member) int { return strings.Compare(a.vm, b.vm) })
	for _, mb := range warm {
		v, err := m.vms.Get(context.Background(), mb.vm)
		if errors.Is(err, vmm.ErrNotFound) {
			m.log.Warn("warm vm vanished", "op", "lease", "vm", mb.vm, "pool", mb.pool)
			m.met.failures.WithLabelValues(mb.pool, "vanished").Inc()
			delete(m.members, mb.vm)
			continue
		}
		if err != nil || v.State != vmm.StateReady {
			continue
		}
		return mb
	}
	return nil
}

// leaseLocked gives mb to a new episode.
func (m *Manager) leaseLocked(p *poolRT, mb *member, ttl time.Duration, warm bool, boot time.Duration) Episode {
	now := m.opts.Now().UTC()
	ep := Episode{ID: newEpisodeID(), VM: mb.vm, Pool: p.cfg.Name, State: EpisodeActive, Warm: warm,
		CreatedAt: now, ExpiresAt: now.Add(ttl), TTLSeconds: ttl.Seconds(), ScreenshotSize: p.cfg.ScreenshotSize}
	if !warm {
		ep.BootSeconds = boot.Seconds()
	}
	mb.state = slotLeased
	m.leases[ep.ID] = m.newLease(ep)
	m.persist("lease")
	m.met.started.WithLabelValues(p.cfg.Name, strconv.FormatBool(warm)).Inc()
	m.log.Info("episode started", "op", "lease", "episode", ep.ID, "vm", ep.VM, "pool", ep.Pool, "warm", warm, "ttl", ttl)
	return ep
}

// Start leases a VM of the named pool for ttl (0: the pool's default). A
// warm VM is leased at once; with none warm and room in the pool and on the
// host, one is booted for the episode (Warm false, BootSeconds set). A full
// pool is ErrPoolFull; a full host ErrHostFull.
func (m *Manager) Start(ctx context.Context, poolName string, ttl time.Duration) (Episode, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Episode{}, ErrClosed
	}
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
		if mb := m.takeWarmLocked(p); mb != nil {
			ep := m.leaseLocked(p, mb, ttl, true, 0)
			m.mu.Unlock()
			m.poke() // refill to min_warm
			return ep, nil
		}
		if m.admitLocked(p) == nil || p.bootingWarm <= p.waiting {
			break
		}
		// The pool is full but a background boot will bring a warm VM no
		// other start waits for: wait for it rather than refuse.
		p.waiting++
		ch := p.warmed
		m.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		m.mu.Lock()
		p.waiting--
		if err != nil {
			m.mu.Unlock()
			return Episode{}, fmt.Errorf("start episode in pool %s: wait for a warm vm: %w", poolName, err)
		}
	}
	if err := m.admitLocked(p); err != nil {
		reason := "pool_full"
		if errors.Is(err, ErrHostFull) {
			reason = "host_full"
		}
		m.met.refused.WithLabelValues(p.cfg.Name, reason).Inc()
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode: %w", err)
	}
	p.bootingLease++
	bootID := m.addPendingLocked(p)
	m.mu.Unlock()

	unreserve := func() {
		p.bootingLease--
		delete(m.pending, bootID)
	}
	// Wait for a boot slot; a VM may turn warm meanwhile (a background boot
	// finishing, an episode ending).
	select {
	case m.bootSem <- struct{}{}:
	case <-ctx.Done():
		m.mu.Lock()
		unreserve()
		m.persist("lease")
		m.mu.Unlock()
		return Episode{}, fmt.Errorf("start episode in pool %s: wait to boot: %w", poolName, ctx.Err())
	}
	m.mu.Lock()
	if mb := m.takeWarmLocked(p); mb != nil {
		unreserve()
		ep := m.leaseLocked(p, mb, ttl, true, 0)
		m.mu.Unlock()
		<-m.bootSem
		return ep, nil
	}
	m.mu.Unlock()
	vm, dur, err := m.boot(ctx, p, "lease")
	<-m.bootSem
	m.mu.Lock()
	defer m.mu.Unlock()
	unreserve()
	if err != nil {
		m.persist("lease")
		return Episode{}, fmt.Errorf("start episode in pool %s: %w", poolName, err)
	}
	mb := &member{vm: vm.ID, pool: p.cfg.Name, state: slotLeased, memMiB: vm.MemoryMiB}
	m.members[vm.ID] = mb
	return m.leaseLocked(p, mb, ttl, false, dur), nil
}

func (m *Manager) addPendingLocked(p *poolRT) string {
	id := newEpisodeID()[3:]
	m.pending[id] = pendingBoot{ID: id, Pool: p.cfg.Name, Started: m.opts.Now().UTC()}
	m.persist("boot")
	return id
}

// boot creates one VM to pool p's spec. The caller holds a boot slot.
func (m *Manager) boot(ctx context.Context, p *poolRT, op string) (vmm.VM, time.Duration, error) {
	start := time.Now()
	m.log.Debug("pool boot started", "op", op, "pool", p.cfg.Name, "image", p.cfg.Image)
	vm, err := m.vms.Create(ctx, p.cfg.createOptions())
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
			if l.inflight == 0 && l.ep.State != EpisodeActive {
				close(l.drained)
			}
			m.mu.Unlock()
		})
	}
	return l.ep.VM, callCtx, release, nil
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

// Pools returns every pool's config and sizes, by name.
func (m *Manager) Pools() []PoolStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]PoolStatus, 0, len(m.pools))
	for _, p := range m.pools {
		s := PoolStatus{PoolConfig: p.cfg, Booting: p.bootingWarm + p.bootingLease}
		for _, mb := range m.members {
			if mb.pool != p.cfg.Name {
				continue
			}
			switch mb.state {
			case slotWarm:
				s.Warm++
			case slotLeased:
				s.Leased++
			default:
				s.Ending++
			}
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
	l.ep.State = EpisodeEnding
	l.ep.EndReason = reason
	l.cancel()
	if l.inflight == 0 {
		close(l.drained)
	}
	mb := m.members[l.ep.VM]
	if mb != nil {
		mb.state = slotEnding
	}
	m.persist("end")
	m.mu.Unlock()

	log := m.log.With("episode", id, "vm", l.ep.VM, "pool", l.ep.Pool)
	select {
	case <-l.drained:
	case <-time.After(30 * time.Second):
		log.Warn("calls on the episode still running 30 s after cancel; resetting anyway", "op", "end")
	}
	ep, destroy := m.finish(l, mb, reason, log)
	if destroy {
		m.destroy(mb, "end")
	}
	m.poke()
	return ep, nil
}

// finish resets an ending episode's VM and records the end; it reports
// whether the VM must be destroyed.
func (m *Manager) finish(l *lease, mb *member, reason string, log *slog.Logger) (Episode, bool) {
	var (
		res      vmm.ResetResult
		resetErr error
	)
	if mb == nil {
		resetErr = fmt.Errorf("vm %s: %w", l.ep.VM, vmm.ErrNotFound)
	} else {
		// Not the caller's context: a client hanging up must not leave the
		// VM half reset.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, resetErr = m.vms.Reset(rctx, mb.vm)
		cancel()
	}
	if after, _ := m.hooks(); resetErr == nil && after != nil {
		after(l.ep.VM)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	defer close(l.done)
	delete(m.leases, l.ep.ID)
	ep := l.ep
	destroy := false
	p := m.pools[ep.Pool]
	switch {
	case resetErr != nil:
		if reason != ReasonVMDied {
			if errors.Is(resetErr, vmm.ErrDead) || errors.Is(resetErr, vmm.ErrNotRunning) {
				reason = ReasonVMDied
			}
		}
		kind := "reset"
		if reason == ReasonVMDied {
			kind = "died"
		}
		if mb != nil {
			m.met.failures.WithLabelValues(ep.Pool, kind).Inc()
			mb.state = slotDestroying
			destroy = true
		}
		ep.VMReplaced = true
		log.Warn("reset at episode end failed; destroying the vm", "op", "end", "err", resetErr)
	case p == nil:
		mb.state = slotDestroying
		destroy = true
	default:
		m.met.reset.WithLabelValues(ep.Pool).Observe(res.Duration.Seconds())
		ep.ResetSeconds = res.Duration.Seconds()
		mb.state = slotWarm
	}
	ep.EndReason = ""
	ep = m.tombstoneLocked(ep, reason, m.opts.Now().UTC())
	m.met.ended.WithLabelValues(ep.Pool, reason).Inc()
	m.persist("end")
	log.Info("episode ended", "op", "end", "reason", reason, "reset_ms", res.Duration.Milliseconds(), "vm_replaced", ep.VMReplaced)
	return ep, destroy
}

// destroy removes a pool VM and forgets it.
func (m *Manager) destroy(mb *member, op string) {
	if _, before := m.hooks(); before != nil {
		before(mb.vm)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := m.vms.Destroy(ctx, mb.vm)
	cancel()
	if err != nil && !errors.Is(err, vmm.ErrNotFound) {
		m.log.Error("destroy pool vm", "op", op, "vm", mb.vm, "pool", mb.pool, "err", err)
	}
	m.mu.Lock()
	delete(m.members, mb.vm)
	m.persist(op)
	m.mu.Unlock()
}

// Failed tells the pool that a call on an episode found its VM dead: the
// episode ends (vm_died) and the VM is destroyed and replaced. Later calls
// on the episode get ErrEpisodeEnded.
func (m *Manager) Failed(id string, cause error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return
	}
	m.log.Warn("episode's vm died", "op", "end", "episode", id, "err", cause)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.End(context.Background(), id, ReasonVMDied) //nolint:errcheck // logged by End
	}()
}

// reapLoop ends leases past their TTL.
func (m *Manager) reapLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		now := m.opts.Now()
		var expired []string
		m.mu.Lock()
		for id, l := range m.leases {
			if l.ep.State == EpisodeActive && !now.Before(l.ep.ExpiresAt) {
				expired = append(expired, id)
			}
		}
		m.mu.Unlock()
		for _, id := range expired {
			m.log.Info("lease expired", "op", "reap", "episode", id)
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				m.End(m.ctx, id, ReasonExpired) //nolint:errcheck // logged by End
			}()
		}
	}
}

// refillLoop keeps each pool at min_warm, one boot at a time per loop
// (and at most Config.MaxBoots across the farm), and reconciles the pools
// with the VM layer.
func (m *Manager) refillLoop() {
	defer m.wg.Done()
	t := time.NewTicker(m.opts.ReconcileInterval)
	defer t.Stop()
	for {
		m.reconcile()
		for m.refillOne() {
			if m.ctx.Err() != nil {
				return
			}
		}
		select {
		case <-m.ctx.Done():
			return
		case <-m.kick:
		case <-t.C:
		}
	}
}

// reconcile drops members whose VM is gone (ending their episodes) and
// destroys warm VMs that no longer fit their pool (pool removed from the
// config, spec changed, more than max).
func (m *Manager) reconcile() {
	m.mu.Lock()
	var stale []*member
	count := map[string]int{}
	for _, mb := range m.members {
		count[mb.pool]++
	}
	for _, mb := range m.members {
		v, err := m.vms.Get(context.Background(), mb.vm)
		if errors.Is(err, vmm.ErrNotFound) {
			if mb.state == slotWarm || mb.state == slotLeased {
				m.met.failures.WithLabelValues(mb.pool, "vanished").Inc()
				m.log.Warn("pool vm vanished", "op", "reconcile", "vm", mb.vm, "pool", mb.pool)
				delete(m.members, mb.vm)
				for id, l := range m.leases {
					if l.ep.VM == mb.vm && l.ep.State == EpisodeActive {
						l.cancel()
						delete(m.leases, id)
						ep := m.tombstoneLocked(l.ep, ReasonVMGone, m.opts.Now().UTC())
						close(l.done)
						m.met.ended.WithLabelValues(ep.Pool, ReasonVMGone).Inc()
					}
				}
				m.persist("reconcile")
			}
			continue
		}
		if mb.state != slotWarm || err != nil {
			continue
		}
		p := m.pools[mb.pool]
		if p == nil || !p.cfg.matches(v) || count[mb.pool] > p.cfg.Max {
			mb.state = slotDestroying
			count[mb.pool]--
			stale = append(stale, mb)
		}
	}
	m.mu.Unlock()
	for _, mb := range stale {
		m.log.Info("destroying warm vm that no longer fits its pool", "op", "reconcile", "vm", mb.vm, "pool", mb.pool)
		m.destroy(mb, "reconcile")
	}
}

// refillOne boots one VM for the first pool below min_warm and reports
// whether it did anything.
func (m *Manager) refillOne() bool {
	m.mu.Lock()
	var p *poolRT
	now := m.opts.Now()
	for _, name := range m.poolNames() {
		c := m.pools[name]
		warm := c.bootingWarm
		for _, mb := range m.members {
			if mb.pool == name && mb.state == slotWarm {
				warm++
			}
		}
		if warm < c.cfg.MinWarm && now.After(c.retryAfter) && m.admitLocked(c) == nil {
			p = c
			break
		}
	}
	if p == nil || m.closed {
		m.mu.Unlock()
		return false
	}
	p.bootingWarm++
	bootID := m.addPendingLocked(p)
	m.mu.Unlock()

	var (
		vm  vmm.VM
		err error
	)
	select {
	case m.bootSem <- struct{}{}:
		vm, _, err = m.boot(m.ctx, p, "refill")
		<-m.bootSem
	case <-m.ctx.Done():
		err = m.ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p.bootingWarm--
	delete(m.pending, bootID)
	close(p.warmed)
	p.warmed = make(chan struct{})
	if err != nil {
		p.retryAfter = m.opts.Now().Add(m.opts.BootRetry)
		m.persist("refill")
		return false
	}
	m.members[vm.ID] = &member{vm: vm.ID, pool: p.cfg.Name, state: slotWarm, memMiB: vm.MemoryMiB}
	m.persist("refill")
	m.log.Info("warm vm ready", "op", "refill", "vm", vm.ID, "pool", p.cfg.Name)
	return true
}

func (m *Manager) poolNames() []string {
	names := make([]string, 0, len(m.pools))
	for n := range m.pools {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
