package atspi

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/deskfarm/deskfarm/vmm"
)

// Kept sessions: a VM's accessibility session outlives its walk, and so do
// the trees of its applications. An agent observes after every step, and a
// step changes one application, or none: under TCG LibreOffice's part of
// a walk took 16.9 s of the 18.2 s p50 (docs/benchmarks.md) however little
// of it had changed. So the session listens to AT-SPI's events, which
// every application's bridge sends for every change of its objects once
// a client has registered for them (as screen readers do), and logs, per
// application, the objects they name. An application is then answered
// from its last tree when nothing it reported changed the tree's shape,
// with the objects its events named asked again (only the box, when that
// alone moved). The rest are walked as before.
//
// What makes a kept tree sound:
//   - The log is started anew as an application's walk begins, so a
//     change during the walk is in the next one's log.
//   - Before a tree is reused, the application is pinged through the bus
//     (org.freedesktop.DBus.Peer.Ping): D-Bus keeps one sender's messages
//     in order, and the session logs signals as its connection reads
//     them, so every event the application sent before it answered is in
//     the log by the time its answer is read.
//   - Children changed (or visible data: a Calc sheet's cells, which are
//     made per request; an active descendant; a selection) under an
//     object in the tree: that object lists its children again, and
//     new ones are built (mend.go), the rest kept; a sheet is built
//     again whole. The application is walked whole when it logged more
//     than maxLogged objects, and, when its tree holds a sheet, on an
//     event about an object it cannot place: neither a cell kept under
//     another path (the focused cell losing the focus is told under a
//     path no walk saw, measured), nor gone, nor under an object of the
//     tree (placeCells).
//   - A window opened or moved sends no event: the application's list of
//     windows is asked again (new ones built, gone ones dropped), their
//     boxes compared (a moved window has the application walked again),
//     and each document's count of children and box (a document that
//     differs lists its children again).
//   - A column widened or a row made taller moves a sheet's cells with
//     no event: each sheet's first row and first column of cells kept
//     are asked their boxes again, and a sheet whose cells moved is
//     built again (gridMoved).
//   - LibreOffice's ranges on the screen (its scroll bars: a column
//     widened changes their maximum with no event) are asked again at
//     every reuse, as are its boxes and texts (reboxed).
//   - Web engines change without events in ways measured: Chromium (its
//     status bubble's window and its label's URL a change late, a page
//     shown again once its window is raised, a new window's page
//     attaching to its view, the showing state of what a scroll moves
//     off the screen) and Gecko (Thunderbird's buttons' action names).
//     Their nodes carry an HTML tag or a class. Chromium's tree is kept
//     vetted (vet.go): its cache compared, its views outside the cache
//     and the ancestors of what changed asked again, every object's
//     states, attributes and box asked again. Gecko's is walked whole,
//     on the kept session.
//   - An object on the screen without a box did not answer it when last
//     asked (a cell past its 15 s lease, or one LibreOffice disposed of):
//     it is asked whole again, a sheet's cell under a new object from
//     its sheet; a cell that still does not answer has the application
//     walked again (CI at 1f1c532 kept a B1 on the screen without one).
//   - Only OSWorld's XML is kept: Cua's tree carries no attributes, by
//     which the walk tells a web engine's nodes.
//   - A reset (or a revert to a named snapshot) returns the guest's RAM,
//     relay included, to another time: the VM's reset count is read
//     before and after each walk, and a session from before a reset is
//     closed unused. So is one whose walk failed or found an application
//     hung.
//
// What it costs: with events registered, every application sends them
// for every change, through the bus to the relay and the host, also
// between walks; the relay runs in the guest until keepIdle passes
// without a walk. Walks of one VM take turns, as before.
const (
	// keepIdle closes a session after this long without a walk. OSWorld
	// observes after every step (the harness pauses 2 s after each
	// action; an agent's model takes seconds to tens of seconds).
	keepIdle = 2 * time.Minute
	// keepMax bounds a session's life: the relay's own alarm, and the
	// host opens a new session once a session is older than
	// keepMax-keepIdle.
	keepMax = 30 * time.Minute
)

// eventKinds are the events a kept session registers for, with the
// registry (which tells every application's bridge) and as match rules
// on its bus connection: all of AT-SPI's object, window, focus and
// document events, and the bridges' cache changes.
var eventKinds = []struct{ register, iface string }{
	{"object:", "org.a11y.atspi.Event.Object"},
	{"window:", "org.a11y.atspi.Event.Window"},
	{"focus:", "org.a11y.atspi.Event.Focus"},
	{"document:", "org.a11y.atspi.Event.Document"},
	{"", ifCache},
}

// resetCounter is the part of the VM layer that says how often a VM has
// been reset (a vmm.Farm has it). A guest without it gets no kept session.
type resetCounter interface {
	Get(ctx context.Context, id string) (vmm.VM, error)
}

// keeper holds the kept sessions, by VM.
type keeper struct {
	mu       sync.Mutex
	sessions map[string]*keptVM
}

var kept = &keeper{sessions: map[string]*keptVM{}}

// keptVM is one VM's kept session and trees. turn is held by the walk
// that uses them (or by what closes them).
type keptVM struct {
	vm   string
	turn chan struct{}

	// Under turn:
	g      Guest
	s      *session
	memo   *memo
	resets int
	born   time.Time
	idle   *time.Timer
	gone   bool // out of the keeper's map: take another
}

// take returns vm's entry with its turn held.
func (kp *keeper) take(ctx context.Context, vm string) (*keptVM, error) {
	for {
		kp.mu.Lock()
		k := kp.sessions[vm]
		if k == nil {
			k = &keptVM{vm: vm, turn: make(chan struct{}, 1)}
			kp.sessions[vm] = k
		}
		kp.mu.Unlock()
		select {
		case k.turn <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("accessibility port of vm %s: busy with another walk until %w", vm, ctx.Err())
		}
		if !k.gone {
			return k, nil
		}
		<-k.turn
	}
}

// shut closes k's session and forgets its trees; k's turn is held.
func (k *keptVM) shut() {
	if k.idle != nil {
		k.idle.Stop()
		k.idle = nil
	}
	if k.s != nil {
		k.s.close()
		k.s = nil
	}
	k.memo = nil
}

// remove shuts k and takes it out of the keeper; k's turn is held.
func (kp *keeper) remove(k *keptVM) {
	k.shut()
	kp.mu.Lock()
	if kp.sessions[k.vm] == k {
		delete(kp.sessions, k.vm)
	}
	kp.mu.Unlock()
	k.gone = true
}

// drop ends vm's kept session, if it has one, once its walk is done.
func (kp *keeper) drop(vm string) {
	kp.mu.Lock()
	k := kp.sessions[vm]
	kp.mu.Unlock()
	if k == nil {
		return
	}
	k.turn <- struct{}{}
	if !k.gone {
		kp.remove(k)
	}
	<-k.turn
}

// expire ends k's session when no walk has come for keepIdle; a walk
// under way re-arms the timer when it is done.
func (kp *keeper) expire(k *keptVM, t *time.Timer) {
	select {
	case k.turn <- struct{}{}:
	default:
		return
	}
	if !k.gone && k.idle == t {
		kp.remove(k)
	}
	<-k.turn
}

// walk walks vm on its kept session, opening one when there is none, or
// when the VM was reset since it opened. A walk that a reset overtook is
// walked again, once, on a new session.
func (kp *keeper) walk(ctx context.Context, g Guest, rc resetCounter, vm string, m Mode) (*Node, Stats, error) {
	k, err := kp.take(ctx, vm)
	if err != nil {
		return nil, Stats{}, err
	}
	defer func() { <-k.turn }()
	for try := 0; ; try++ {
		before, err := rc.Get(ctx, vm)
		if err != nil {
			kp.remove(k)
			return nil, Stats{}, err
		}
		if k.idle != nil {
			k.idle.Stop()
			k.idle = nil
		}
		if k.s != nil && (!sameGuest(k.g, g) || k.resets != before.Resets || time.Since(k.born) > keepMax-2*keepIdle || !k.s.alive()) {
			k.shut()
		}
		if k.s == nil {
			mm := &memo{events: map[string]*eventLog{}, apps: map[string]*keptApp{}}
			s, err := openSession(ctx, g, vm, mm)
			if err == nil {
				if err = listen(ctx, s.bus); err != nil {
					s.close()
				}
			}
			if err != nil {
				kp.remove(k)
				return nil, Stats{}, err
			}
			k.g, k.s, k.memo, k.resets, k.born = g, s, mm, before.Resets, time.Now()
		}
		root, st, err := walk(ctx, k.s.bus, m, k.s.peers, false, k.memo)
		after, aerr := rc.Get(context.WithoutCancel(ctx), vm)
		switch {
		case err != nil || aerr != nil || len(st.Hung) > 0:
			kp.remove(k)
		case after.Resets != k.resets:
			// A reset under the walk: what it read may be the old
			// desktop's.
			k.shut()
			if try == 0 {
				continue
			}
		default:
			var t *time.Timer
			t = time.AfterFunc(keepIdle, func() { kp.expire(k, t) })
			k.idle = t
		}
		if root != nil {
			// The kept trees stay the session's: the next walk
			// mends them while this one's is rendered.
			root = root.clone()
		}
		return root, st, err
	}
}

// clone is a copy of n's tree.
func (n *Node) clone() *Node {
	c := *n
	c.States, c.Attrs = slices.Clone(n.States), slices.Clone(n.Attrs)
	if n.Box != nil {
		b := *n.Box
		c.Box = &b
	}
	c.Children = nil
	for _, k := range n.Children {
		c.Children = append(c.Children, k.clone())
	}
	return &c
}

// sameGuest is whether a and b are the same VM layer (a farm restarted in
// the process is another).
func sameGuest(a, b Guest) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// listen registers the session for every event (eventKinds).
func listen(ctx context.Context, bus *dbus.Conn) error {
	for _, e := range eventKinds {
		if err := bus.AddMatchSignalContext(ctx, dbus.WithMatchInterface(e.iface)); err != nil {
			return fmt.Errorf("listen for %s events: %w", e.iface, err)
		}
		if e.register == "" {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		c := bus.Object(registryBus, registryPath).CallWithContext(cctx, ifRegistry+".RegisterEvent", 0, e.register)
		cancel()
		if c.Err != nil {
			return fmt.Errorf("register for %s events: %w", e.register, c.Err)
		}
	}
	return nil
}

// memo is a kept session's events, logged by sender, and its
// applications' last trees, by bus name. It is the bus connection's
// signal handler: godbus calls it as it reads each signal, before any
// reply read after it.
type memo struct {
	mu     sync.Mutex
	events map[string]*eventLog
	apps   map[string]*keptApp
	// unkept says why an application's last walk was not kept, for the
	// next walk's AppStats.Unkept.
	unkept map[string]string
}

// notKept records why name's last walk was not kept.
func (mm *memo) notKept(name, why string) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if mm.unkept == nil {
		mm.unkept = map[string]string{}
	}
	if len(mm.unkept) >= maxSenders {
		clear(mm.unkept)
	}
	mm.unkept[name] = why
}

// eventLog is what one application reported since its log was last taken.
type eventLog struct {
	changed  map[dbus.ObjectPath]change // objects whose own facts changed
	reshaped map[dbus.ObjectPath]bool   // objects whose children changed
	overflow bool                       // more than maxLogged objects: walk it all
}

// change says which of an object's facts an event changed.
type change uint8

const (
	changedBox   change = 1 << iota // its box alone (BoundsChanged)
	changedFacts                    // anything else the tree carries
)

// maxLogged bounds an application's log between walks: a guest is hostile,
// and past this many objects a walk of the whole application costs less
// than asking each again.
const maxLogged = 256

// maxSenders bounds the applications logged at once (a desktop has a
// handful: the osworld bench's has five).
const maxSenders = 256

// keptApp is an application's last tree.
type keptApp struct {
	mode   Mode
	name   string // its bus name
	node   *Node
	stats  AppStats
	office bool // LibreOffice (appWalk.vclMenus)
	web    bool // a web engine's: vetted against its cache (vet.go)
	// snap is a web engine's cache as its tree was last vetted against
	// it (vet.go).
	snap    map[dbus.ObjectPath]cacheFact
	windows []objRef // its children, as it listed them
	frames  []frameBox
	// byNode is every walked object of the tree; the rest below is
	// derived from it and the tree (index).
	byNode map[*Node]*walked

	nodes  int
	byPath map[dbus.ObjectPath]*walked // its own objects in the tree
	parent map[*walked]*walked
	live   []*walked // a web engine's objects asked again at every reuse (vet.go)
	// docs are its documents as the walk found them: a page Chromium
	// shows again (its window raised) comes back without an event
	// (measured in TestE2EOSWorldImage: the kept tree kept the covered
	// window's empty document), so each is asked its children's count
	// and its box again.
	docs []docCheck
	// cells: its tree holds objects that manage their descendants (a
	// Calc sheet), whose children are made anew on each request: an
	// event on an object not in the tree may be about one in it under
	// another path (the focused cell losing its focus, measured in
	// TestE2EOSWorldImage), so any such event is placed among the
	// cells kept, by sheet and index (placeCells), or has it walked
	// again.
	cells map[dbus.ObjectPath]map[int32]*walked
}

// frameBox is a top-level window and where it was on the screen.
type frameBox struct {
	ref objRef
	box [4]int32
}

// DeliverSignal logs an application's event: the object it names, and
// whether it changed the object's own facts (a name, a state, a text, a
// value, a box) or its children. Events that follow from others, or
// change nothing the tree carries, are left out: an object that goes
// defunct, or gets a parent, is also in its parent's children-changed; a
// caret's move, and GTK's own properties (widget, renderer), are in no
// tree. Those are also what a walk itself makes a toolkit send, as it
// makes the objects it asks for (gtk3-widget-factory: 343 widget, 315
// defunct, 83 accessible-parent events in its first walks).
func (mm *memo) DeliverSignal(iface, member string, sig *dbus.Signal) {
	var detail string
	if len(sig.Body) > 0 {
		detail, _ = sig.Body[0].(string)
	}
	if !strings.HasPrefix(iface, "org.a11y.atspi.Event.") {
		return // the bridges' cache changes: their parents say so
	}
	var reshape bool
	what := changedFacts
	switch iface + "." + member {
	case "org.a11y.atspi.Event.Object.StateChanged":
		if detail == "defunct" {
			return
		}
	case "org.a11y.atspi.Event.Object.PropertyChange":
		switch detail {
		case "accessible-name", "accessible-description", "accessible-value", "accessible-role":
		default:
			return
		}
	case "org.a11y.atspi.Event.Object.BoundsChanged":
		what = changedBox
	case "org.a11y.atspi.Event.Object.TextCaretMoved":
		return
	case "org.a11y.atspi.Event.Object.ChildrenChanged",
		"org.a11y.atspi.Event.Object.VisibleDataChanged",
		"org.a11y.atspi.Event.Object.ActiveDescendantChanged",
		"org.a11y.atspi.Event.Object.ModelChanged",
		"org.a11y.atspi.Event.Object.SelectionChanged",
		"org.a11y.atspi.Event.Window.Create",
		"org.a11y.atspi.Event.Window.Destroy",
		"org.a11y.atspi.Event.Window.Reparent":
		reshape = true
	}
	mm.mu.Lock()
	defer mm.mu.Unlock()
	l := mm.events[sig.Sender]
	if l == nil {
		if len(mm.events) >= maxSenders {
			// Events from more connections than a desktop has
			// applications: the guest floods. Every kept tree is
			// dropped, so each is walked again, and the logs start
			// over.
			clear(mm.events)
			clear(mm.apps)
			clear(mm.unkept)
		}
		l = &eventLog{changed: map[dbus.ObjectPath]change{}, reshaped: map[dbus.ObjectPath]bool{}}
		mm.events[sig.Sender] = l
	}
	if l.overflow {
		return
	}
	if reshape {
		l.reshaped[sig.Path] = true
	} else {
		l.changed[sig.Path] |= what
	}
	if len(l.changed)+len(l.reshaped) > maxLogged {
		l.overflow = true
		l.changed, l.reshaped = nil, nil
	}
}

// take returns name's log and starts a new one.
func (mm *memo) take(name string) *eventLog {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	l := mm.events[name]
	delete(mm.events, name)
	if l == nil {
		l = &eventLog{}
	}
	return l
}

// keep records ref's tree.
func (mm *memo) keep(ref objRef, ka *keptApp) {
	mm.mu.Lock()
	mm.apps[ref.Name] = ka
	delete(mm.unkept, ref.Name)
	mm.mu.Unlock()
}
