package atspi

// Building one application's tree: each object's basics (from the cache,
// or asked live), its children (a Calc sheet's by calc.go's scan), its
// node, and its details asked as it is found (details.go). walk.go runs
// the walk and holds what it knows of the calls and the application.

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

func (a *appWalk) add(it *item, parent objRef) {
	if it.ref.Name != a.name {
		return // an object of another application: not this cache's
	}
	a.items[it.ref.Path] = it
	if parent.Name == a.name {
		a.kids[parent.Path] = append(a.kids[parent.Path], it)
	}
	a.w.mu.Lock()
	a.w.cached++
	a.w.mu.Unlock()
}

// basics asks an object live for what the cache would have said.
func (a *appWalk) basics(ctx context.Context, r objRef) (*item, error) {
	// Properties one at a time, never GetAll: at-spi2-atk 2.46 aborts the
	// whole application (libdbus: "Array or variant type requires that
	// type variant be written") when one getter of a GetAll has nothing
	// to write, as Chromium 13x did on the first walk that tried it.
	it := &item{ref: r, index: -1}
	var name, count dbus.Variant
	var states []uint32
	errs := make([]error, 5)
	var wg sync.WaitGroup
	for i, f := range []func() error{
		func() error { return a.call(ctx, r, ifProps+".Get", []any{ifAccessible, "Name"}, &name) },
		func() error { return a.call(ctx, r, ifProps+".Get", []any{ifAccessible, "ChildCount"}, &count) },
		func() error { return a.call(ctx, r, ifAccessible+".GetRole", nil, &it.role) },
		func() error { return a.call(ctx, r, ifAccessible+".GetState", nil, &states) },
		func() error { return a.call(ctx, r, ifAccessible+".GetInterfaces", nil, &it.ifaces) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f() }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	it.name, _ = name.Value().(string)
	it.count, _ = count.Value().(int32)
	copy(it.states[:], states)
	return it, nil
}

// children are the objects under it, at most MaxWidth, from the cache when
// it holds them all and live otherwise.
func (a *appWalk) children(ctx context.Context, it *item) []*item {
	if it.count < 0 {
		// The cache's -1: the count is not kept (menus, objects that
		// manage their descendants): ask.
		var v dbus.Variant
		if a.call(ctx, it.ref, ifProps+".Get", []any{ifAccessible, "ChildCount"}, &v) != nil {
			return nil
		}
		c, _ := v.Value().(int32)
		it.count = c
	}
	n := int(min(it.count, MaxWidth))
	if n <= 0 {
		return nil
	}
	if kids := a.kids[it.ref.Path]; len(kids) >= n {
		sort.SliceStable(kids, func(i, j int) bool { return kids[i].index < kids[j].index })
		complete := true
		for i := 0; i < n; i++ {
			if kids[i].index != int32(i) {
				complete = false
				break
			}
		}
		if complete {
			return kids[:n]
		}
	}
	return a.live(ctx, it, n)
}

// live asks it for its first n children, and the basics of those the
// cache lacks; a child that fails is left out.
func (a *appWalk) live(ctx context.Context, it *item, n int) []*item {
	out := make([]*item, n)
	refs := a.childList(ctx, it, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r objRef
			if refs != nil {
				r = refs[i]
				if r.Path == "" || r.Path == nullPath {
					return
				}
			} else {
				var ok bool
				if r, ok = a.childAt(ctx, it.ref, int64(i)); !ok {
					return
				}
			}
			if c := a.items[r.Path]; c != nil && r.Name == a.name {
				out[i] = c
				return
			}
			if c, err := a.basics(ctx, r); err == nil {
				c.index = int32(i)
				out[i] = c
			}
		}()
	}
	wg.Wait()
	return out
}

// nullPath is AT-SPI's reference to no object.
const nullPath = "/org/a11y/atspi/null"

// childList is it's first n children in one GetChildren call, where
// GetChildAtIndex would be n calls: the bridge (at-spi2-atk
// accessible-adaptor.c) answers both from the same
// atk_object_ref_accessible_child, so the lists are the same. Nil when it
// answers fewer than n (its children changed under the walk) or not at
// all, and for objects that manage their descendants (a Calc sheet's
// million cells: never listed whole), which are asked per index.
func (a *appWalk) childList(ctx context.Context, it *item, n int) []objRef {
	if n < 2 || it.managesDescendants() {
		return nil
	}
	var refs []objRef
	if a.call(ctx, it.ref, ifAccessible+".GetChildren", nil, &refs) != nil || len(refs) < n {
		return nil
	}
	return refs[:n]
}

// childAt is parent's child at index i, false when it has none there.
func (a *appWalk) childAt(ctx context.Context, parent objRef, i int64) (objRef, bool) {
	var r objRef
	if a.call(ctx, parent, ifAccessible+".GetChildAtIndex", []any{int32(i)}, &r) != nil || r.Path == "" || r.Path == nullPath {
		return r, false
	}
	return r, true
}

// build makes the node of it and its subtree; flag is "calc" under a
// spreadsheet, whose tables are read as OSWorld reads them.
func (a *appWalk) build(ctx context.Context, it *item, depth int, flag string) *Node {
	role := roleName(it.role)
	if role == "" {
		var s string
		if a.call(ctx, it.ref, ifAccessible+".GetRoleName", nil, &s) == nil {
			role = strings.TrimSpace(s)
		}
	}
	if role == "" {
		role = "unknown"
	}
	n := &Node{Role: role, Name: it.name, States: it.stateNames()}
	x := &walked{node: n, it: it}
	a.mu.Lock()
	a.all = append(a.all, x)
	a.mu.Unlock()
	// Its details are asked now, beside the rest of the build, not after
	// it: an object the application's cache does not hold (a Calc cell, a
	// menu item, much of a page) lives only 15 s after its reference was
	// last handed out (at-spi2-atk's lease, LEASE_TIME_S in
	// atk-adaptor/spi-leasing.c), and under TCG a walk of LibreOffice
	// takes longer than that: asked after the build, 9 of a sheet's 784
	// cells answered nothing (bench/a11y, 2026-12-03).
	a.detailing.Add(1)
	go func() {
		defer a.detailing.Done()
		if a.detail(ctx, x) && it.cell {
			a.redetail(ctx, x)
		}
	}()
	if flag == "" && role == "document spreadsheet" {
		flag = "calc"
	}
	if depth == MaxDepth || ctx.Err() != nil || a.w.built.Add(1) >= MaxNodes {
		return n
	}
	var kids []*item
	if flag == "calc" && role == "table" {
		kids = a.calcCells(ctx, it)
	} else {
		kids = a.children(ctx, it)
	}
	if depth == 1 && a.w.memo != nil {
		// Its windows and where they are, before their trees are
		// built: what a kept tree is checked against (keep.go).
		a.top = kids
		a.frames, a.framesOK = a.frameBoxesOf(ctx, kids)
	}
	// Siblings are built at once: a subtree the cache lacks costs a
	// round trip per level (its child count, its children, their
	// basics), and one after the other those waits added up to most of
	// a walk of LibreOffice's menus. The calls still go 64 at a time
	// (inFlight); the children keep their order.
	built := make([]*Node, len(kids))
	var wg sync.WaitGroup
	for i, k := range kids {
		if k == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			built[i] = a.build(ctx, k, depth+1, flag)
		}()
	}
	wg.Wait()
	for _, c := range built {
		if c != nil {
			n.Children = append(n.Children, c)
		}
	}
	return n
}

// redetail asks a sheet's cell that did not answer its box (past its
// lease by the time its details were asked: a walk of 44 s on a loaded
// host lost 26 of 1,081 cells' boxes, TestE2EOSWorldImage 2026-12-04) its
// details again under a new object from its sheet, and keeps them when
// it answers its box.
func (a *appWalk) redetail(ctx context.Context, x *walked) {
	it := *x.it
	if !a.renewCell(ctx, &it) {
		return
	}
	y := &walked{node: &Node{Role: x.node.Role, Name: x.node.Name, States: x.node.States}, it: &it}
	if a.detail(ctx, y) {
		return
	}
	*x.node = *y.node
	x.it = y.it
}

// roleName is libatspi's name of role r, "" for one it has no name for
// (the application is then asked).
func roleName(r uint32) string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return ""
}
