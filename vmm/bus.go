package vmm

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Bus fans Events out to named subscribers; the zero value is ready.
// Manager publishes on one; vmmtest's fake farm uses another.
//
// Guarantees, after tailscale's util/eventbus:
//   - Publishing never blocks: each subscriber has its own queue drained by
//     one goroutine, so a slow consumer (a web feed, a pool busy resetting)
//     delays only itself and never a lifecycle change.
//   - Each subscriber receives the events in the order they were
//     published, all VMs interleaved; Manager publishes a VM's events under
//     that VM's lock, so they are in the order of the changes.
//   - Queues are unbounded, since dropping a lifecycle event would leave a
//     desk or a pool wrong for good; instead they are measured. A queue that
//     grows is its subscriber's bug: Queues reports each one's depth and
//     high-water mark (served as deskfarm_event_queue_* metrics), and each
//     new high-water mark from HighWaterLog on, doubling, is logged.
type Bus struct {
	// Log receives the high-water warnings; nil means slog.Default().
	Log *slog.Logger

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
}

// HighWaterLog is the queue depth from which a subscriber's new high-water
// marks are logged (then at each doubling). Lifecycle events come a few a
// second at most; a backlog of this many means the subscriber is stuck.
const HighWaterLog = 64

// QueueStat is one subscriber's queue, as Bus.Queues reports it.
type QueueStat struct {
	// Subscriber is the name given to Subscribe.
	Subscriber string
	// Depth is the events published to the subscriber and not yet received.
	Depth int
	// HighWater is the largest Depth since the subscription began.
	HighWater int
}

type subscriber struct {
	name string

	mu    sync.Mutex
	queue []Event
	depth int // queued plus the one in hand, not yet received
	high  int
	logAt int           // the next high-water mark to log
	wake  chan struct{} // 1-buffered: "queue may be non-empty"
	done  chan struct{} // closed to stop the subscriber
	once  sync.Once
}

func (s *subscriber) stop() { s.once.Do(func() { close(s.done) }) }

// Subscribe returns a channel of every event published after the call. The
// channel is closed when ctx ends or the bus closes; events still queued
// then are dropped. name says who subscribes ("desk", "pool", ...) in
// Queues and the logs; several subscriptions may share one.
func (b *Bus) Subscribe(ctx context.Context, name string) <-chan Event {
	out := make(chan Event)
	s := &subscriber{name: name, logAt: HighWaterLog, wake: make(chan struct{}, 1), done: make(chan struct{})}
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
				s.mu.Lock()
				s.depth--
				s.mu.Unlock()
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
	var highs []QueueStat
	b.mu.Lock()
	for s := range b.subs {
		s.mu.Lock()
		s.queue = append(s.queue, ev)
		s.depth++
		if s.depth > s.high {
			s.high = s.depth
			if s.high >= s.logAt {
				s.logAt *= 2
				highs = append(highs, QueueStat{Subscriber: s.name, Depth: s.depth, HighWater: s.high})
			}
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	if len(highs) > 0 {
		log := b.Log
		if log == nil {
			log = slog.Default()
		}
		for _, q := range highs {
			log.Warn("event queue high-water mark: a subscriber is not keeping up", "op", "events",
				"subscriber", q.Subscriber, "depth", q.Depth, "vm", ev.VM.ID, "event", string(ev.Kind))
		}
	}
}

// Queues reports every current subscriber's queue, sorted by name.
func (b *Bus) Queues() []QueueStat {
	b.mu.Lock()
	out := make([]QueueStat, 0, len(b.subs))
	for s := range b.subs {
		s.mu.Lock()
		out = append(out, QueueStat{Subscriber: s.name, Depth: s.depth, HighWater: s.high})
		s.mu.Unlock()
	}
	b.mu.Unlock()
	slices.SortFunc(out, func(a, b QueueStat) int {
		if a.Subscriber < b.Subscriber {
			return -1
		}
		if a.Subscriber > b.Subscriber {
			return 1
		}
		return b.Depth - a.Depth
	})
	return out
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
