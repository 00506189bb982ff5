package desk

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
)

// Farm is what a Pool needs from the VM layer: a VM's state and socket, and
// the lifecycle events that end desks.
type Farm interface {
	Get(ctx context.Context, id string) (vmm.VM, error)
	Subscribe(ctx context.Context, name string) <-chan vmm.Event
}

// Defaults of Options.
const (
	// DefaultDialTimeout bounds connecting to a VM's VNC socket and its
	// first frame. A dial runs on its own, not under a caller's context:
	// every caller waiting for the VM shares it, each for as long as its own
	// context allows.
	DefaultDialTimeout = 15 * time.Second
	// DefaultMaxExecutors is how many screenshot sizes a desk keeps an
	// executor for (see Desk.Run).
	DefaultMaxExecutors = 4
)

// Options configures New. Zero values take the defaults noted.
type Options struct {
	// Log receives structured logs (keys vm, op). Default slog.Default().
	Log *slog.Logger
	// Dial opens a VM's display. Default DialVNC.
	Dial DialFunc
	// DialTimeout bounds one dial. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxExecutors bounds the executors of one desk. Default
	// DefaultMaxExecutors.
	MaxExecutors int
}

// Pool holds the desks of a farm's VMs and ends them on lifecycle events.
// Its methods are safe for concurrent use.
type Pool struct {
	farm Farm
	opts Options
	log  *slog.Logger

	ctx    context.Context // ends with Close: dials and the event loop
	cancel context.CancelFunc
	loop   chan struct{}  // closed when the event loop returns
	drains sync.WaitGroup // lanes draining (see route)

	mu      sync.Mutex // guards the fields below; never held across I/O
	entries map[string]*entry
	lanes   map[string]*lane // per VM, the events routed and not yet applied
	closed  bool
	resets  map[string]resetMark // per VM, the last reset applied (see WaitReset)
	applied chan struct{}        // closed and replaced when a mark changes
}

// resetMark is the last reset applied to a VM's desk, or the VM's end.
type resetMark struct {
	at   time.Time
	gone bool // died or destroyed: no reset is coming
}

// goneMarkKeep is how long the mark of a VM that ended is kept, for a
// WaitReset that comes after the end.
const goneMarkKeep = time.Minute

// entry is one VM's slot: a dial in progress, then its desk. ready closes
// once desk or err is set.
type entry struct {
	id     string
	ready  chan struct{}
	desk   *Desk
	err    error
	cancel context.CancelFunc // cancels the dial
	gone   *ClosedError       // set (under Pool.mu) when the VM went away mid-dial
}

// lane is one VM's serial queue of lifecycle events. A goroutine drains it
// while it is non-empty, so one VM's events apply in order and a desk that
// is slow to apply one (a reset waiting for its run to stop) delays only
// its own VM's later events.
type lane struct {
	queue []vmm.Event
}

// NewPool returns a pool over farm with default options; see New.
func NewPool(farm Farm, log *slog.Logger) *Pool { return New(farm, Options{Log: log}) }

// New returns a pool over farm. It subscribes to farm's lifecycle events
// until Close.
func New(farm Farm, opts Options) *Pool {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Dial == nil {
		opts.Dial = DialVNC
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.MaxExecutors <= 0 {
		opts.MaxExecutors = DefaultMaxExecutors
	}
	p := &Pool{farm: farm, opts: opts, log: opts.Log, entries: map[string]*entry{}, loop: make(chan struct{}),
		lanes: map[string]*lane{}, resets: map[string]resetMark{}, applied: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	events := farm.Subscribe(p.ctx, "desk")
	go p.watch(events)
	return p
}

// watch routes lifecycle events to their VMs' lanes until the subscription
// ends. It never waits for a desk: the farm's one subscription must not
// carry one VM's slow reset into every other VM's death.
func (p *Pool) watch(events <-chan vmm.Event) {
	defer close(p.loop)
	for ev := range events {
		p.route(ev)
	}
}

// route queues ev on its VM's lane, starting the lane's drain if it is idle.
func (p *Pool) route(ev vmm.Event) {
	id := ev.VM.ID
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lanes[id]; l != nil {
		l.queue = append(l.queue, ev)
		return
	}
	l := &lane{queue: []vmm.Event{ev}}
	p.lanes[id] = l
	p.drains.Add(1)
	go p.drain(id, l)
}

// drain applies l's events in order; it ends (and forgets the lane) once
// the queue is empty, so an idle farm has no lane goroutines.
func (p *Pool) drain(id string, l *lane) {
	defer p.drains.Done()
	for {
		p.mu.Lock()
		if len(l.queue) == 0 {
			delete(p.lanes, id)
			p.mu.Unlock()
			return
		}
		ev := l.queue[0]
		l.queue[0] = vmm.Event{}
		l.queue = l.queue[1:]
		p.mu.Unlock()
		p.apply(ev)
	}
}

// apply is the one place a lifecycle event changes desks. It runs on the
// VM's lane: a reset waits there for the desk's runs to stop (Desk.reset).
func (p *Pool) apply(ev vmm.Event) {
	id := ev.VM.ID
	switch ev.Kind {
	case vmm.EventReset:
		if d := p.Peek(id); d != nil {
			d.reset(ev.At)
		}
		p.mark(id, resetMark{at: ev.At})
	case vmm.EventDied, vmm.EventDestroyed:
		p.mark(id, resetMark{at: ev.At, gone: true})
		reason := "vm destroyed"
		if ev.Kind == vmm.EventDied {
			reason = "vm died"
		}
		if ev.Reason != "" && ev.Reason != "destroyed" {
			reason += ": " + ev.Reason
		}
		p.drop(id, &ClosedError{VM: id, Reason: reason})
	}
}

// mark records a VM's reset or end for WaitReset and wakes its waiters.
func (p *Pool) mark(id string, m resetMark) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.gone {
		for vm, old := range p.resets {
			if old.gone && m.at.Sub(old.at) > goneMarkKeep {
				delete(p.resets, vm)
			}
		}
	}
	p.resets[id] = m
	close(p.applied)
	p.applied = make(chan struct{})
}

// drop removes vm id's entry and closes its desk, or stops its dial.
func (p *Pool) drop(id string, why *ClosedError) {
	p.mu.Lock()
	e := p.entries[id]
	delete(p.entries, id)
	if e != nil && e.desk == nil && e.err == nil {
		e.gone = why // the dial closes what it opens
	}
	p.mu.Unlock()
	if e == nil {
		return
	}
	e.cancel()
	select {
	case <-e.ready:
		if e.desk != nil {
			e.desk.close(why)
		}
	default:
	}
}

// Get returns the desk of a ready VM, dialling its display on first use.
// Only callers for the same VM wait for a dial, each until its own ctx ends.
func (p *Pool) Get(ctx context.Context, id string) (*Desk, error) {
	vm, err := p.farm.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if vm.State != vmm.StateReady {
		return nil, fmt.Errorf("display of vm %s: %w (state %s)", id, vmm.ErrNotRunning, vm.State)
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, &ClosedError{VM: id, Reason: "farm shutting down"}
		}
		e := p.entries[id]
		if e == nil {
			e = &entry{id: id, ready: make(chan struct{})}
			var dctx context.Context
			dctx, e.cancel = context.WithTimeout(p.ctx, p.opts.DialTimeout)
			p.entries[id] = e
			go p.dial(dctx, e, vm)
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("display of vm %s: waiting for the vnc dial: %w", id, ctx.Err())
		}
		if e.err != nil {
			return nil, e.err
		}
		select {
		case <-e.desk.done:
			// Closed since; drop never leaves a closed desk's entry behind,
			// so the next round dials afresh (or fails on the VM's state).
			p.mu.Lock()
			if p.entries[id] == e {
				delete(p.entries, id)
			}
			p.mu.Unlock()
			if _, err := p.farm.Get(ctx, id); err != nil {
				return nil, err
			}
			continue
		default:
		}
		return e.desk, nil
	}
}

// dial opens vm's display for e and publishes the outcome.
func (p *Pool) dial(ctx context.Context, e *entry, vm vmm.VM) {
	defer e.cancel()
	start := time.Now()
	disp, err := p.opts.Dial(ctx, vm, p.log)
	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(e.ready)
	switch {
	case e.gone != nil:
		if disp != nil {
			disp.Close()
		}
		e.err = e.gone
	case err != nil:
		e.err = fmt.Errorf("display of vm %s: %w", vm.ID, err)
	default:
		e.desk = newDesk(vm.ID, disp, p.opts.MaxExecutors, p.log)
		if ex, ok := p.farm.(GuestExec); ok {
			e.desk.guest = &guestInput{ex: ex, vm: vm.ID, log: p.log, disp: disp}
		}
		if t, ok := p.farm.(CPUTimer); ok {
			a := guestActivity{t: t, vm: vm.ID}
			a.disk, _ = p.farm.(DiskCounter)
			e.desk.activity = a
		}
		p.log.Debug("desk opened", "vm", vm.ID, "op", "desk.open", "duration", time.Since(start).Round(time.Millisecond))
		return
	}
	if p.entries[e.id] == e {
		delete(p.entries, e.id) // the next Get retries
	}
	p.log.Warn("desk dial failed", "vm", vm.ID, "op", "desk.open", "duration", time.Since(start).Round(time.Millisecond), "err", e.err)
}

// WaitReset returns once a reset of vm id seen at or after 'since' has
// been applied to its desk (input released, control handed back), or the
// VM has died or been destroyed, or with ctx's error. A caller that reset the VM itself waits with it so that its
// next call never races the lifecycle event.
func (p *Pool) WaitReset(ctx context.Context, id string, since time.Time) error {
	for {
		p.mu.Lock()
		m, ok := p.resets[id]
		ch := p.applied
		p.mu.Unlock()
		if ok && (m.gone || !m.at.Before(since)) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("reset of vm %s not yet applied to its desk: %w", id, ctx.Err())
		}
	}
}

// Peek returns vm id's desk if it is open, without dialling.
func (p *Pool) Peek(id string) *Desk {
	p.mu.Lock()
	e := p.entries[id]
	p.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case <-e.ready:
		return e.desk
	default:
		return nil
	}
}

// Close closes every desk and stops following the farm's events.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	ids := make([]string, 0, len(p.entries))
	for id := range p.entries {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	// Drop first, so that dials in progress end with the reason rather
	// than a bare cancellation.
	for _, id := range ids {
		p.drop(id, &ClosedError{VM: id, Reason: "farm shutting down"})
	}
	p.cancel()
	<-p.loop
	p.drains.Wait()
}
