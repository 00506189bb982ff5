package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// StateFileName is the pool state file inside the farm's state dir.
//
// What lives where: which pool a VM belongs to and which episode holds it
// are labels in the VM's domain metadata (LabelPool, LabelEpisode), set by
// vmm with the domain and kept by libvirt, so ownership is read back after a
// restart rather than guessed. The file keeps what a label cannot: the
// episodes' records (ttl, start, expiry, why an episode ended). It is
// written write-temp + fsync + rename, so it stays whole across kill -9 and
// power loss, and it is covered by the same flock that makes one deskfarm
// the only writer. On start, the two are reconciled (Manager.recover).
const StateFileName = "pools.json"

// stateVersion is bumped on incompatible changes to persisted. Version 1
// also recorded pool membership (now labels); it is read once and migrated.
const stateVersion = 2

// persisted is the state the file keeps, as the Manager holds it.
type persisted struct {
	Version int
	// Episodes are the live leases (active or ending).
	Episodes []Episode
	// Ended are recently ended episodes, newest last, kept so that a call on
	// one is answered "ended" (and why) rather than "not found".
	Ended []Episode
	// Members is version 1's pool membership by VM id; read for migration only.
	Members map[string]persistedMember
}

type persistedMember struct {
	Pool string `json:"pool"`
}

// stateRecord is the state file's format. It is the file's own, apart from
// Episode (which carries no tags) and from the API's api.Episode: the names
// are those versions 1 and 2 wrote, so a file from an older deskfarm loads.
type stateRecord struct {
	Version  int                        `json:"version"`
	Episodes []episodeRecord            `json:"episodes"`
	Ended    []episodeRecord            `json:"ended,omitempty"`
	Members  map[string]persistedMember `json:"members,omitempty"`
}

// episodeRecord is one Episode in the state file.
type episodeRecord struct {
	ID                 string       `json:"id"`
	VM                 string       `json:"vm"`
	Pool               string       `json:"pool"`
	State              EpisodeState `json:"state"`
	Warm               bool         `json:"warm"`
	BootSeconds        float64      `json:"boot_seconds,omitempty"`
	CreatedAt          time.Time    `json:"created_at"`
	ExpiresAt          time.Time    `json:"expires_at"`
	TTLSeconds         float64      `json:"ttl_s"`
	ScreenshotSize     string       `json:"screenshot_size"`
	CleanStart         bool         `json:"clean_start"`
	ResetBeforeLeaseMS int64        `json:"reset_before_lease_ms,omitempty"`
	EndedAt            *time.Time   `json:"ended_at,omitempty"`
	EndReason          string       `json:"end_reason,omitempty"`
	ResetSeconds       float64      `json:"reset_seconds,omitempty"`
	VMReplaced         bool         `json:"vm_replaced,omitempty"`
}

func recordOf(e Episode) episodeRecord {
	return episodeRecord{ID: e.ID, VM: e.VM, Pool: e.Pool, State: e.State, Warm: e.Warm, BootSeconds: e.BootSeconds,
		CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt, TTLSeconds: e.TTLSeconds, ScreenshotSize: e.ScreenshotSize,
		CleanStart: e.CleanStart, ResetBeforeLeaseMS: e.ResetBeforeLeaseMS, EndedAt: e.EndedAt, EndReason: e.EndReason,
		ResetSeconds: e.ResetSeconds, VMReplaced: e.VMReplaced}
}

func (r episodeRecord) episode() Episode {
	return Episode{ID: r.ID, VM: r.VM, Pool: r.Pool, State: r.State, Warm: r.Warm, BootSeconds: r.BootSeconds,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, TTLSeconds: r.TTLSeconds, ScreenshotSize: r.ScreenshotSize,
		CleanStart: r.CleanStart, ResetBeforeLeaseMS: r.ResetBeforeLeaseMS, EndedAt: r.EndedAt, EndReason: r.EndReason,
		ResetSeconds: r.ResetSeconds, VMReplaced: r.VMReplaced}
}

func recordsOf(eps []Episode) []episodeRecord {
	if eps == nil {
		return nil
	}
	out := make([]episodeRecord, 0, len(eps))
	for _, e := range eps {
		out = append(out, recordOf(e))
	}
	return out
}

func episodesOf(rs []episodeRecord) []Episode {
	if rs == nil {
		return nil
	}
	out := make([]Episode, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.episode())
	}
	return out
}

func (p persisted) record() stateRecord {
	return stateRecord{Version: p.Version, Episodes: recordsOf(p.Episodes), Ended: recordsOf(p.Ended), Members: p.Members}
}

func (r stateRecord) persisted() persisted {
	return persisted{Version: r.Version, Episodes: episodesOf(r.Episodes), Ended: episodesOf(r.Ended), Members: r.Members}
}

// stateFile reads and atomically replaces the state file. Writes are
// ordered: a snapshot carries the sequence number it was taken at (under
// the Manager's lock), and a write of an older snapshot than the one on disk
// is skipped, so writes can run outside the lock without an older state
// overwriting a newer one.
type stateFile struct {
	path string

	mu      sync.Mutex // serializes writes; never held with Manager.mu
	written uint64     // sequence number of the snapshot on disk
}

// snapshot is the state at one point of the Manager's history.
type snapshot struct {
	seq uint64
	st  persisted
}

func (s *stateFile) load() (persisted, error) {
	var r stateRecord
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return persisted{Version: stateVersion}, nil
	}
	if err != nil {
		return persisted{}, fmt.Errorf("read pool state %s: %w", s.path, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return persisted{}, fmt.Errorf("parse pool state %s: %w", s.path, err)
	}
	p := r.persisted()
	if p.Version != stateVersion && p.Version != 1 {
		return p, fmt.Errorf("pool state %s: version %d, want %d", s.path, p.Version, stateVersion)
	}
	return p, nil
}

// write saves snap unless a newer snapshot is already on disk. It returns
// once a snapshot at least as new as snap is durable (or the write failed).
func (s *stateFile) write(snap snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap.seq <= s.written {
		return nil
	}
	if err := s.save(snap.st); err != nil {
		return err
	}
	s.written = snap.seq
	return nil
}

// save writes p to a temp file in the same dir, fsyncs it, renames it over
// the state file and fsyncs the dir: a reader sees the old or the new
// state, never a torn one.
func (s *stateFile) save(p persisted) error {
	b, err := json.MarshalIndent(p.record(), "", "  ")
	if err != nil {
		return fmt.Errorf("encode pool state: %w", err)
	}
	dir := filepath.Dir(s.path)
	f, err := os.CreateTemp(dir, ".pools-*.json")
	if err != nil {
		return fmt.Errorf("save pool state %s: %w", s.path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save pool state %s: write %s: %w", s.path, tmp, err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save pool state %s: %w", s.path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
