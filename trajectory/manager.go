package trajectory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/api"
)

// pruneEvery is how often Run applies retention (the budget is checked at
// every step and every end).
const pruneEvery = 10 * time.Minute

// Manager owns the recorders and the store.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	byVM map[string]*Recorder // recordings running, by VM
	// starting holds the VMs ("vm:"+name) and ids ("id:"+id) of the
	// recordings being started, so two Starts cannot both pass.
	starting map[string]bool
	done     map[string]api.TrajectoryInfo // trajectories not recording, by id
	// doneBytes is the sum of done's Bytes, so the budget check each step
	// makes does not walk them all.
	doneBytes int64
	wg        sync.WaitGroup // recorders' goroutines
}

// New opens the store (finishing as interrupted any trajectory a previous
// run left recording, and applying budget and retention) and returns its
// manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Dir == "" {
		return nil, errors.New("trajectory: Config.Dir is required")
	}
	if cfg.BudgetBytes == 0 {
		cfg.BudgetBytes = DefaultBudgetBytes
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.FFmpeg == "" {
		cfg.FFmpeg = "ffmpeg"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Manager{cfg: cfg, log: cfg.Log, byVM: map[string]*Recorder{}, starting: map[string]bool{}, done: map[string]api.TrajectoryInfo{}}
	if m.log == nil {
		m.log = slog.Default()
	}
	if err := m.load(); err != nil {
		return nil, err
	}
	m.expire()
	m.prune()
	return m, nil
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

// Run ends recordings whose episodes end (eps), prunes by age, and
// returns when ctx ends, after finishing every recorder.
func (m *Manager) Run(ctx context.Context, eps Episodes) error {
	tick := time.NewTicker(pruneEvery)
	defer tick.Stop()
	for {
		var changed <-chan struct{}
		if eps != nil {
			changed = eps.Changed()
		}
		select {
		case <-ctx.Done():
			m.stopAll("server stopped")
			return ctx.Err()
		case <-changed:
			for _, r := range m.recorders() {
				if r.meta.Episode != "" && !eps.Active(r.meta.Episode) {
					r.stop("episode ended")
				}
			}
		case <-tick.C:
			m.expire()
			m.prune()
		}
	}
}

func (m *Manager) recorders() []*Recorder {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Recorder, 0, len(m.byVM))
	for _, r := range m.byVM {
		out = append(out, r)
	}
	return out
}

// stopAll ends every recording and waits for their writers.
func (m *Manager) stopAll(reason string) {
	for _, r := range m.recorders() {
		r.stop(reason)
	}
	m.wg.Wait()
}

// Start begins recording m.VM; ErrRecording if it already is.
func (m *Manager) Start(ctx context.Context, meta Meta) (api.TrajectoryInfo, error) {
	if meta.VM == "" {
		return api.TrajectoryInfo{}, fmt.Errorf("trajectory: no VM: %w", ErrInvalid)
	}
	if meta.ID == "" {
		var b [6]byte
		rand.Read(b[:])
		meta.ID = "tr-" + hex.EncodeToString(b[:])
	}
	if _, err := cleanName(meta.ID); err != nil || filepath.Base(meta.ID) != meta.ID {
		return api.TrajectoryInfo{}, fmt.Errorf("trajectory id %q: %w", meta.ID, ErrInvalid)
	}
	m.mu.Lock()
	if r := m.byVM[meta.VM]; r != nil {
		m.mu.Unlock()
		return api.TrajectoryInfo{}, fmt.Errorf("VM %s (trajectory %s): %w", meta.VM, r.id, ErrRecording)
	}
	if m.starting["vm:"+meta.VM] || m.starting["id:"+meta.ID] {
		m.mu.Unlock()
		return api.TrajectoryInfo{}, fmt.Errorf("VM %s (trajectory %s): %w", meta.VM, meta.ID, ErrRecording)
	}
	_, exists := m.done[meta.ID]
	for _, r := range m.byVM {
		exists = exists || r.id == meta.ID
	}
	if exists {
		m.mu.Unlock()
		return api.TrajectoryInfo{}, fmt.Errorf("trajectory %s exists: %w", meta.ID, ErrRecording)
	}
	m.starting["vm:"+meta.VM], m.starting["id:"+meta.ID] = true, true
	m.mu.Unlock()

	r, err := m.open(ctx, meta)
	if err == nil {
		r.startMedia()
	}
	m.mu.Lock()
	delete(m.starting, "vm:"+meta.VM)
	delete(m.starting, "id:"+meta.ID)
	if err != nil {
		m.mu.Unlock()
		return api.TrajectoryInfo{}, err
	}
	m.byVM[meta.VM] = r
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		r.run()
	}()
	m.log.Info("trajectory recording", "op", "trajectory", "vm", meta.VM, "episode", meta.Episode, "id", meta.ID)
	return r.Info(), nil
}

// open makes the recording's directory and first info.json.
func (m *Manager) open(ctx context.Context, meta Meta) (*Recorder, error) {
	if m.cfg.Desks == nil {
		return nil, fmt.Errorf("trajectory: no desks configured: %w", ErrInvalid)
	}
	screen, err := m.cfg.Desks.Screen(ctx, meta.VM)
	if err != nil {
		return nil, fmt.Errorf("trajectory: screen of VM %s: %w", meta.VM, err)
	}
	dir := m.dataDir(meta.ID)
	for _, d := range []string{"screens", "native"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("trajectory %s: %w", meta.ID, err)
		}
	}
	r := newRecorder(m, meta, screen, dir)
	if err := writeInfo(dir, r.info); err != nil {
		os.RemoveAll(filepath.Join(m.cfg.Dir, meta.ID))
		return nil, fmt.Errorf("trajectory %s: %w", meta.ID, err)
	}
	f, err := openAppend(dir)
	if err != nil {
		os.RemoveAll(filepath.Join(m.cfg.Dir, meta.ID))
		return nil, fmt.Errorf("trajectory %s: %w", meta.ID, err)
	}
	r.steps = f
	return r, nil
}

// Stop ends the VM's recording (reason, e.g. "stopped", "episode ended")
// and returns its info once written; ErrNotRecording if none.
func (m *Manager) Stop(ctx context.Context, vm, reason string) (api.TrajectoryInfo, error) {
	m.mu.Lock()
	r := m.byVM[vm]
	m.mu.Unlock()
	if r == nil {
		return api.TrajectoryInfo{}, fmt.Errorf("VM %s: %w", vm, ErrNotRecording)
	}
	r.stop(reason)
	select {
	case <-r.done:
	case <-ctx.Done():
		return r.Info(), ctx.Err()
	}
	return r.Info(), nil
}

// Recorder returns the VM's recorder, nil when it is not being recorded.
func (m *Manager) Recorder(vm string) *Recorder {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byVM[vm]
}

// finished moves an ended recording into the store's finished ones and
// applies the budget.
func (m *Manager) finished(r *Recorder, info api.TrajectoryInfo) {
	m.mu.Lock()
	if m.byVM[r.meta.VM] == r {
		delete(m.byVM, r.meta.VM)
	}
	m.done[r.id] = info
	m.doneBytes += info.Bytes
	m.mu.Unlock()
	m.prune(r.id)
}

func openAppend(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, stepsFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}
