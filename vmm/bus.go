package vmm

import (
	"context"
	"sync"
)

// Bus fans Events out to subscribers; the zero value is ready. Manager
// publishes on one; vmmtest's fake farm uses another. Publishing never blocks: each
// subscriber has its own unbounded queue drained by one goroutine, so a slow
// consumer (a web feed, a pool busy resetting) delays only itself and never
// a lifecycle change. Events of one VM reach every subscriber in the order
// they were published.
type Bus struct {
	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

type subscriber struct {
	mu    sync.Mutex
	queue []Event
	wake  chan struct{} // 1-buffered: "queue may be non-empty"
	done  chan struct{} // closed to stop the subscriber
	once  sync.Once
}

func (s *subscriber) stop() { s.once.Do(func() { close(s.done) }) }

// Subscribe returns a channel of every event published after the call. The
// channel is closed when ctx ends or the bus closes; events still queued
// then are dropped.
func (b *Bus) Subscribe(ctx context.Context) <-chan Event {
	out := make(chan Event)
	s := &subscriber{wake: make(chan struct{}, 1), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		close(out)
		return out
	}
	if b.subs == nil {
		b.subs = map[*subscriber]struct{}{}
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	go func() {
		defer close(out)
		defer func() {
			b.mu.Lock()
			delete(b.subs, s)
			b.mu.Unlock()
		}()
		for {
			s.mu.Lock()
			var ev Event
			ok := len(s.queue) > 0
			if ok {
				ev = s.queue[0]
				s.queue[0] = Event{}
				s.queue = s.queue[1:]
			}
			s.mu.Unlock()
			if !ok {
				select {
				case <-s.wake:
					continue
				case <-s.done:
					return
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- ev:
			case <-s.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Publish queues ev for every subscriber.
func (b *Bus) Publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		s.mu.Lock()
		s.queue = append(s.queue, ev)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Close ends every subscription; later subscriptions get a closed channel.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		s.stop()
	}
}
