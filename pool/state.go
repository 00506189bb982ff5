package pool

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// StateFileName is the pool state file inside the farm's state dir.
//
// Why a file and not libvirt domain metadata: vmm owns its domains'
// metadata (one namespace it rewrites on every state change) and a lease
// changes far more often than a VM; a file in the state dir is covered by
// the same flock that makes one deskfarm the only writer, and write-temp +
// fsync + rename keeps it whole across kill -9 and power loss. The domains
// stay the truth about which VMs exist: on start the file is reconciled
// against what vmm adopted (see Manager.recover).
const StateFileName = "pools.json"

// stateVersion is bumped on incompatible changes to persisted.
const stateVersion = 1

// persisted is the state file's content.
type persisted struct {
	Version int `json:"version"`
	// Members maps VM id to the pool it belongs to.
	Members map[string]persistedMember `json:"members"`
	// Episodes are the live leases.
	Episodes []Episode `json:"episodes"`
	// Ended are recently ended episodes, newest last, kept so that a call on
	// one is answered "ended" (and why) rather than "not found".
	Ended []Episode `json:"ended,omitempty"`
	// Pending are boots in flight: a VM that finished booting but was not
	// recorded before a crash is claimed by the pool it was booted for.
	Pending []pendingBoot `json:"pending,omitempty"`
}

type persistedMember struct {
	Pool string `json:"pool"`
}

type pendingBoot struct {
	ID      string    `json:"id"`
	Pool    string    `json:"pool"`
	Started time.Time `json:"started"`
}

// stateFile reads and atomically replaces the state file.
type stateFile struct {
	path string
}

func (s stateFile) load() (persisted, error) {
	var p persisted
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return persisted{Version: stateVersion, Members: map[string]persistedMember{}}, nil
	}
	if err != nil {
		return p, fmt.Errorf("read pool state %s: %w", s.path, err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("parse pool state %s: %w", s.path, err)
	}
	if p.Version != stateVersion {
		return p, fmt.Errorf("pool state %s: version %d, want %d", s.path, p.Version, stateVersion)
	}
	if p.Members == nil {
		p.Members = map[string]persistedMember{}
	}
	return p, nil
}

// save writes p to a temp file in the same dir, fsyncs it, renames it over
// the state file and fsyncs the dir: a reader sees the old or the new
// state, never a torn one.
func (s stateFile) save(p persisted) error {
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
