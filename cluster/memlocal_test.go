package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/pool"
)

// memLocal is an in-memory node pool for the agent's protocol tests
// against a real apiserver: VMs are entries, a lease is a field, a reset
// takes resetDelay. It refuses to lease a VM that is not free, as
// pool.Manager does, so a double hold the cluster let through would show
// as a failed bind, never as two holders here.
type memLocal struct {
	mu         sync.Mutex
	vms        map[string]*memVM
	episodes   map[string]string // episode -> vm, while active
	ended      map[string]string // episode -> end reason
	changed    chan struct{}
	resetDelay time.Duration
	// capacity caps the VMs per pool SetPools creates (-1: warmPerNode).
	capacity int
	setPools int
	lastCfg  pool.Config
}

type memVM struct {
	id, pool string
	state    pool.DesktopState
	episode  string
	expires  time.Time
}

func newMemLocal(resetDelay time.Duration, capacity int) *memLocal {
	return &memLocal{vms: map[string]*memVM{}, episodes: map[string]string{}, ended: map[string]string{},
		changed: make(chan struct{}, 1), resetDelay: resetDelay, capacity: capacity}
}

func (m *memLocal) signal() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

func (m *memLocal) Desktops() []pool.Desktop {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]pool.Desktop, 0, len(m.vms))
	for _, v := range m.vms {
		d := pool.Desktop{VM: v.id, Pool: v.pool, State: v.state}
		if v.state == pool.DesktopLeased {
			d.Episode, d.ExpiresAt = v.episode, v.expires
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VM < out[j].VM })
	return out
}

func (m *memLocal) Changed() <-chan struct{} { return m.changed }

func (m *memLocal) StartOn(_ context.Context, poolName, vm, episode string, ttl time.Duration) (pool.Episode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.vms[vm]
	if v == nil || v.pool != poolName || v.state != pool.DesktopFree {
		return pool.Episode{}, fmt.Errorf("start %s on %s: %w", episode, vm, pool.ErrNotWarm)
	}
	if ttl <= 0 {
		ttl = time.Hour
	}
	now := time.Now()
	v.state, v.episode, v.expires = pool.DesktopLeased, episode, now.Add(ttl)
	m.episodes[episode] = vm
	m.signal()
	return pool.Episode{ID: episode, VM: vm, Pool: poolName, State: pool.EpisodeActive, Warm: true,
		CreatedAt: now, ExpiresAt: v.expires, TTLSeconds: ttl.Seconds(), CleanStart: true}, nil
}

func (m *memLocal) End(_ context.Context, episode, reason string) (pool.Episode, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.episodes[episode]
	if !ok {
		return pool.Episode{}, fmt.Errorf("end %s: %w", episode, pool.ErrEpisodeNotFound)
	}
	delete(m.episodes, episode)
	m.ended[episode] = reason
	v := m.vms[id]
	v.state, v.episode = pool.DesktopResetting, ""
	m.signal()
	go func() {
		time.Sleep(m.resetDelay)
		m.mu.Lock()
		v.state = pool.DesktopFree
		m.mu.Unlock()
		m.signal()
	}()
	now := time.Now()
	return pool.Episode{ID: episode, VM: id, Pool: v.pool, State: pool.EpisodeEnded, EndedAt: &now, EndReason: reason}, nil
}

func (m *memLocal) SetPools(_ context.Context, cfg pool.Config) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setPools++
	m.lastCfg = cfg
	for _, p := range cfg.Pools {
		n := p.MinWarm
		if m.capacity >= 0 {
			n = min(n, m.capacity)
		}
		for i := range n {
			id := fmt.Sprintf("%s-%d", p.Name, i)
			if m.vms[id] == nil {
				m.vms[id] = &memVM{id: id, pool: p.Name, state: pool.DesktopFree}
			}
		}
	}
	m.signal()
	return nil
}

// endReason is how episode ended here ("" while it runs or if unknown).
func (m *memLocal) endReason(episode string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended[episode]
}

// holds says whether episode holds a VM here now.
func (m *memLocal) holds(episode string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.episodes[episode]
	return ok
}
