package vmm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// hypervisor is the narrow slice of libvirt that deskfarm uses. Keeping it
// small documents exactly which libvirt calls the farm depends on.
//
// Every call takes a context: when ctx ends while the call is outstanding the
// call returns ctx's error at once (the RPC itself finishes in the background
// when libvirtd answers or the connection drops; go-libvirt has no way to
// cancel one). Calls that are not idempotent are never re-sent after a
// reconnect: the first attempt may have reached libvirtd.
type hypervisor interface {
	defineDomain(ctx context.Context, xml string) (libvirt.Domain, error)
	lookupDomain(ctx context.Context, name string) (libvirt.Domain, error)
	listDomains(ctx context.Context) ([]libvirt.Domain, error)
	startDomain(ctx context.Context, d libvirt.Domain, paused bool) error
	destroyDomain(ctx context.Context, d libvirt.Domain) error
	undefineDomain(ctx context.Context, d libvirt.Domain) error
	domainState(ctx context.Context, d libvirt.Domain) (libvirt.DomainState, error)
	// domainCPUTime is the domain's cumulative vCPU time, summed over its
	// vCPUs (virDomainGetInfo's cpuTime).
	domainCPUTime(ctx context.Context, d libvirt.Domain) (time.Duration, error)
	// domainDiskRequests is the number of read and write requests the
	// domain's disk has served (virDomainBlockStats of vda).
	domainDiskRequests(ctx context.Context, d libvirt.Domain) (int64, error)
	domainMetadata(ctx context.Context, d libvirt.Domain, ns string) (string, error)
	setDomainMetadata(ctx context.Context, d libvirt.Domain, key, ns, xml string) error
	// monitorHMP runs a human monitor command; never retried (loadvm,
	// savevm and cont change the guest).
	monitorHMP(ctx context.Context, d libvirt.Domain, cmd string) (string, error)
	// monitorQMP runs a QMP command (JSON) and returns QEMU's reply as
	// QEMU wrote it, an "error" member included; never retried.
	monitorQMP(ctx context.Context, d libvirt.Domain, cmd string) (string, error)
	// agentCommand runs a guest agent command. The agent's own timeout is
	// taken from ctx's deadline (at most agentCallTimeout). It is re-sent
	// after a reconnect only when idempotent says so.
	agentCommand(ctx context.Context, d libvirt.Domain, cmd string, idempotent bool) (string, error)
	// agentEvents delivers the guest agent lifecycle events of d
	// (VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE: libvirt opened or closed its
	// agent connection) from the moment it returns until ctx ends; then, or
	// when the libvirt connection drops, the channel is closed.
	agentEvents(ctx context.Context, d libvirt.Domain) (<-chan agentState, error)
	hostInfo(ctx context.Context) (memKiB uint64, cpus int, err error)
	// capabilities returns libvirt's capabilities XML (virConnectGetCapabilities).
	capabilities(ctx context.Context) (string, error)
	// health is nil while the connection is up, and a
	// *HypervisorDownError while it is being redialled.
	health() error
	// events delivers the lifecycle events of every domain, and a
	// domainEvent with Resync set after each reconnect: events may have been
	// missed while the connection was down. It is closed by close.
	events() <-chan domainEvent
	close() error
}

// domainEvent is one libvirt lifecycle event (virDomainEventType and its
// detail), or a resync marker.
type domainEvent struct {
	Name   string
	Type   libvirt.DomainEventType
	Detail int32
	// Resync: the connection was re-established; the domains' states must
	// be read again.
	Resync bool
}

// agentState is the state an agent lifecycle event reports: libvirt has
// opened (agentConnected) or closed (agentDisconnected) its connection to the
// guest agent.
type agentState = libvirt.ConnectDomainEventAgentLifecycleState

const (
	agentConnected    = libvirt.ConnectDomainEventAgentLifecycleStateConnected
	agentDisconnected = libvirt.ConnectDomainEventAgentLifecycleStateDisconnected
)

// maxRPCString is libvirt's REMOTE_STRING_MAX (remote_protocol.x, libvirt
// 9.0): the longest string one RPC argument may hold, an agent command
// included. libvirtd refuses a longer message by dropping the whole
// connection, which would fail every other call in flight.
const maxRPCString = 4 << 20

// ErrMessageTooLarge means a request would exceed libvirt's RPC message
// limit; it is refused before it is sent.
var ErrMessageTooLarge = fmt.Errorf("%w: libvirt RPC message limit", ErrTooLarge)

// libvirtConn is a hypervisor over go-libvirt that survives libvirtd
// restarts. One goroutine (run) owns the connection: it dials, registers for
// lifecycle events, waits for the connection to drop and redials with
// backoff. Callers never dial and never sleep under a lock: they wait for
// the next connection on a channel, bounded by their ctx.
type libvirtConn struct {
	socket string
	log    *slog.Logger
	dial   func() (*libvirt.Libvirt, error)

	mu sync.Mutex
	l  *libvirt.Libvirt // nil while (re)dialling
	up chan struct{}    // closed while l is set; replaced when l drops
	// downSince is when l dropped (zero while up), dialErr the last
	// redial's failure: health's answer.
	downSince time.Time
	dialErr   error

	// agentEvs: l delivers agent lifecycle events; agentSubs are their
	// subscribers, all ended when l drops.
	agentEvs  bool
	agentSubs map[*agentSub]struct{}

	evs    chan domainEvent
	done   chan struct{} // closed by close
	exited chan struct{} // closed when run returns
	once   sync.Once
}

var _ hypervisor = (*libvirtConn)(nil)

// DefaultLibvirtSocket is libvirtd's read-write socket on Debian.
const DefaultLibvirtSocket = "/run/libvirt/libvirt-sock"

// Redial backoff after libvirtd went away: its socket comes back within a
// few seconds of a restart.
const (
	redialMin = 100 * time.Millisecond
	redialMax = 2 * time.Second
)

// dialLibvirt connects once (so a missing libvirtd is reported at once) and
// then keeps the connection up in the background.
func dialLibvirt(socket string, log *slog.Logger) (*libvirtConn, error) {
	c := &libvirtConn{socket: socket, log: log, up: make(chan struct{}),
		evs: make(chan domainEvent, 64), done: make(chan struct{}), exited: make(chan struct{}),
		agentSubs: map[*agentSub]struct{}{}}
	c.dial = func() (*libvirt.Libvirt, error) {
		l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(socket), dialers.WithLocalTimeout(5*time.Second)))
		if err := l.ConnectToURI(libvirt.QEMUSystem); err != nil {
			return nil, fmt.Errorf("connect to libvirtd at %s: %w", socket, err)
		}
		return l, nil
	}
	l, err := c.dial()
	if err != nil {
		return nil, err
	}
	go c.run(l)
	return c, nil
}

// run owns the connection until close.
func (c *libvirtConn) run(l *libvirt.Libvirt) {
	defer close(c.exited)
	defer close(c.evs)
	first := true
	for {
		start := time.Now()
		c.serve(l, !first)
		first = false
		// A connection that failed at once (say, events refused) is not
		// redialled in a tight loop.
		wait := time.Duration(0)
		if time.Since(start) < time.Second {
			wait = redialMin
		}
		l = c.redial(wait)
		if l == nil {
			return
		}
	}
}

// serve publishes l to callers, forwards its lifecycle and agent events and
// returns when l drops or the conn is closed.
func (c *libvirtConn) serve(l *libvirt.Libvirt, reconnected bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs, err := l.LifecycleEvents(ctx)
	if err != nil {
		// Without events a dead VM is still found by the synchronous
		// checks; try again on a fresh connection.
		c.log.Error("subscribe to libvirt lifecycle events", "op", "libvirt-events", "err", err)
		l.Disconnect()
		return
	}
	// Agent events only shorten resets' waits (awaitAgentReopen): without
	// them resets wait on pings alone.
	aevs, err := l.SubscribeEvents(ctx, libvirt.DomainEventIDAgentLifecycle, libvirt.OptDomain{})
	if err != nil {
		c.log.Warn("subscribe to libvirt agent events; resets wait on agent pings alone", "op", "libvirt-events", "err", err)
		aevs = nil
	}
	defer func() {
		// go-libvirt's forwarder blocks on each event until it is taken.
		cancel()
		if aevs != nil {
			for range aevs {
			}
		}
	}()
	c.mu.Lock()
	c.l = l
	c.agentEvs = aevs != nil
	c.downSince, c.dialErr = time.Time{}, nil
	close(c.up)
	c.mu.Unlock()
	if reconnected {
		c.log.Info("libvirt reconnected", "op", "libvirt-connect", "socket", c.socket)
		c.emit(domainEvent{Resync: true})
	}
	defer func() {
		c.mu.Lock()
		c.l = nil
		c.agentEvs = false
		c.downSince = time.Now()
		c.up = make(chan struct{})
		// Events missed while down cannot be delivered: subscribers see
		// their channel closed.
		for sub := range c.agentSubs {
			c.dropAgentSubLocked(sub)
		}
		c.mu.Unlock()
	}()
	for {
		select {
		case e, ok := <-aevs:
			if !ok {
				aevs = nil
				continue
			}
			if ev, ok := e.(*libvirt.DomainEventCallbackAgentLifecycleMsg); ok {
				c.fanAgentEvent(ev)
			}
		case ev, ok := <-evs:
			if !ok {
				select {
				case <-c.done:
				default:
					c.log.Warn("libvirt connection lost, reconnecting", "op", "libvirt-connect", "socket", c.socket)
				}
				if l.IsConnected() {
					l.Disconnect()
				}
				return
			}
			c.emit(domainEvent{Name: ev.Dom.Name, Type: libvirt.DomainEventType(ev.Event), Detail: ev.Detail})
		case <-l.Disconnected():
			c.log.Warn("libvirt connection lost, reconnecting", "op", "libvirt-connect", "socket", c.socket)
			cancel()
			for range evs { // let go-libvirt's forwarder finish
			}
			return
		case <-c.done:
			// Disconnect first, then end the subscriptions. go-libvirt
			// deregisters a subscription's callback when its ctx ends; a
			// DeregisterAny that libvirtd dispatches while it handles the
			// ConnectClose of the same client races its own cleanup of that
			// client's callbacks. Done the other way round, libvirtd 9.0
			// logged "could not find event callback N for deletion" and
			// "domain event callback N+1 not registered" on every test run,
			// and once died there (CI, TestE2ELibvirtReconnect). Once
			// disconnected, the deregistrations fail locally and never
			// reach libvirtd, which drops a closed client's callbacks itself.
			l.Disconnect()
			cancel()
			for range evs {
			}
			if aevs != nil {
				for range aevs {
				}
				aevs = nil
			}
			return
		}
	}
}

func (c *libvirtConn) emit(ev domainEvent) {
	select {
	case c.evs <- ev:
	case <-c.done:
	}
}

// redial dials with backoff, after wait, until it succeeds or the conn is
// closed (nil).
func (c *libvirtConn) redial(wait time.Duration) *libvirt.Libvirt {
	delay := redialMin
	for {
		select {
		case <-c.done:
			return nil
		default:
		}
		select {
		case <-c.done:
			return nil
		case <-time.After(wait):
		}
		wait = 0
		l, err := c.dial()
		if err == nil {
			return l
		}
		c.log.Debug("redial libvirtd failed", "op", "libvirt-connect", "err", err, "retry_in", delay)
		c.mu.Lock()
		c.dialErr = err
		c.mu.Unlock()
		wait = delay
		delay = min(delay*2, redialMax)
	}
}

// errClosed is returned by calls after close.
var errClosed = errors.New("libvirt connection closed")

// client returns the current connection, waiting for a redial within ctx.
func (c *libvirtConn) client(ctx context.Context) (*libvirt.Libvirt, error) {
	for {
		c.mu.Lock()
		l, up := c.l, c.up
		c.mu.Unlock()
		if l != nil && l.IsConnected() {
			return l, nil
		}
		select {
		case <-up:
		case <-c.done:
			return nil, errClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for libvirtd at %s: %w", c.socket, ctx.Err())
		}
	}
}

func (c *libvirtConn) events() <-chan domainEvent { return c.evs }

func (c *libvirtConn) health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.l != nil || c.downSince.IsZero() {
		return nil
	}
	return &HypervisorDownError{Socket: c.socket, Since: c.downSince, Err: c.dialErr}
}

func (c *libvirtConn) close() error {
	c.once.Do(func() { close(c.done) })
	<-c.exited
	return nil
}

// call runs f on a connected client and returns when f does or ctx ends. An
// idempotent f that failed because the connection dropped is run once more on
// the next connection; any other f is not, since libvirtd may have carried it
// out before the connection dropped.
func call[T any](ctx context.Context, c *libvirtConn, idempotent bool, f func(l *libvirt.Libvirt) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		l, err := c.client(ctx)
		if err != nil {
			return zero, err
		}
		v, err := callCtx(ctx, l, f)
		if err == nil || ctx.Err() != nil || !connLost(ctx, l, err) {
			return v, err
		}
		if !idempotent || attempt > 0 {
			return zero, fmt.Errorf("%w (libvirt connection lost during the call; not retried)", err)
		}
	}
}

// connLost reports whether err came from the connection dropping rather than
// from libvirtd's answer. A write can fail (EPIPE) before go-libvirt's reader
// has noticed the drop, so a transport error waits briefly for it.
func connLost(ctx context.Context, l *libvirt.Libvirt, err error) bool {
	if libvirtCode(err) != -1 {
		return false // libvirtd answered with an error
	}
	select {
	case <-l.Disconnected():
		return true
	case <-ctx.Done():
		return false
	case <-time.After(time.Second):
		return false
	}
}

// callCtx runs f and waits for it or ctx. f keeps running after ctx ends
// until libvirtd answers or the connection drops (go-libvirt then fails
// every outstanding call), so no goroutine outlives the connection.
func callCtx[T any](ctx context.Context, l *libvirt.Libvirt, f func(l *libvirt.Libvirt) (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f(l)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f(l)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (c *libvirtConn) defineDomain(ctx context.Context, xml string) (libvirt.Domain, error) {
	// Defining the same XML twice is harmless, but a retry after a lost
	// reply could redefine a domain deleted meanwhile; not retried.
	return call(ctx, c, false, func(l *libvirt.Libvirt) (libvirt.Domain, error) {
		return l.DomainDefineXMLFlags(xml, libvirt.DomainDefineValidate)
	})
}

func (c *libvirtConn) lookupDomain(ctx context.Context, name string) (libvirt.Domain, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) (libvirt.Domain, error) { return l.DomainLookupByName(name) })
}

func (c *libvirtConn) listDomains(ctx context.Context) ([]libvirt.Domain, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) ([]libvirt.Domain, error) {
		ds, _, err := l.ConnectListAllDomains(1, libvirt.ConnectListDomainsActive|libvirt.ConnectListDomainsInactive)
		return ds, err
	})
}

func (c *libvirtConn) startDomain(ctx context.Context, d libvirt.Domain, paused bool) error {
	var flags uint32
	if paused {
		flags = uint32(libvirt.DomainStartPaused)
	}
	_, err := call(ctx, c, false, func(l *libvirt.Libvirt) (struct{}, error) {
		_, err := l.DomainCreateWithFlags(d, flags)
		return struct{}{}, err
	})
	return err
}

func (c *libvirtConn) destroyDomain(ctx context.Context, d libvirt.Domain) error {
	// Destroying twice only reports "not running" the second time.
	_, err := call(ctx, c, true, func(l *libvirt.Libvirt) (struct{}, error) {
		return struct{}{}, l.DomainDestroyFlags(d, libvirt.DomainDestroyDefault)
	})
	return err
}

func (c *libvirtConn) undefineDomain(ctx context.Context, d libvirt.Domain) error {
	_, err := call(ctx, c, true, func(l *libvirt.Libvirt) (struct{}, error) {
		return struct{}{}, l.DomainUndefineFlags(d, libvirt.DomainUndefineSnapshotsMetadata|libvirt.DomainUndefineNvram)
	})
	return err
}

func (c *libvirtConn) domainState(ctx context.Context, d libvirt.Domain) (libvirt.DomainState, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) (libvirt.DomainState, error) {
		s, _, err := l.DomainGetState(d, 0)
		return libvirt.DomainState(s), err
	})
}

func (c *libvirtConn) domainCPUTime(ctx context.Context, d libvirt.Domain) (time.Duration, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) (time.Duration, error) {
		_, _, _, _, ns, err := l.DomainGetInfo(d)
		return time.Duration(ns), err
	})
}

func (c *libvirtConn) domainDiskRequests(ctx context.Context, d libvirt.Domain) (int64, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) (int64, error) {
		rd, _, wr, _, _, err := l.DomainBlockStats(d, "vda")
		return rd + wr, err
	})
}

func (c *libvirtConn) domainMetadata(ctx context.Context, d libvirt.Domain, ns string) (string, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) (string, error) {
		return l.DomainGetMetadata(d, int32(libvirt.DomainMetadataElement), libvirt.OptString{ns}, libvirt.DomainAffectCurrent)
	})
}

func (c *libvirtConn) setDomainMetadata(ctx context.Context, d libvirt.Domain, key, ns, xml string) error {
	// Setting the same element again gives the same result: idempotent.
	_, err := call(ctx, c, true, func(l *libvirt.Libvirt) (struct{}, error) {
		// Live and config: a running domain's persistent definition must carry
		// the state too, or a restart of deskfarm would read a stale one.
		return struct{}{}, l.DomainSetMetadata(d, int32(libvirt.DomainMetadataElement),
			libvirt.OptString{xml}, libvirt.OptString{key}, libvirt.OptString{ns},
			libvirt.DomainAffectLive|libvirt.DomainAffectConfig)
	})
	return err
}

// qemuMonitorHMP is VIR_DOMAIN_QEMU_MONITOR_COMMAND_HMP.
const qemuMonitorHMP = 1

func (c *libvirtConn) monitorHMP(ctx context.Context, d libvirt.Domain, cmd string) (string, error) {
	return call(ctx, c, false, func(l *libvirt.Libvirt) (string, error) {
		return l.QEMUDomainMonitorCommand(d, cmd, qemuMonitorHMP)
	})
}

func (c *libvirtConn) monitorQMP(ctx context.Context, d libvirt.Domain, cmd string) (string, error) {
	return call(ctx, c, false, func(l *libvirt.Libvirt) (string, error) {
		return l.QEMUDomainMonitorCommand(d, cmd, 0)
	})
}

// agentTimeout is the agent timeout (whole seconds, as libvirt takes it) for
// a call under ctx: what is left of ctx's deadline, at most agentCallTimeout,
// at least 1 s.
func agentTimeout(ctx context.Context) int32 {
	d := agentCallTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	secs := int32((d + time.Second - 1) / time.Second)
	return max(secs, 1)
}

func (c *libvirtConn) agentCommand(ctx context.Context, d libvirt.Domain, cmd string, idempotent bool) (string, error) {
	if err := checkRPCString("agent command", len(cmd)); err != nil {
		return "", err
	}
	secs := agentTimeout(ctx)
	return call(ctx, c, idempotent, func(l *libvirt.Libvirt) (string, error) {
		r, err := l.QEMUDomainAgentCommand(d, cmd, secs, 0)
		if err != nil {
			return "", err
		}
		if len(r) == 0 {
			return "", errors.New("empty agent reply")
		}
		return r[0], nil
	})
}

// agentSub is one agentEvents subscription: the agent events of one domain.
type agentSub struct {
	name string
	ch   chan agentState
}

// agentEvents adds a subscriber to the connection's one agent-event
// registration. libvirtd refuses a second registration for the same event
// on one connection ("event callback already tracked"), so two VMs
// resetting at once cannot each register their own.
func (c *libvirtConn) agentEvents(ctx context.Context, d libvirt.Domain) (<-chan agentState, error) {
	sub := &agentSub{name: d.Name, ch: make(chan agentState, 8)}
	c.mu.Lock()
	if c.l == nil || !c.agentEvs {
		c.mu.Unlock()
		return nil, fmt.Errorf("agent events of %s: libvirt connection down or without agent events", d.Name)
	}
	c.agentSubs[sub] = struct{}{}
	c.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-c.done:
		}
		c.mu.Lock()
		c.dropAgentSubLocked(sub)
		c.mu.Unlock()
	}()
	return sub.ch, nil
}

// dropAgentSubLocked ends a subscription; a second call does nothing.
func (c *libvirtConn) dropAgentSubLocked(sub *agentSub) {
	if _, ok := c.agentSubs[sub]; ok {
		delete(c.agentSubs, sub)
		close(sub.ch)
	}
}

// fanAgentEvent passes an agent event to the domain's subscribers. It never
// blocks the connection's goroutine: a subscriber reads until the first
// "connected", and its buffer holds more than a reset sends.
func (c *libvirtConn) fanAgentEvent(ev *libvirt.DomainEventCallbackAgentLifecycleMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for sub := range c.agentSubs {
		if sub.name != ev.Dom.Name {
			continue
		}
		select {
		case sub.ch <- agentState(ev.State):
		default:
		}
	}
}

// checkRPCString refuses a string argument libvirtd would not accept.
func checkRPCString(what string, n int) error {
	if n > maxRPCString {
		return fmt.Errorf("%s of %d bytes: %w of %d bytes per string (refused before sending)", what, n, ErrMessageTooLarge, maxRPCString)
	}
	return nil
}

func (c *libvirtConn) hostInfo(ctx context.Context) (uint64, int, error) {
	type info struct {
		mem  uint64
		cpus int
	}
	i, err := call(ctx, c, true, func(l *libvirt.Libvirt) (info, error) {
		_, mem, cpus, _, _, _, _, _, err := l.NodeGetInfo()
		return info{mem, int(cpus)}, err
	})
	return i.mem, i.cpus, err
}

func (c *libvirtConn) capabilities(ctx context.Context) (string, error) {
	return call(ctx, c, true, func(l *libvirt.Libvirt) (string, error) { return l.ConnectGetCapabilities() })
}

// libvirtCode returns the libvirt error number in err, or -1.
func libvirtCode(err error) libvirt.ErrorNumber {
	var e libvirt.Error
	if errors.As(err, &e) {
		return libvirt.ErrorNumber(e.Code)
	}
	return -1
}
