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
		if managed(x) {
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

// maxRebuilt bounds the objects whose children one reuse builds again:
// past it the application is walked whole.
const maxRebuilt = 16

// rebuild puts in ka's tree the children that xs (objects of ka whose
// children changed) have now: each is asked its children, those the tree
// holds under the same reference are kept with their subtrees (what
// changed under them is in their own events), new ones are built and
// gone ones dropped. An object that manages its descendants (a Calc
// sheet, whose cells are made per request and never listed whole) is
// built again whole, as a walk builds it; the application itself gets
// its windows (rewindow). False when one does not answer, or the build
// did not finish: it is then walked whole.
func (a *appWalk) rebuild(ctx context.Context, ka *keptApp, xs []*walked) bool {
	// Only the outermost sheets: a sheet built again holds the rest.
	in := make(map[*walked]bool, len(xs))
	for _, x := range xs {
		in[x] = true
	}
	var tops []*walked
	for _, x := range xs {
		top := true
		for up := ka.parent[x]; up != nil && managed(x); up = ka.parent[up] {
			if in[up] && managed(up) {
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
		_ = a.loadCache(ctx, a.name) // new subtrees from it where it can
	}
	var whole []*walked
	var built []*Node
	for _, x := range tops {
		if ka.parent[x] == nil {
			// The application's own children: its windows.
			var wins []objRef
			if a.call(ctx, x.it.ref, ifAccessible+".GetChildren", nil, &wins) != nil || !a.rewindow(ctx, ka, wins) {
				return false
			}
			continue
		}
		depth, flag := 1, ""
		for up := ka.parent[x]; up != nil; up = ka.parent[up] {
			depth++
			if up.node.Role == "document spreadsheet" {
				flag = "calc"
			}
		}
		if managed(x) {
			it := a.items[x.it.ref.Path]
			if it == nil {
				var err error
				if it, err = a.basics(ctx, x.it.ref); err != nil {
					return false
				}
			}
			it.index, it.parent, it.bounds = x.it.index, x.it.parent, x.it.bounds
			whole = append(whole, x)
			built = append(built, a.build(ctx, it, depth, flag))
			continue
		}
		if depth >= MaxDepth {
			continue // a walk builds none of its children
		}
		if x.node.Role == "document spreadsheet" {
			flag = "calc"
		}
		var refs []objRef
		if a.call(ctx, x.it.ref, ifAccessible+".GetChildren", nil, &refs) != nil {
			return false
		}
		a.rechild(ctx, ka, x, refs, depth+1, flag)
		x.it.count = int32(len(refs))
	}
	a.detailing.Wait()
	if a.hung.Load() || ctx.Err() != nil || a.w.built.Load() >= MaxNodes {
		return false
	}
	for i, x := range whole {
		ka.drop(x.node)
		*x.node = *built[i]
	}
	for _, y := range a.all {
		for i, n := range built {
			if y.node == n {
				y.node = whole[i].node
			}
		}
		ka.byNode[y.node] = y
	}
	ka.index()
	return true
}

// managed is whether x manages its descendants.
func managed(x *walked) bool { return x.it.managesDescendants() }

// drop takes n's subtree out of ka's objects.
func (ka *keptApp) drop(n *Node) {
	delete(ka.byNode, n)
	for _, k := range n.Children {
		ka.drop(k)
	}
}

// rechild makes refs x's children: those x held under the same reference
// kept, new ones built at depth (their details still coming: the caller
// waits on a.detailing), and the subtrees of those gone dropped. A child
// that does not answer is left out, as a walk leaves it.
func (a *appWalk) rechild(ctx context.Context, ka *keptApp, x *walked, refs []objRef, depth int, flag string) {
	refs = refs[:min(len(refs), MaxWidth)]
	old := map[objRef]*Node{}
	for _, k := range x.node.Children {
		if y := ka.byNode[k]; y != nil {
			old[y.it.ref] = k
		}
	}
	kids := make([]*Node, len(refs))
	var wg sync.WaitGroup
	for i, r := range refs {
		if k := old[r]; k != nil {
			kids[i] = k
			delete(old, r)
			continue
		}
		if r.Path == "" || r.Path == nullPath {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := a.items[r.Path]
			if it == nil || r.Name != a.name {
				var err error
				if it, err = a.basics(ctx, r); err != nil {
					return
				}
			}
			it.index = int32(i)
			kids[i] = a.build(ctx, it, depth, flag)
		}()
	}
	wg.Wait()
	for _, k := range old {
		ka.drop(k)
	}
	x.node.Children = slices.DeleteFunc(kids, func(n *Node) bool { return n == nil })
}

// rewindow puts the application's windows as it now lists them (wins) in
// ka's tree, as rechild does for any object, and where the new ones are
// on the screen (Chromium opens its status bubble as a window of its
// own, with no event, as a link gets the focus). False when one does not
// answer.
func (a *appWalk) rewindow(ctx context.Context, ka *keptApp, wins []objRef) bool {
	top := ka.byNode[ka.node]
	if top == nil {
		return false
	}
	a.rechild(ctx, ka, top, wins, 2, "")
	a.detailing.Wait()
	var added []frameBox
	for _, y := range a.all {
		if slices.Contains(wins, y.it.ref) && y.it.hasIface(ifComponent) {
			added = append(added, frameBox{ref: y.it.ref})
		}
	}
	boxes, ok := a.w.frameBoxes(ctx, added)
	if !ok || a.hung.Load() || ctx.Err() != nil {
		return false
	}
	for i := range added {
		added[i].box = boxes[i]
	}
	var frames []frameBox
	for _, f := range ka.frames {
		if slices.Contains(wins, f.ref) {
			frames = append(frames, f)
		}
	}
	ka.frames = append(frames, added...)
	ka.windows = wins
	top.it.count = int32(len(wins))
	for _, y := range a.all {
		ka.byNode[y.node] = y
	}
	ka.index()
	return true
}

// reboxed asks every object of ka's tree on the screen, but a sheet's
// cells, its box again, and LibreOffice's its text: LibreOffice's status
// bar fields move and resize as one of them changes, and its formula
// bar's text follows the cursor, without an event (bench/a11y's kept
// tree against a fresh one after a number typed into Calc, 2026-12-03).
// A sheet's cells move with their column's or row's edge, which
// gridMoved checks (calc.go). False when one does not answer.
func (a *appWalk) reboxed(ctx context.Context, ka *keptApp, stale map[*walked]change) bool {
	built := make(map[*walked]bool, len(a.all))
	for _, y := range a.all {
		built[y] = true
	}
	ok := true
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, x := range ka.byPath {
		if x.node.Box == nil || stale[x]&changedFacts != 0 || built[x] {
			continue
		}
		if up := ka.parent[x]; up != nil && managed(up) {
			continue // a cell
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var e struct{ X, Y, W, H int32 }
			err := a.call(ctx, x.it.ref, ifComponent+".GetExtents", []any{uint32(0)}, &e)
			var text string
			asked := ka.office && x.it.hasIface(ifText)
			if err == nil && asked {
				err = a.call(ctx, x.it.ref, ifText+".GetText", []any{int32(0), int32(-1)}, &text)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ok = false
				return
			}
			if b := [4]int32{e.X, e.Y, e.W, e.H}; b != *x.node.Box {
				x.node.setBox(&b)
			}
			if asked {
				x.node.Text = objectChars.Replace(text)
			}
		}()
	}
	wg.Wait()
	return ok && !a.hung.Load() && ctx.Err() == nil
}
