package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
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

// persisted is the state file's content.
type persisted struct {
	Version int `json:"version"`
	// Episodes are the live leases (active or ending).
	Episodes []Episode `json:"episodes"`
	// Ended are recently ended episodes, newest last, kept so that a call on
	// one is answered "ended" (and why) rather than "not found".
	Ended []Episode `json:"ended,omitempty"`
	// Members is version 1's pool membership by VM id; read for migration only.
	Members map[string]persistedMember `json:"members,omitempty"`
}

type persistedMember struct {
	Pool string `json:"pool"`
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
	var p persisted
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return persisted{Version: stateVersion}, nil
	}
	if err != nil {
		return p, fmt.Errorf("read pool state %s: %w", s.path, err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("parse pool state %s: %w", s.path, err)
	}
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
	b, err := json.MarshalIndent(p, "", "  ")
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
