package atspi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// Vetted trees: a web engine's kept tree checked against what it holds now.
//
// Chromium's tree changes without events (keep.go: its status bubble's
// label a change late, a page attached to its view with none), so its
// events alone cannot keep it. But at-spi2-atk answers Cache.GetItems from
// the objects as they are at the call (atk-adaptor/adaptors/
// cache-adaptor.c reads each one's name, role, states, count and place when
// it writes the reply), and Chromium's whole tree is in its cache (every
// node of the bench page's 613 came from it). So before a kept tree of
// Chromium is reused, its cache is asked again, in one call, and compared
// with the walk's:
//   - an object added or gone, or moved (another parent, index or count of
//     children): walked again;
//   - another name, role, description, states or interfaces: the object's
//     facts are asked again, as for an event;
//   - the facts the cache does not hold and a page changes without an
//     event, its attributes (a class set by a script) and its box (a
//     scroll moves every node under it, and sends no event per node), are
//     asked again of every object: two calls a node at most, against the
//     nine of a walk;
//   - its text and values follow their events (text-changed, value
//     changed), which Chromium sends for every change of an object's text.
//
// Not vetted, so walked whole: Gecko (Thunderbird renamed a button's
// action with no event and no change in its cache's facts, measured in
// TestE2EOSWorldImage), and a web engine whose tree holds objects its
// cache lacks.

// cacheFact is what GetItems says of one object.
type cacheFact struct {
	parent       dbus.ObjectPath
	index, count int32
	name, desc   string
	role         uint32
	states       [2]uint32
	ifaces       string
}

// snapshot is GetItems' answer by path.
func snapshot(items []cacheItem) map[dbus.ObjectPath]cacheFact {
	out := make(map[dbus.ObjectPath]cacheFact, len(items))
	for _, ci := range items {
		f := cacheFact{parent: ci.Parent.Path, index: ci.Index, count: ci.Count, name: ci.Name, desc: ci.Desc, role: ci.Role, ifaces: strings.Join(ci.Ifaces, " ")}
		copy(f.states[:], ci.States)
		out[ci.Ref.Path] = f
	}
	return out
}

// vetToolkit is the one toolkit whose web trees are vetted (its
// Application.ToolkitName).
const vetToolkit = "Chromium"

// vettable says why the application a walked, a web engine, may not be
// kept as a vetted tree; "" when it may: Chromium, which keeps a cache.
func (a *appWalk) vettable(ctx context.Context, ref objRef) string {
	if a.snap == nil {
		return "last walk: a web engine without a cache to vet"
	}
	var v dbus.Variant
	if a.call(ctx, ref, ifProps+".Get", []any{ifApp, "ToolkitName"}, &v) != nil {
		return "last walk: a web engine whose toolkit did not answer"
	}
	if tk, _ := v.Value().(string); tk != vetToolkit {
		return fmt.Sprintf("last walk: a web engine not vetted (toolkit %q; only %s's is)", tk, vetToolkit)
	}
	return ""
}

// vet asks the application's cache again and compares it with ka's: the
// objects under which one came, went or moved are added to reshaped, the
// objects whose other facts changed to stale. Objects built in this reuse
// (fresh), and objects whose parent is not in the tree (nor then in a
// fresh walk's), are left alone. False when an object whose facts changed
// is not in the tree.
func (a *appWalk) vet(ctx context.Context, ka *keptApp, fresh map[*walked]bool, stale map[*walked]change, reshaped map[*walked]bool) bool {
	a.snap = nil
	if a.loadCache(ctx, a.name) != nil {
		return false
	}
	// under marks the object at path p as one whose children changed:
	// the application's own children are its windows, compared as a
	// list (keep.go).
	under := func(p dbus.ObjectPath) {
		if x := ka.byPath[p]; x != nil && !fresh[x] && ka.parent[x] != nil {
			reshaped[x] = true
		}
	}
	for p, was := range ka.snap {
		if _, ok := a.snap[p]; !ok {
			under(was.parent)
		}
	}
	for p, now := range a.snap {
		was, ok := ka.snap[p]
		switch {
		case !ok:
			under(now.parent)
		case now.parent != was.parent || now.index != was.index:
			under(now.parent)
			under(was.parent)
		case now.count != was.count:
			under(p)
		case now != was:
			x := ka.byPath[p]
			if x == nil {
				return false // in the cache, not in the tree (past MaxDepth): walk it
			}
			if !fresh[x] {
				stale[x] |= changedFacts
			}
		}
	}
	return true
}

// vetMore adds to stale what a web engine's tree asks again besides what
// changed: the objects outside its cache and its pages, and the ancestors
// of each object whose facts changed.
func (ka *keptApp) vetMore(stale map[*walked]change) {
	for _, x := range ka.live {
		stale[x] |= changedFacts
	}
	// A page's text is its objects' and their children's: Chromium
	// tells a change of a text node's text (text-changed, name) on that
	// node alone, and its paragraph's text changed with it
	// (TestKeptChromium). So an object's ancestors are asked again with
	// it.
	for x, c := range stale {
		if c&changedFacts == 0 {
			continue
		}
		for up := ka.parent[x]; up != nil && stale[up]&changedFacts == 0; up = ka.parent[up] {
			stale[up] |= changedFacts
		}
	}
}

// recheck asks every object of ka's tree not in stale the facts a page
// changes without an event: its states (a scroll takes the showing state
// from what leaves the screen, with an event only for some: a link's
// text, measured in TestKeptChromium), its attributes (a class set by a
// script) and its box. An object whose states changed is asked again
// whole. False when one does not answer.
func (a *appWalk) recheck(ctx context.Context, ka *keptApp, stale map[*walked]change) bool {
	ok := true
	moved := map[*walked]change{}
	built := make(map[*walked]bool, len(a.all))
	for _, y := range a.all {
		built[y] = true
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, x := range ka.byPath {
		if stale[x]&changedFacts != 0 || built[x] {
			continue // asked whole
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var (
				states []uint32
				attrs  map[string]string
				e      struct{ X, Y, W, H int32 }
				errs   [3]error
				cw     sync.WaitGroup
			)
			for i, f := range []func() error{
				func() error { return a.call(ctx, x.it.ref, ifAccessible+".GetState", nil, &states) },
				func() error { return a.call(ctx, x.it.ref, ifAccessible+".GetAttributes", nil, &attrs) },
				func() error {
					if x.node.Box == nil {
						return nil
					}
					return a.call(ctx, x.it.ref, ifComponent+".GetExtents", []any{uint32(0)}, &e)
				},
			} {
				cw.Add(1)
				go func() { defer cw.Done(); errs[i] = f() }()
			}
			cw.Wait()
			var st [2]uint32
			copy(st[:], states)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errs[0] != nil || errs[1] != nil || errs[2] != nil:
				ok = false
			case st != x.it.states:
				moved[x] = changedFacts
			default:
				x.node.setAttrs(attrs)
				if b := [4]int32{e.X, e.Y, e.W, e.H}; x.node.Box != nil && b != *x.node.Box {
					x.node.setBox(&b)
				}
			}
		}()
	}
	wg.Wait()
	if !ok || a.hung.Load() || ctx.Err() != nil {
		return false
	}
	if len(moved) == 0 {
		return true
	}
	ok, recount := a.refresh(ctx, ka, moved)
	return ok && (len(recount) == 0 || a.rebuild(ctx, ka, recount))
}

// setAttrs puts attrs in n's attr: attributes, which come first, sorted.
func (n *Node) setAttrs(attrs map[string]string) {
	var head []Attr
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if k != "" {
			head = append(head, Attr{"attr:" + k, attrs[k]})
		}
	}
	i := 0
	for i < len(n.Attrs) && strings.HasPrefix(n.Attrs[i].Key, "attr:") {
		i++
	}
	if slices.Equal(head, n.Attrs[:i]) {
		return
	}
	n.Attrs = append(head, n.Attrs[i:]...)
}
