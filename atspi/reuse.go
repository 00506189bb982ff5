package atspi

// Reuse: a kept tree answered again, the objects its events named asked
// again, its windows and documents checked (keep.go says what makes it
// sound; mend.go, calc.go and vet.go mend it).

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// reuse answers ref from its last tree when that still stands, with the
// objects its events named asked again; nil when it must be walked, with
// why (AppStats.Unkept): the check that failed, or why its last walk was
// not kept; "" when it was never walked. Its calls are w's, and a's
// for the objects asked again.
func (w *walker) reuse(ctx context.Context, ref objRef, st *AppStats) (*Node, string) {
	mm := w.memo
	mm.mu.Lock()
	ka := mm.apps[ref.Name]
	if ka != nil && ka.mode == w.mode {
		delete(mm.apps, ref.Name) // kept again below, or walked anew
	}
	why := mm.unkept[ref.Name]
	mm.mu.Unlock()
	if ka == nil || ka.mode != w.mode {
		return nil, why
	}
	t0 := time.Now()
	calls := w.calls.Load()
	// Through the bus, where the application's events travel: its
	// answer comes after them.
	if w.call(ctx, objRef{ref.Name, rootPath}, "org.freedesktop.DBus.Peer.Ping", nil) != nil {
		return nil, "ping"
	}
	l := mm.take(ref.Name)
	if l.overflow {
		return nil, "overflow"
	}
	// Objects whose children changed: their subtrees are built again
	// (mend.go).
	reshaped := map[*walked]bool{}
	for p := range l.reshaped {
		if p == ref.Path {
			return nil, "reshaped" // its windows: walk it
		}
		if x := ka.byPath[p]; x != nil {
			reshaped[x] = true
		}
	}
	// Its windows: the same ones (an application may open one without
	// an event: Chromium's status bubble, measured), where they were (a
	// move sends none).
	a := w.newApp(ctx, ref, &AppStats{})
	a.vclMenus = ka.office
	var wins []objRef
	if w.call(ctx, ref, ifAccessible+".GetChildren", nil, &wins) != nil {
		return nil, "windows"
	}
	fresh := map[*walked]bool{}
	if !slices.Equal(wins, ka.windows) {
		if !a.rewindow(ctx, ka, wins) {
			return nil, "windows"
		}
		for _, y := range a.all {
			fresh[y] = true
		}
		st.Rebuilt++
	}
	boxes, ok := w.frameBoxes(ctx, ka.frames)
	if !ok {
		return nil, "frames"
	}
	for i, f := range ka.frames {
		if boxes[i] != f.box {
			return nil, "moved" // a window moved
		}
	}
	moved, ok := w.docsMoved(ctx, ka.docs)
	if !ok {
		return nil, "documents"
	}
	for _, d := range moved {
		x := ka.byPath[d.Path]
		if x == nil {
			return nil, "documents"
		}
		reshaped[x] = true
	}
	stale := map[*walked]change{}
	var unknown []dbus.ObjectPath
	for p, c := range l.changed {
		if x := ka.byPath[p]; x != nil {
			stale[x] = c
		} else if ka.cells != nil {
			unknown = append(unknown, p)
		}
	}
	// A sheet's cells under other paths (calc.go).
	if len(unknown) > 0 {
		if ok, what := a.placeCells(ctx, ka, unknown, stale, reshaped); !ok {
			return nil, "cells: " + what
		}
	}
	// A sheet's cells that moved with no event (calc.go).
	if ka.cells != nil {
		sheets, ok := a.gridMoved(ctx, ka, reshaped)
		if !ok {
			return nil, "cells: a sheet's edge cells did not answer their box"
		}
		for _, x := range sheets {
			reshaped[x] = true
		}
	}
	// A web engine's tree: its cache compared (vet.go).
	if ka.web && !a.vet(ctx, ka, fresh, stale, reshaped) {
		return nil, "cache"
	}
	if len(reshaped) > 0 {
		xs := slices.Collect(maps.Keys(reshaped))
		if !a.rebuild(ctx, ka, xs) {
			return nil, "rebuild"
		}
		for x := range stale {
			if ka.byNode[x.node] != x {
				delete(stale, x) // built again
			}
		}
		st.Rebuilt += len(xs)
	}
	if ka.web {
		ka.vetMore(stale)
	}
	// An object on the screen without a box did not answer it when last
	// asked (a cell past its lease): asked again, as a fresh walk would.
	// And LibreOffice's scroll bars take a new range with no event (a
	// column widened: the horizontal one's maximum 46, then 44, in
	// TestE2EOSWorldImage): its ranges on the screen are asked again.
	// Only those: every object on the screen with a Value (its toolbars'
	// buttons have one, telling their checked state, which has events)
	// was about 1,070 calls more a walk there.
	for _, x := range ka.byPath {
		lost := x.node.Box == nil && a.wantsBox(x)
		ranged := ka.office && x.node.Box != nil && x.it.hasIface(ifValue) && rangeRoles[x.node.Role]
		if lost || ranged {
			stale[x] |= changedFacts
		}
	}
	if len(stale) > 0 {
		ok, recount := a.refresh(ctx, ka, stale)
		if !ok {
			return nil, "refresh"
		}
		if len(recount) > 0 {
			if !a.rebuild(ctx, ka, recount) {
				return nil, "rebuild"
			}
			st.Rebuilt += len(recount)
		}
	}
	if ka.web {
		if !a.recheck(ctx, ka, stale) {
			return nil, "recheck"
		}
		ka.snap = a.snap
	} else if !a.reboxed(ctx, ka, stale) {
		return nil, "recheck"
	}
	ka.index() // its documents' counts and boxes as now asked
	rebuilt := st.Rebuilt
	*st = ka.stats
	st.Rebuilt = rebuilt
	st.Kept, st.Walk, st.Calls, st.Methods, st.Nodes = true, time.Since(t0), int(w.calls.Load()-calls), nil, ka.nodes
	w.mu.Lock()
	w.apps++
	w.nodes += ka.nodes
	w.mu.Unlock()
	// Against MaxNodes: the nodes built in this reuse are counted.
	w.built.Add(int64(ka.nodes - len(a.all)))
	mm.keep(ref, ka)
	return ka.node, "" // the walk hands out a copy (keeper.walk)
}

// rangeRoles are the roles whose Value is a range over content, not a
// state: a scroll bar's maximum follows what it scrolls.
var rangeRoles = map[string]bool{"scroll bar": true, "slider": true, "spin button": true, "progress bar": true, "level bar": true}

// refresh asks each of stale's objects again what changed, and puts it in
// its node, its children left as they are: only its box when that alone
// changed, else all its facts. False when one is gone; those whose
// children came or went are returned, to be built again.
func (a *appWalk) refresh(ctx context.Context, ka *keptApp, stale map[*walked]change) (bool, []*walked) {
	ok := true
	var recount []*walked
	cell := make(map[*walked]*walked) // a cell's sheet
	for x := range stale {
		if up := ka.parent[x]; up != nil && managed(up) {
			cell[x] = up
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for x, c := range stale {
		if c == changedBox && x.node.Box == nil {
			continue // not on the screen: no box to move
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c == changedBox {
				var e struct{ X, Y, W, H int32 }
				err := a.call(ctx, x.it.ref, ifComponent+".GetExtents", []any{uint32(0)}, &e)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					ok = false
					return
				}
				x.node.setBox(&[4]int32{e.X, e.Y, e.W, e.H})
				return
			}
			it, n, lost, err := a.ask(ctx, x, x.it.ref)
			if (err != nil || lost) && cell[x] != nil {
				// A sheet's cell, asked under the object an event
				// or an earlier walk handed out, which may be past
				// its lease (build.go's build) or disposed of: CI at
				// 1f1c532 kept a B1 on the screen without its box.
				// Asked again under a new object, as a fresh walk
				// asks it. Any other object is the one a fresh
				// walk asks, so a box it lost is lost there too.
				if r, found := a.childAt(ctx, cell[x].it.ref, int64(x.it.index)); found && r.Name == a.name {
					it, n, lost, err = a.ask(ctx, x, r)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil || lost && cell[x] != nil:
				ok = false
			case n == nil:
				// Its children came or went without an event
				// (Chromium's views): built again.
				recount = append(recount, x)
			default:
				n.Children = x.node.Children
				*x.node = *n
				if it.ref != x.it.ref {
					delete(ka.byPath, x.it.ref.Path)
					ka.byPath[it.ref.Path] = x
				}
				x.it = it
			}
		}()
	}
	wg.Wait()
	return ok && !a.hung.Load() && ctx.Err() == nil, recount
}

// ask asks x's object, under r, its basics and its details again, for a
// node in place of x's, its children not set (nil when their count
// changed). Lost: it is on the screen but did not answer its box.
func (a *appWalk) ask(ctx context.Context, x *walked, r objRef) (it *item, n *Node, lost bool, err error) {
	if it, err = a.basics(ctx, r); err != nil {
		return nil, nil, false, err
	}
	if x.it.count >= 0 && it.count != x.it.count {
		return it, nil, false, nil // built again: refresh
	}
	it.index, it.parent, it.bounds = x.it.index, x.it.parent, x.it.bounds
	role := roleName(it.role)
	if role == "" {
		role = x.node.Role
	}
	n = &Node{Role: role, Name: it.name, States: it.stateNames()}
	lost = a.detail(ctx, &walked{node: n, it: it})
	return it, n, lost, nil
}

// frameBoxes asks each of frames its box on the screen, through the bus.
func (w *walker) frameBoxes(ctx context.Context, frames []frameBox) ([][4]int32, bool) {
	out := make([][4]int32, len(frames))
	errs := make([]error, len(frames))
	var wg sync.WaitGroup
	for i, f := range frames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var e struct{ X, Y, W, H int32 }
			errs[i] = w.call(ctx, f.ref, ifComponent+".GetExtents", []any{uint32(0)}, &e)
			out[i] = [4]int32{e.X, e.Y, e.W, e.H}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, false
		}
	}
	return out, true
}

// frameBoxesOf is where each of wins (an application's children) that has
// a box is on the screen.
func (a *appWalk) frameBoxesOf(ctx context.Context, wins []*item) ([]frameBox, bool) {
	var frames []frameBox
	for _, it := range wins {
		if it != nil && it.hasIface(ifComponent) {
			frames = append(frames, frameBox{ref: it.ref})
		}
	}
	boxes, ok := a.w.frameBoxes(ctx, frames)
	for i := range boxes {
		frames[i].box = boxes[i]
	}
	return frames, ok
}

// docCheck is a document as a walk found it.
type docCheck struct {
	ref   objRef
	count int32
	box   [4]int32
}

// docsMoved are those of docs whose count of children or box (none when
// it had none) is not what it was; false when one does not answer.
func (w *walker) docsMoved(ctx context.Context, docs []docCheck) ([]objRef, bool) {
	ok := true
	var moved []objRef
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, d := range docs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var count dbus.Variant
			var e struct{ X, Y, W, H int32 }
			err := w.call(ctx, d.ref, ifProps+".Get", []any{ifAccessible, "ChildCount"}, &count)
			if err == nil && d.box != ([4]int32{}) {
				err = w.call(ctx, d.ref, ifComponent+".GetExtents", []any{uint32(0)}, &e)
			}
			n, _ := count.Value().(int32)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				ok = false
			case n != d.count || (d.box != [4]int32{} && [4]int32{e.X, e.Y, e.W, e.H} != d.box):
				moved = append(moved, d.ref)
			}
		}()
	}
	wg.Wait()
	return moved, ok
}
