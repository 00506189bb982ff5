package vmm

// Spare overlays: a copy of a saved ready state made ahead of time, so that
// a create from saved state renames a file into its VM directory instead of
// copying the whole saved state (RAM and disk, 185 MB for the desktop:
// 0.22-0.27 s with a warm page cache, 0.9 s cold, measured with cp on this
// host's ext4, which has no reflinks). One spare per saved ready state; the
// create that took it starts the next copy once its VM is ready, in the
// background at nice 19: run during the create, the copy slowed its QEMU
// start and loadvm by more than it saved (docs/benchmarks.md, cold start).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// spares tracks the background copies in flight, one per saved ready state.
type spares struct {
	mu      sync.Mutex
	filling map[string]bool // by saved ready state path
	closed  bool
	ctx     context.Context // cancelled by close: a copy in flight stops
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// sparePath is where the spare of the saved ready state tmpl lives. It names
// the saved state's inode and modification time: a saved state removed and
// made again never gets the spare of the one before, which holds another
// guest's RAM (the inode alone is not enough: ext4 and tmpfs hand a freed
// inode number to the next file, which TestStandbyLifecycle met).
func sparePath(tmpl string) (string, error) {
	fi, err := os.Stat(tmpl)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("saved ready state %s: no inode", tmpl)
	}
	return fmt.Sprintf("%s.spare-%d-%d", tmpl, st.Ino, fi.ModTime().UnixNano()), nil
}

// takeSpare moves the spare of tmpl to overlay and reports whether there
// was one. Concurrent creates race on the rename; the losers copy.
func (m *Manager) takeSpare(tmpl, overlay string) bool {
	p, err := sparePath(tmpl)
	if err != nil {
		return false
	}
	return os.Rename(p, overlay) == nil
}

// refillSpare makes the spare of tmpl in the background, unless it is there
// or being made. Leftovers (spares of an earlier file of that name, copies a
// killed deskfarm left half made) are removed first: one deskfarm holds the
// state dir, and this is its one copy of tmpl in flight.
func (m *Manager) refillSpare(tmpl string) {
	s := &m.spares
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.filling[tmpl] {
		return
	}
	if s.filling == nil {
		s.filling = map[string]bool{}
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
	s.filling[tmpl] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.filling, tmpl)
			s.mu.Unlock()
		}()
		p, err := sparePath(tmpl)
		if err != nil || fileExists(p) {
			return
		}
		old, _ := filepath.Glob(tmpl + ".spare-*")
		for _, o := range old {
			os.Remove(o)
		}
		if err := copyFileContext(s.ctx, tmpl, p, true); err != nil && s.ctx.Err() == nil {
			m.log.Warn("could not make a spare overlay: the next create copies the saved state itself", "op", "spare", "path", tmpl, "err", err)
		}
	}()
}

// close stops the copies in flight and waits for them (their temp files
// are removed).
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
