package atspi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/godbus/dbus/v5"
)

// The bounds of a walk, as OSWorld's server has them (desktop_env/server
// main.py MAX_DEPTH, MAX_WIDTH), and the cells scanned for Calc's first
// showing cell.
const (
	MaxDepth = 50
	MaxWidth = 1024
	calcScan = 500
	// MaxNodes bounds one walk's tree: a guest is hostile, and a program
	// there could show millions of objects to eat the host's memory. Real
	// desktops have a few thousand (docs/benchmarks.md).
	MaxNodes = 50000
)

// AT-SPI's D-Bus names (at-spi2-core xml/*.xml).
const (
	registryBus  = "org.a11y.atspi.Registry"
	registryPath = dbus.ObjectPath("/org/a11y/atspi/registry")
	ifRegistry   = "org.a11y.atspi.Registry"
	rootPath     = dbus.ObjectPath("/org/a11y/atspi/accessible/root")
	cachePath    = dbus.ObjectPath("/org/a11y/atspi/cache")
	ifAccessible = "org.a11y.atspi.Accessible"
	ifComponent  = "org.a11y.atspi.Component"
	ifText       = "org.a11y.atspi.Text"
	ifValue      = "org.a11y.atspi.Value"
	ifAction     = "org.a11y.atspi.Action"
	ifImage      = "org.a11y.atspi.Image"
	ifSelection  = "org.a11y.atspi.Selection"
	ifTable      = "org.a11y.atspi.Table"
	ifCache      = "org.a11y.atspi.Cache"
	ifApp        = "org.a11y.atspi.Application"
	ifProps      = "org.freedesktop.DBus.Properties"
)

// callTimeout bounds one call to an application. An application that lets
// one lapse is hung or far too slow, and is asked nothing more in this walk
// (its nodes so far stay in the tree): one frozen program must not use up
// the whole walk's budget.
var callTimeout = 5 * time.Second

// inFlight is how many calls a walk keeps outstanding to one application.
// The application answers them one at a time on its main loop; keeping it
// busy hides each round trip through the bus (and, from the host, through
// the guest's relay).
const inFlight = 64

// Stats counts what a walk asked.
type Stats struct {
	Apps, Nodes, Calls, CachedNodes int
	// Hung names the applications that let a call lapse (callTimeout).
	Hung []string
	// PerApp is each application's share, in the desktop's order.
	PerApp []AppStats
}

// AppStats is one application's part of a walk.
type AppStats struct {
	Name         string
	Nodes, Calls int
	Cached       bool // its tree came from Cache.GetItems
	CacheErr     string
	// Calc's sheets: cells probed, kept, and the time the scans took.
	CalcProbes, CalcCells int
	CalcScan              time.Duration
	Cache, Walk           time.Duration
	Build, Details        time.Duration
	// FromCache is how many of its nodes came from Cache.GetItems (the
	// rest were asked live), and Methods its calls by method.
	FromCache int
	Methods   map[string]int
	// Peer: its calls went to its own socket rather than through the
	// bus; PeerErr says why not when it has one.
	Peer    bool
	PeerErr string
	// Kept: its tree was its last walk's, which still stood (keep.go);
	// Calls are then the check's, and the rest the last walk's.
	Kept bool
	// Rebuilt counts the objects of a kept tree whose subtrees were
	// built again, their children having changed (mend.go).
	Rebuilt int
	// Unkept says why it was walked whole on a kept session: which
	// check of its last tree failed (keep.go's reuse), or why its last
	// walk was not kept (a web engine not vetted: Gecko's); "" on its
	// first walk.
	Unkept string
}

// objRef is an object's D-Bus reference: the application's bus name and
// the object's path.
type objRef struct {
	Name string
	Path dbus.ObjectPath
}

// item is what a walk knows of an object before its details: the fields of
// one entry of Cache.GetItems, or of the live calls that stand for it.
type item struct {
	ref    objRef
	index  int32 // in its parent; -1 when unknown
	count  int32 // children
	ifaces []string
	name   string
	role   uint32
	states [2]uint32
	parent dbus.ObjectPath
	cached bool // from Cache.GetItems
	cell   bool // a sheet's cell, made per request: child index of parent (calc.go)
	// bounds, when set, are its Value's minimum, maximum and increment,
	// known without asking it (a Calc cell's: calc.go); only its current
	// value is then asked.
	bounds *[3]float64
}

func (it *item) hasIface(s string) bool {
	for _, x := range it.ifaces {
		if x == s {
			return true
		}
	}
	return false
}

func (it *item) stateNames() []string {
	var out []string
	for i, name := range stateNames {
		if it.states[i/32]&(1<<(i%32)) != 0 && name != "" {
			out = append(out, name)
		}
	}
	return out
}

// managesDescendants: its children are made per request (a Calc sheet).
func (it *item) managesDescendants() bool {
	const managesDescendants = 31 // ATSPI_STATE_MANAGES_DESCENDANTS
	return it.states[managesDescendants/32]&(1<<(managesDescendants%32)) != 0
}

func (it *item) showing() bool {
	const showing = 25 // ATSPI_STATE_SHOWING
	return it.states[0]&(1<<showing) != 0
}

// cacheItem is one entry of Cache.GetItems since at-spi2-core 2.33:
// ((so)(so)(so)iiassusau).
type cacheItem struct {
	Ref, App, Parent objRef
	Index, Count     int32
	Ifaces           []string
	Name             string
	Role             uint32
	Desc             string
	States           []uint32
}

// cacheItemOld is the entry before: ((so)(so)(so)a(so)assusau), the
// children listed instead of an index and a count.
type cacheItemOld struct {
	Ref, App, Parent objRef
	Children         []objRef
	Ifaces           []string
	Name             string
	Role             uint32
	Desc             string
	States           []uint32
}

// Peers connects to an application's own D-Bus socket at addr (its
// Application.GetApplicationBusAddress), authenticated and ready for
// calls.
type Peers func(ctx context.Context, addr string) (*dbus.Conn, error)

// Walk reads the desktop's accessibility tree over conn, a connection to
// the AT-SPI bus. Every mode walks the same objects; full adds what only
// OSWorld's XML carries (attributes, values, actions), and text whether
// nodes' text is read. With peers (nil: none), each application that has
// a socket of its own is asked there, past the bus daemon. An application
// that does not answer is left out or cut short, never the walk.
func Walk(ctx context.Context, conn *dbus.Conn, mode Mode, peers Peers) (*Node, Stats, error) {
	return walk(ctx, conn, mode, peers, false, nil)
}

// walk is Walk, asking what it otherwise derives when askDerived
// (Options.AskDerived), and on a kept session when mm is not nil: its
// applications' trees are kept, and reused while they stand (keep.go),
// and their sockets stay open.
func walk(ctx context.Context, conn *dbus.Conn, mode Mode, peers Peers, askDerived bool, mm *memo) (*Node, Stats, error) {
	w := &walker{conn: conn, mode: mode, peers: peers, askDerived: askDerived, memo: mm, keptPeers: mm != nil}
	if mode != ModeOSWorld {
		// Only OSWorld's XML carries the attributes that tell a web
		// engine's nodes, whose trees change without events (keep.go):
		// Cua's trees are walked whole (TestE2EOSWorldImage: a kept Cua
		// tree never showed a new window's page). The terminal's mode
		// reads its text alone and names the rest.
		w.memo = nil
	}
	// An application's bridge (at-spi2-atk) makes its cache only once some
	// client listens for events, as screen readers and libatspi do: one
	// rare event, so the walk gets the cache without the applications
	// sending it anything. The registry announces the listener before it
	// answers, so each application has it queued before our first call;
	// it is dropped when this connection closes (at-spi2-core 2.46
	// atk-adaptor/bridge.c spi_atk_add_client, registryd RegisterEvent).
	// A kept session has registered for every event when it opened
	// (keep.go); the registry keeps each registration, so it asks once.
	if !w.keptPeers {
		_ = w.call(ctx, objRef{registryBus, registryPath}, ifRegistry+".RegisterEvent", []any{"window:desktop-create"})
	}
	var apps []objRef
	if err := w.call(ctx, objRef{registryBus, rootPath}, ifAccessible+".GetChildren", nil, &apps); err != nil {
		return nil, w.stats(), fmt.Errorf("list the desktop's applications: %w", err)
	}
	root := &Node{Role: "desktop frame"}
	kids := make([]*Node, len(apps))
	w.perApp = make([]AppStats, len(apps))
	var wg sync.WaitGroup
	for i, a := range apps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kids[i] = w.app(ctx, a, &w.perApp[i])
		}()
	}
	wg.Wait()
	for _, k := range kids {
		if k != nil {
			root.Children = append(root.Children, k)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, w.stats(), err
	}
	return root, w.stats(), nil
}

type walker struct {
	conn       *dbus.Conn
	peers      Peers
	mode       Mode
	askDerived bool
	memo       *memo // nil: nothing kept
	keptPeers  bool  // applications' sockets stay open (a kept session's)
	calls      atomic.Int64
	built      atomic.Int64 // nodes, against MaxNodes

	perApp []AppStats

	mu     sync.Mutex
	apps   int
	nodes  int
	cached int
	hung   []string
}

func (w *walker) stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{Apps: w.apps, Nodes: w.nodes, Calls: int(w.calls.Load()), CachedNodes: w.cached, Hung: w.hung, PerApp: w.perApp}
}

// call makes one method call on the bus and stores its reply in out.
func (w *walker) call(ctx context.Context, r objRef, method string, args []any, out ...any) error {
	return w.callOn(ctx, w.conn, r, method, args, out...)
}

// callOn makes one method call over conn.
func (w *walker) callOn(ctx context.Context, conn *dbus.Conn, r objRef, method string, args []any, out ...any) error {
	w.calls.Add(1)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	c := conn.Object(r.Name, r.Path).CallWithContext(ctx, method, 0, args...)
	if c.Err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%s on %s%s: %w", method, r.Name, r.Path, errCallTimeout)
		}
		return c.Err
	}
	if len(out) == 0 {
		return nil
	}
	return c.Store(out...)
}

var errCallTimeout = errors.New("no answer within the call timeout")

// appWalk is the walk of one application: its calls go through one
// semaphore, and once one lapses the application is hung and every later
// call fails at once.
type appWalk struct {
	w      *walker
	name   string
	peer   *dbus.Conn // the application's own socket, nil for the bus
	sem    chan struct{}
	hung   atomic.Bool
	calls  atomic.Int64
	st     *AppStats
	probes atomic.Int64 // Calc cells probed
	// actionNames maps the application's localized action names to
	// their names (GetName).
	actionNames sync.Map
	// vclMenus: the application is LibreOffice, whose menu objects of
	// one role share their Value bounds and their action's name
	// (menuBounds, menuAction).
	vclMenus bool
	roleMu   sync.Mutex
	byRole   map[string]*roleFact

	top      []*item // the application's children: its windows
	frames   []frameBox
	framesOK bool
	items    map[dbus.ObjectPath]*item
	kids     map[dbus.ObjectPath][]*item
	all      []*walked
	// snap is its cache as GetItems answered it, what a web engine's
	// kept tree is checked against (vet.go).
	snap map[dbus.ObjectPath]cacheFact

	mu      sync.Mutex
	methods map[string]int
	// detailing counts the nodes whose details are being asked.
	detailing sync.WaitGroup
}

// walked pairs a node with the object it came from.
type walked struct {
	node *Node
	it   *item
}

func (a *appWalk) call(ctx context.Context, r objRef, method string, args []any, out ...any) error {
	if a.hung.Load() {
		return errCallTimeout
	}
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-a.sem }()
	a.calls.Add(1)
	key := strings.TrimPrefix(method, "org.a11y.atspi.")
	if method == ifProps+".Get" && len(args) == 2 {
		prop, _ := args[1].(string)
		key = "Get " + prop
	}
	a.mu.Lock()
	a.methods[key]++
	a.mu.Unlock()
	err := a.w.callOn(ctx, a.conn(r.Name), r, method, args, out...)
	if errors.Is(err, errCallTimeout) && ctx.Err() == nil && !a.hung.Swap(true) {
		a.w.mu.Lock()
		a.w.hung = append(a.w.hung, a.name)
		a.w.mu.Unlock()
	}
	return err
}

func (w *walker) app(ctx context.Context, ref objRef, st *AppStats) *Node {
	if w.memo != nil {
		n, why := w.reuse(ctx, ref, st)
		if n != nil {
			return n
		}
		st.Unkept = why
		// What it reports from now on is against this walk.
		w.memo.take(ref.Name)
	}
	t0 := time.Now()
	a := w.newApp(ctx, ref, st)
	if a.peer != nil && !w.keptPeers {
		defer a.peer.Close() // a kept session's stay open
	}
	defer func() {
		st.Walk, st.Nodes, st.Calls = time.Since(t0), len(a.all), int(a.calls.Load())+1
		st.CalcProbes = int(a.probes.Load())
		for _, x := range a.all {
			if x.it.cached {
				st.FromCache++
			}
		}
		a.mu.Lock()
		st.Methods = a.methods
		st.Methods["Cache.GetItems"]++
		a.mu.Unlock()
	}()
	if err := a.loadCache(ctx, ref.Name); err != nil {
		st.CacheErr = err.Error()
	}
	st.Cache, st.Cached = time.Since(t0), len(a.items) > 0
	root := a.items[ref.Path]
	if root == nil {
		var err error
		if root, err = a.basics(ctx, ref); err != nil {
			return nil
		}
	}
	st.Name = root.name
	a.vclMenus = root.name == "soffice"
	if w.mode == ModeTerminal && root.name != "gnome-terminal-server" {
		// The terminal's text is all this mode reads: other programs
		// are named and left.
		return &Node{Role: roleName(root.role), Name: root.name}
	}
	t1 := time.Now()
	node := a.build(ctx, root, 1, "")
	st.Build = time.Since(t1)
	t2 := time.Now()
	a.detailing.Wait()
	st.Details = time.Since(t2) // the details still asked once built
	w.mu.Lock()
	w.apps++
	w.nodes += len(a.all)
	w.mu.Unlock()
	if w.memo != nil {
		a.keep(ctx, ref, node)
	}
	return node
}

// keep records the application's tree in the session's memo, for later
// walks to reuse while it stands (keep.go): only a whole tree, built in
// time with no call lapsed, with where its windows were.
func (a *appWalk) keep(ctx context.Context, ref objRef, node *Node) {
	switch {
	case ctx.Err() != nil || a.hung.Load():
		a.w.memo.notKept(ref.Name, "last walk: cut short (a call timed out, or the request ended)")
		return
	case a.w.built.Load() >= MaxNodes:
		a.w.memo.notKept(ref.Name, "last walk: past MaxNodes")
		return
	case !a.framesOK:
		a.w.memo.notKept(ref.Name, "last walk: a window's box unanswered")
		return
	}
	// Its windows as the build found them: a window opened since is
	// not in the tree.
	wins := make([]objRef, len(a.top))
	for i, it := range a.top {
		if it != nil {
			wins[i] = it.ref
		}
	}
	ka := &keptApp{mode: a.w.mode, name: ref.Name, node: node, stats: *a.st, office: a.vclMenus, windows: wins, frames: a.frames, byNode: make(map[*Node]*walked, len(a.all))}
	for _, x := range a.all {
		ka.byNode[x.node] = x
		// A web engine's tree (Chromium's, Gecko's: their nodes carry
		// an HTML tag or a class) changes without events (keep.go):
		// kept only where its cache vets it (vet.go).
		if x.node.attr("attr:tag") != "" || x.node.attr("attr:class") != "" {
			ka.web = true
		}
	}
	if ka.web {
		if why := a.vettable(ctx, ref); why != "" {
			a.w.memo.notKept(ref.Name, why)
			return
		}
		ka.snap = a.snap
	}
	ka.index()
	a.w.memo.keep(ref, ka)
}

// newApp starts the walk of one application: on its own socket, where it
// has one and the walk has peers.
func (w *walker) newApp(ctx context.Context, ref objRef, st *AppStats) *appWalk {
	a := &appWalk{w: w, name: ref.Name, sem: make(chan struct{}, inFlight), items: map[dbus.ObjectPath]*item{}, kids: map[dbus.ObjectPath][]*item{}, st: st, methods: map[string]int{}}
	if w.peers != nil && w.mode != ModeTerminal {
		if err := a.dialPeer(ctx, ref); err != nil {
			st.PeerErr = err.Error()
		} else {
			st.Peer = true
		}
	}
	return a
}

// loadCache fills items from the application's Cache.GetItems: its whole
// tree as it keeps it, in one call. An application without the cache (or
// whose cache is cut short) is walked live where the cache lacks nodes.
func (a *appWalk) loadCache(ctx context.Context, bus string) error {
	var c *dbus.Call
	func() {
		a.w.calls.Add(1)
		cctx, cancel := context.WithTimeout(ctx, 4*callTimeout) // one big reply
		defer cancel()
		c = a.conn(bus).Object(bus, cachePath).CallWithContext(cctx, ifCache+".GetItems", 0)
	}()
	if c.Err != nil {
		return c.Err
	}
	var items []cacheItem
	if err := c.Store(&items); err == nil {
		a.snap = snapshot(items)
		for _, ci := range items {
			it := &item{ref: ci.Ref, index: ci.Index, count: ci.Count, ifaces: ci.Ifaces, name: ci.Name, role: ci.Role, parent: ci.Parent.Path, cached: true}
			copy(it.states[:], ci.States)
			a.add(it, ci.Parent)
		}
		return nil
	}
	var old []cacheItemOld
	if err := c.Store(&old); err != nil {
		return fmt.Errorf("GetItems answered %s: %w", c.Body[0], err)
	}
	for _, ci := range old {
		it := &item{ref: ci.Ref, index: -1, count: int32(len(ci.Children)), ifaces: ci.Ifaces, name: ci.Name, role: ci.Role, parent: ci.Parent.Path, cached: true}
		copy(it.states[:], ci.States)
		a.add(it, ci.Parent)
	}
	// The old form orders children by the parent's list.
	for _, ci := range old {
		for i, ch := range ci.Children {
			if it := a.items[ch.Path]; it != nil && ch.Name == ci.Ref.Name {
				it.index = int32(i)
			}
		}
	}
	return nil
}

// conn is the connection for calls to objects of the bus name name: the
// application's own socket for its objects, when it has one; the bus for
// the rest (an embedded application's objects).
func (a *appWalk) conn(name string) *dbus.Conn {
	if a.peer != nil && name == a.name {
		return a.peer
	}
	return a.w.conn
}

// dialPeer connects to the application's own socket, where it has one.
func (a *appWalk) dialPeer(ctx context.Context, ref objRef) error {
	var addr string
	if err := a.call(ctx, ref, ifApp+".GetApplicationBusAddress", nil, &addr); err != nil {
		return fmt.Errorf("GetApplicationBusAddress: %w", err)
	}
	if addr == "" {
		return errors.New("GetApplicationBusAddress: no socket of its own")
	}
	c, err := a.w.peers(ctx, addr)
	if err != nil {
		return err
	}
	a.peer = c
	return nil
}
