package atspi

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// Mending a kept tree: what changed under one object is built again, not
// the whole application. A Calc sheet tells every change of its data as a
// change of its table's model (LibreOffice's ATK wrapper sends
// model-changed for AccessibleTableModelChangeType::UPDATE, atklistener.cxx)
// and its cursor's move as a new active descendant, and a page tells a
// node's new children on that node: walking LibreOffice again for a
// number typed into a cell took 17.6-21.0 s (docs/benchmarks.md), of
// which the sheet's scan and cells were about half.

// index derives ka's maps from its tree and byNode: its objects by path,
// their parents, its documents, its sheets' cells, and, for a web
// engine, the objects its cache lacks outside its pages.
func (ka *keptApp) index() {
	ka.byPath = make(map[dbus.ObjectPath]*walked, len(ka.byNode))
	ka.parent = make(map[*walked]*walked, len(ka.byNode))
	ka.live, ka.docs, ka.cells = nil, nil, nil
	ka.nodes = 0
	var visit func(n *Node, up *walked, inDoc bool)
	visit = func(n *Node, up *walked, inDoc bool) {
		x := ka.byNode[n]
		if x == nil {
			return
		}
		ka.nodes++
		ka.parent[x] = up
		if x.it.ref.Name == ka.name {
			ka.byPath[x.it.ref.Path] = x
		}
		if strings.HasPrefix(n.Role, "document") {
			d := docCheck{ref: x.it.ref, count: x.it.count}
			if n.Box != nil {
				d.box = *n.Box
			}
			ka.docs = append(ka.docs, d)
		}
		// A page's objects follow its events and the rechecks; the
		// browser's own views outside its cache change without
		// events (the status bubble's window, its label).
		inDoc = inDoc || n.Role == "document web"
		if ka.web && !inDoc && !x.it.cached {
			ka.live = append(ka.live, x)
		}
		const managesDescendants = 31 // ATSPI_STATE_MANAGES_DESCENDANTS
		if x.it.states[managesDescendants/32]&(1<<(managesDescendants%32)) != 0 {
			if ka.cells == nil {
				ka.cells = map[dbus.ObjectPath]map[int32]*walked{}
			}
			cells := map[int32]*walked{}
			for _, k := range n.Children {
				if c := ka.byNode[k]; c != nil && c.it.index >= 0 {
					cells[c.it.index] = c
				}
			}
			ka.cells[x.it.ref.Path] = cells
		}
		for _, k := range n.Children {
			visit(k, x, inDoc)
		}
	}
	visit(ka.node, nil, false)
}

// maxRebuilt bounds the objects whose subtrees one reuse builds again:
// past it the application is walked whole.
const maxRebuilt = 16

// rebuild builds again the subtrees of xs (objects of ka whose children
// changed) and puts them in ka's tree in place of the old. False when one
// is the application itself, or the build did not finish: it is then
// walked whole.
func (a *appWalk) rebuild(ctx context.Context, ka *keptApp, xs []*walked) bool {
	// Only the outermost: a subtree built again holds the rest.
	in := make(map[*walked]bool, len(xs))
	for _, x := range xs {
		in[x] = true
	}
	var tops []*walked
	for _, x := range xs {
		top := true
		for up := ka.parent[x]; up != nil; up = ka.parent[up] {
			if in[up] {
				top = false
				break
			}
		}
		if top {
			tops = append(tops, x)
		}
	}
	if len(tops) > maxRebuilt {
		return false
	}
	if len(a.items) == 0 {
		_ = a.loadCache(ctx, a.name) // the subtrees from it where it can
	}
	tops = a.sameChildren(ctx, ka, tops)
	if tops == nil {
		return false
	}
	built := make([]*Node, len(tops))
	for i, x := range tops {
		if ka.parent[x] == nil {
			return false // the application's own children: walk it
		}
		depth, flag := 1, ""
		for up := ka.parent[x]; up != nil; up = ka.parent[up] {
			depth++
			if up.node.Role == "document spreadsheet" {
				flag = "calc"
			}
		}
		it := a.items[x.it.ref.Path]
		if it == nil {
			var err error
			if it, err = a.basics(ctx, x.it.ref); err != nil {
				return false
			}
		}
		it.index, it.parent, it.bounds = x.it.index, x.it.parent, x.it.bounds
		built[i] = a.build(ctx, it, depth, flag)
	}
	a.detailing.Wait()
	if a.hung.Load() || ctx.Err() != nil || a.w.built.Load() >= MaxNodes {
		return false
	}
	for i, x := range tops {
		var drop func(n *Node)
		drop = func(n *Node) {
			delete(ka.byNode, n)
			for _, k := range n.Children {
				drop(k)
			}
		}
		drop(x.node)
		*x.node = *built[i]
	}
	for _, y := range a.all {
		for i, n := range built {
			if y.node == n {
				y.node = tops[i].node
			}
		}
		ka.byNode[y.node] = y
	}
	ka.index()
	return true
}

// sameChildren leaves out of xs the objects whose children are the ones
// the tree holds, in order: a child that came and went between two walks
// (the editing object LibreOffice adds to a sheet's document while a cell
// is typed into) changed nothing there, and what changed under the
// children themselves is in their own events. An object that manages its
// descendants is never listed whole, and stays. Nil when one does not
// answer.
func (a *appWalk) sameChildren(ctx context.Context, ka *keptApp, xs []*walked) []*walked {
	keep := make([]bool, len(xs))
	failed := false
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, x := range xs {
		const managesDescendants = 31 // ATSPI_STATE_MANAGES_DESCENDANTS
		if x.it.states[managesDescendants/32]&(1<<(managesDescendants%32)) != 0 {
			keep[i] = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var refs []objRef
			err := a.call(ctx, x.it.ref, ifAccessible+".GetChildren", nil, &refs)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = true
				return
			}
			refs = refs[:min(len(refs), MaxWidth)]
			if len(refs) != len(x.node.Children) {
				keep[i] = true
				return
			}
			for j, k := range x.node.Children {
				if y := ka.byNode[k]; y == nil || y.it.ref != refs[j] {
					keep[i] = true
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed {
		return nil
	}
	out := []*walked{}
	for i, x := range xs {
		if keep[i] {
			out = append(out, x)
		}
	}
	return out
}

// rewindow puts the application's windows as it now lists them (wins) in
// ka's tree: those it held are kept, new ones built, and the trees of
// those gone dropped (Chromium opens its status bubble as a window of
// its own, with no event, as a link gets the focus). False when a new one
// does not answer.
func (a *appWalk) rewindow(ctx context.Context, ka *keptApp, wins []objRef) bool {
	if len(wins) > MaxWidth {
		return false
	}
	old := map[objRef]*Node{}
	for _, k := range ka.node.Children {
		if x := ka.byNode[k]; x != nil {
			old[x.it.ref] = k
		}
	}
	kids := make([]*Node, len(wins))
	var added []frameBox
	for i, r := range wins {
		if k := old[r]; k != nil {
			kids[i] = k
			delete(old, r)
			continue
		}
		it, err := a.basics(ctx, r)
		if err != nil {
			return false
		}
		it.index = int32(i)
		kids[i] = a.build(ctx, it, 2, "")
		if it.hasIface(ifComponent) {
			added = append(added, frameBox{ref: r})
		}
	}
	a.detailing.Wait()
	boxes, ok := a.w.frameBoxes(ctx, added)
	if !ok || a.hung.Load() || ctx.Err() != nil {
		return false
	}
	for i := range added {
		added[i].box = boxes[i]
	}
	var drop func(n *Node)
	drop = func(n *Node) {
		delete(ka.byNode, n)
		for _, k := range n.Children {
			drop(k)
		}
	}
	for _, k := range old {
		drop(k)
	}
	var frames []frameBox
	for _, f := range ka.frames {
		if slices.Contains(wins, f.ref) {
			frames = append(frames, f)
		}
	}
	ka.frames = append(frames, added...)
	ka.node.Children = slices.DeleteFunc(kids, func(n *Node) bool { return n == nil })
	ka.windows = wins
	for _, y := range a.all {
		ka.byNode[y.node] = y
	}
	ka.index()
	return true
}
