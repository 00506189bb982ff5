// Package vnctest holds test doubles for vnc's consumers (desk, web,
// farmtest) that would otherwise each write their own.
package vnctest

import (
	"sync"

	"github.com/deskfarm/deskfarm/vnc"
)

// Still is the damage side of a display whose picture never changes:
// Damage subscriptions deliver nothing and are closed by Close, as a
// vnc.Client's are when it closes. Embed it in a fake display.
type Still struct {
	mu     sync.Mutex
	subs   map[chan vnc.Damage]struct{}
	closed bool
}

// Damage subscribes; the channel closes on cancel or Close.
func (s *Still) Damage() (<-chan vnc.Damage, func()) {
	ch := make(chan vnc.Damage)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		close(ch)
		return ch, func() {}
	}
	if s.subs == nil {
		s.subs = map[chan vnc.Damage]struct{}{}
	}
	s.subs[ch] = struct{}{}
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.subs[ch]; ok {
			delete(s.subs, ch)
			close(ch)
		}
	}
}

// Close closes every subscription; later ones start closed.
func (s *Still) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		for ch := range s.subs {
			close(ch)
		}
		clear(s.subs)
	}
	return nil
}

// Closed reports whether Close was called.
func (s *Still) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
