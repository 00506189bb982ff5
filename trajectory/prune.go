package trajectory

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/deskfarm/deskfarm/api"
)

// Budget and retention: the store is capped in bytes (BudgetBytes) and in
// age (Retention). Past either, finished trajectories go, oldest first; a
// recording is never removed, and when the recordings alone exceed the
// budget the one that pushed past it stops (its info's Stopped says so).

// Defaults of Config.
const (
	DefaultBudgetBytes = 20 << 30
	DefaultRetention   = 7 * 24 * time.Hour
)

// sortNewest sorts by start time, newest first (ids break ties, so a list
// is stable).
func sortNewest(ts []api.TrajectoryInfo) {
	slices.SortFunc(ts, func(a, b api.TrajectoryInfo) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return 1
		}
		return -1
	})
}

// oldestFinishedLocked lists the finished trajectories, oldest first; m.mu
// held.
func (m *Manager) oldestFinishedLocked() []api.TrajectoryInfo {
	out := make([]api.TrajectoryInfo, 0, len(m.done))
	for _, info := range m.done {
		out = append(out, info)
	}
	sortNewest(out)
	slices.Reverse(out)
	return out
}

// expire removes the finished trajectories older than the retention (at
// New and every pruneEvery).
func (m *Manager) expire() {
	if m.cfg.Retention < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for _, info := range m.done {
		end := info.StartedAt
		if info.EndedAt != nil {
			end = *info.EndedAt
		}
		if now.Sub(end) > m.cfg.Retention {
			m.removeLocked(info.ID, fmt.Sprintf("older than the retention of %s", m.cfg.Retention))
		}
	}
}

// prune applies the budget to the finished trajectories, oldest first,
// sparing keep (one that just finished: it goes first at the next prune,
// not the moment it ends); it returns the bytes the recordings take beyond
// what is left of the budget (0 when within). It runs after every step, so
// within the budget it only adds.
func (m *Manager) prune(keep ...string) int64 {
	if m.cfg.BudgetBytes < 0 {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.doneBytes
	for _, r := range m.byVM {
		total += r.bytes()
	}
	if total <= m.cfg.BudgetBytes {
		return 0
	}
	for _, info := range m.oldestFinishedLocked() {
		if total <= m.cfg.BudgetBytes {
			break
		}
		if slices.Contains(keep, info.ID) {
			continue
		}
		if m.removeLocked(info.ID, fmt.Sprintf("over the budget of %d bytes", m.cfg.BudgetBytes)) == nil {
			total -= info.Bytes
		}
	}
	return max(0, total-m.cfg.BudgetBytes)
}

// bytes is what the recording takes on disk now: what its writer wrote
// and the video so far.
func (r *Recorder) bytes() int64 {
	n := r.written.Load()
	if fi, err := os.Stat(r.videoPath()); err == nil {
		n += fi.Size()
	}
	return n
}
