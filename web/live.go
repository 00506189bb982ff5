package web

// The dashboard's live feed (issue 14, item 14): GET /v1/live sends the
// whole farm (api.FarmState) as server-sent events, once on connect and
// again whenever it changes. One hub per server builds the state, while
// anyone is connected: on each vmm lifecycle event (the bus the desks and
// the pool follow), on each change the pool announces (pool.Changed), and
// every liveDeskPoll for what only desks know (the last action, a person in
// control), which publish no farm-wide event. A state equal to the last is
// not sent.
//
// The hub never waits on a reader: it swaps the newest state in and closes
// a channel. Each connection writes the newest state when it can, skipping
// those it was too slow for, and a reader that cannot take a message in
// wsWriteTimeout is dropped. Thumbnails are not in the feed: the page draws
// each desktop from its frame stream (/v1/vms/{id}/stream at liveThumbFPS),
// whose frames the desk encodes once for every viewer.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/api"
	"github.com/deskfarm/deskfarm/pool"
)

const (
	// liveDeskPoll is how often the hub looks at the desks' last actions
	// and control, which change without a farm event.
	liveDeskPoll = 2 * time.Second
	// liveCoalesce gathers a burst of events (a pool refilling, a reset's
	// events) into one state.
	liveCoalesce = 100 * time.Millisecond
	// liveKeepAlive is the comment line sent on a quiet feed, so proxies
	// keep it open.
	liveKeepAlive = 15 * time.Second
)

// liveHub builds the farm's state for the feeds.
type liveHub struct {
	s *server

	mu      sync.Mutex
	readers int
	stop    context.CancelFunc
	done    chan struct{} // closed when the running loop has returned
	seq     uint64
	latest  []byte        // the newest message's JSON, nil before the first
	key     []byte        // latest without its seq and time
	changed chan struct{} // closed when latest is replaced
}

func newLiveHub(s *server) *liveHub {
	return &liveHub{s: s, changed: make(chan struct{})}
}

// join counts a reader in, starting the loop for the first; leave ends it.
func (h *liveHub) join() (leave func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readers++
	if h.readers == 1 {
		prev := h.done
		ctx, cancel := context.WithCancel(context.Background())
		h.stop, h.done = cancel, make(chan struct{})
		go h.run(ctx, prev, h.done)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.readers--; h.readers == 0 {
				// The next reader gets a state of its own time.
				h.stop()
				h.latest, h.key = nil, nil
			}
		})
	}
}

// current returns the newest message (nil before the first) and a channel
// closed when a newer one replaces it.
func (h *liveHub) current() ([]byte, chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest, h.changed
}

// run builds a state on every trigger until ctx ends. prev is the done
// channel of the loop before it, which may still be returning.
func (h *liveHub) run(ctx context.Context, prev <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if prev != nil {
		<-prev
	}
	// Subscribe before the first state, so that no change falls between.
	events := h.s.farm.Subscribe(ctx, "live")
	poll := time.NewTicker(liveDeskPoll)
	defer poll.Stop()
	for {
		var poolChanged <-chan struct{}
		if h.s.pools != nil {
			poolChanged = h.s.pools.Changed()
		}
		h.publish(ctx)
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events = nil // the farm is closing; the other triggers remain
				continue
			}
		case <-poolChanged:
		case <-poll.C:
			continue
		}
		// Coalesce the rest of a burst, draining events as they come so
		// that the bus keeps no queue for this subscriber.
		t := time.NewTimer(liveCoalesce)
	burst:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case _, ok := <-events:
				if !ok {
					events = nil
				}
			case <-t.C:
				break burst
			}
		}
	}
}

// publish builds the state and, when it differs from the last but for
// its number and time, makes it the newest message.
func (h *liveHub) publish(ctx context.Context) {
	st, err := h.s.farmState(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.s.log.Warn("live feed: read the farm", "op", "farm_live", "err", err)
		}
		return
	}
	at := st.At
	st.At = time.Time{}
	key, err := json.Marshal(st)
	if err != nil {
		h.s.log.Error("live feed: encode", "op", "farm_live", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() != nil {
		return // the last reader left: the next loop starts afresh
	}
	if h.latest != nil && bytes.Equal(key, h.key) {
		return
	}
	st.Seq, st.At = h.seq+1, at
	b, err := json.Marshal(st)
	if err != nil {
		return
	}
	h.seq++
	h.key, h.latest = key, b
	close(h.changed)
	h.changed = make(chan struct{})
}

// farmState reads the farm, its desks and its pools.
func (s *server) farmState(ctx context.Context) (api.FarmState, error) {
	vms, err := s.farm.List(ctx)
	if err != nil {
		return api.FarmState{}, err
	}
	st := api.FarmState{At: time.Now().UTC(), VMs: make([]api.LiveVM, 0, len(vms)),
		Episodes: []api.Episode{}, Pools: []api.Pool{}}
	for _, vm := range vms {
		lv := api.LiveVM{VM: apiVM(vm)}
		if d := s.peek(vm.ID); d != nil {
			if ev, ok := d.LastEvent(); ok {
				at := ev.Time.UTC()
				lv.LastAction, lv.LastActionAt = describe(activityEvent(ev)), &at
			}
			_, lv.Human = d.Human()
		}
		if s.pools != nil {
			lv.Pool, lv.Episode, _ = s.pools.Owner(vm.ID)
		}
		st.VMs = append(st.VMs, lv)
	}
	if s.pools != nil {
		for _, ep := range s.pools.List() {
			if ep.State == pool.EpisodeEnded {
				continue
			}
			st.Episodes = append(st.Episodes, apiEpisode(ep, "/vms/"+ep.VM, ""))
		}
		st.Pools = apiPools(s.pools.Pools()).Pools
	}
	return st, nil
}

// farmLive serves GET /v1/live: the farm's state as server-sent events,
// until the client goes.
func (s *server) farmLive(w http.ResponseWriter, r *http.Request) error {
	leave := s.live.join()
	defer leave()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return fmt.Errorf("live feed: flush: %w", err)
	}
	keepAlive := time.NewTicker(liveKeepAlive)
	defer keepAlive.Stop()
	var sent []byte
	for {
		msg, changed := s.live.current()
		if msg != nil && !bytes.Equal(msg, sent) {
			// A reader that cannot take a message in time is dropped.
			rc.SetWriteDeadline(time.Now().Add(wsWriteTimeout)) //nolint:errcheck // unsupported: no deadline
			if _, err := fmt.Fprintf(w, "event: farm\ndata: %s\n\n", msg); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
			rc.SetWriteDeadline(time.Time{}) //nolint:errcheck
			sent = msg
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			rc.SetWriteDeadline(time.Now().Add(wsWriteTimeout)) //nolint:errcheck
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
			if err := rc.Flush(); err != nil {
				return nil
			}
			rc.SetWriteDeadline(time.Time{}) //nolint:errcheck
		case <-r.Context().Done():
			return nil
		}
	}
}
