package atspi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// calcCells are the cells of a Calc sheet on screen: a sheet has a million
// rows, so only those, found as OSWorld's server finds them (the first
// showing column of the first showing row, then each row from that column
// while its cells show, until a row's first cell does not). Cells are
// probed with the two calls that scan makes (child, state), a window at a
// time; once the first row is known, eight rows at once, each as wide as
// the first row and one more. Only the cells kept are then asked the rest.
func (a *appWalk) calcCells(ctx context.Context, t *item) []*item {
	ncols := int64(16384)
	var v dbus.Variant
	if a.call(ctx, t.ref, ifProps+".Get", []any{ifTable, "NColumns"}, &v) == nil {
		if c, ok := v.Value().(int32); ok && c > 0 {
			ncols = int64(c)
		}
	}
	total := int64(t.count)
	if total < 0 {
		total = math.MaxInt32 // a count past int32 wraps in the cache
	}
	sc := &calcScanner{a: a, t: t, ncols: ncols, total: total}
	t0 := time.Now()
	defer func() { a.mu.Lock(); a.st.CalcScan += time.Since(t0); a.mu.Unlock() }()
	var out []*item
	// The first showing row, scanned as OSWorld does.
	r, base := 0, int64(0)
	for ; r < 1<<20 && ctx.Err() == nil; r++ {
		cells, c := sc.row(ctx, base, 0, nil, calcWindow)
		out = append(out, cells...)
		if sc.first && c == sc.col0 || !sc.first && r >= calcScan || base+ncols >= total {
			return a.withBasics(ctx, out, ncols)
		}
		base += ncols
		if sc.first {
			break
		}
	}
	width := len(out) + 1
	for ctx.Err() == nil {
		// Eight rows probed at once, then read in order.
		const batch = 8
		var bases []int64
		for b := base; len(bases) < batch && b < total; b += ncols {
			bases = append(bases, b)
		}
		probes := make([][]*item, len(bases))
		var wg sync.WaitGroup
		for i, b := range bases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				probes[i] = sc.probe(ctx, b+sc.col0, int(min(int64(width), ncols-sc.col0, total-b-sc.col0)))
			}()
		}
		wg.Wait()
		for i, b := range bases {
			cells, c := sc.row(ctx, b, sc.col0, probes[i], width)
			out = append(out, cells...)
			if c == sc.col0 || b+ncols >= total {
				return a.withBasics(ctx, out, ncols)
			}
		}
		base = bases[len(bases)-1] + ncols
	}
	return a.withBasics(ctx, out, ncols)
}

// calcWindow is how many cells of a row one probe asks for while the first
// showing row is sought.
const calcWindow = 16

// calcScanner is one scan of a Calc table: OSWorld's loop state.
type calcScanner struct {
	a            *appWalk
	t            *item
	ncols, total int64
	first        bool
	col0         int64
}

// row scans the row at base from column c as OSWorld's loop does, starting
// from the cells already probed, asking window more at a time; it returns
// the showing cells kept and the column where it stopped.
func (sc *calcScanner) row(ctx context.Context, base, c int64, probed []*item, window int) ([]*item, int64) {
	var out []*item
	for c < sc.ncols && base+c < sc.total && ctx.Err() == nil {
		if len(probed) == 0 {
			probed = sc.probe(ctx, base+c, int(min(int64(window), sc.ncols-c, sc.total-base-c)))
		}
		for _, cell := range probed {
			if cell != nil && cell.showing() {
				if !sc.first {
					sc.col0, sc.first = c, true
				}
				out = append(out, cell)
			} else if sc.first || c >= calcScan {
				return out, c
			}
			c++
		}
		probed = nil
	}
	return out, c
}

// probe asks the table for n cells from index i0 and their states.
func (sc *calcScanner) probe(ctx context.Context, i0 int64, n int) []*item {
	out := make([]*item, max(n, 0))
	sc.a.probes.Add(int64(len(out)))
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := sc.a
			r, ok := a.childAt(ctx, sc.t.ref, i0+int64(i))
			if !ok {
				return
			}
			var states []uint32
			if a.call(ctx, r, ifAccessible+".GetState", nil, &states) != nil {
				return
			}
			it := &item{ref: r, index: int32(i0 + int64(i)), count: -2, cell: true, parent: sc.t.ref.Path}
			copy(it.states[:], states)
			out[i] = it
		}()
	}
	wg.Wait()
	return out
}

// withBasics asks the cells kept for the rest of their basics. The first
// is asked everything (name, child count, role, interfaces); the others
// only their names, and take the rest from it: a sheet's cells are all of
// one class in LibreOffice (ScAccessibleCell), with one role, one set of
// interfaces and no children. That is 4 calls a cell fewer, where a
// 1920x1080 sheet shows about 1,300 cells and LibreOffice under TCG
// answers about 600 calls a second (docs/benchmarks.md). The class's
// Value bounds are constants too (ScAccessibleCell's getMinimumValue,
// getMaximumValue and getMinimumIncrement name no cell), so they are
// asked of the first cell only and each cell is asked its current value:
// 3 calls a cell fewer, about a tenth of LibreOffice's calls in a walk of
// the bench scene. A cell's name is its address (cellName), asked of the
// first and the last cell only when both answer the address their index
// gives. A cell whose object fails is asked again under a new object
// (renewCell), and left out when that fails too.
func (a *appWalk) withBasics(ctx context.Context, cells []*item, ncols int64) []*item {
	a.mu.Lock()
	a.st.CalcCells += len(cells)
	a.mu.Unlock()
	var proto *item
	for i, c := range cells {
		var full *item
		err := a.onCell(ctx, c, func(r objRef) (err error) { full, err = a.basics(ctx, r); return err })
		if err == nil {
			full.index, full.states, full.cell, full.parent = c.index, c.states, true, c.parent
			cells[i], proto = full, full
			break
		}
		cells[i] = nil
	}
	if proto == nil {
		return nil
	}
	var bounds *[3]float64
	if a.w.mode == ModeOSWorld && proto.hasIface(ifValue) {
		bounds = a.valueBounds(ctx, proto.ref)
		proto.bounds = bounds
	}
	named := func(c *item) bool {
		var name dbus.Variant
		if a.onCell(ctx, c, func(r objRef) error { return a.call(ctx, r, ifProps+".Get", []any{ifAccessible, "Name"}, &name) }) != nil {
			return false
		}
		c.name, _ = name.Value().(string)
		return true
	}
	last := cells[len(cells)-1]
	if last != proto && !named(last) {
		cells[len(cells)-1], last = nil, proto
	}
	byIndex := !a.w.askDerived && proto.name == cellName(int64(proto.index), ncols) && last.name == cellName(int64(last.index), ncols)
	var wg sync.WaitGroup
	for i, c := range cells {
		if c == nil || c == proto {
			continue
		}
		c.role, c.ifaces, c.count, c.bounds = proto.role, proto.ifaces, proto.count, bounds
		if c == last {
			continue
		}
		if byIndex {
			c.name = cellName(int64(c.index), ncols)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !named(c) {
				cells[i] = nil
			}
		}()
	}
	wg.Wait()
	return cells
}

// renewCell sets on c a new object of its cell, from its sheet by index,
// and says whether the sheet gave one. The cells a sheet's scan keeps are
// asked their basics only once the scan is done, and at-spi2-atk drops a
// cell's object 15 s after it was handed out: in a walk of 32 s on a
// loaded host (CI at 6fcf489, three E2E streams), the first row's 16
// cells' objects lapsed before they were named, and the walk left A1:P1
// out of the tree.
func (a *appWalk) renewCell(ctx context.Context, c *item) bool {
	r, ok := a.childAt(ctx, objRef{a.name, c.parent}, int64(c.index))
	if !ok || r.Name != a.name {
		return false
	}
	c.ref = r
	return true
}

// onCell asks f of cell c's object, and once more under a new one
// (renewCell) when that fails.
func (a *appWalk) onCell(ctx context.Context, c *item, f func(objRef) error) error {
	err := f(c.ref)
	if err != nil && a.renewCell(ctx, c) {
		err = f(c.ref)
	}
	return err
}

// cellName is the address of the cell at index of a sheet ncols wide, as
// ScAccessibleCell names a cell: column letters and row number, without
// the sheet or "$" (createAccessibleName formats its address with
// ScRefFlags::VALID only; LibreOffice core,
// sc/source/ui/Accessibility/AccessibleCell.cxx). A sheet's cells are its
// table's children row by row (ScAccessibleSpreadsheet's index is row *
// columns + column). Asking each was 784 calls in the bench scene, where
// LibreOffice is asked about 10,000.
func cellName(index, ncols int64) string {
	if ncols <= 0 || index < 0 {
		return ""
	}
	row, col := index/ncols, index%ncols
	var letters []byte
	for col >= 0 {
		letters = append([]byte{byte('A' + col%26)}, letters...)
		col = col/26 - 1
	}
	return string(letters) + strconv.FormatInt(row+1, 10)
}

// refocus asks again, under new objects, the kept cells that hold the
// focus. The event that a cell lost the focus can name an object that is
// gone by the time it is asked (LibreOffice disposes of the cell object
// it made for the event): TestE2EOSWorldImage's kept tree still showed A1
// focused after a step in the terminal. So any event on a gone object in a
// tree with a sheet has its focused cells asked again. False when one
// does not answer.
func (a *appWalk) refocus(ctx context.Context, ka *keptApp, stale map[*walked]change) bool {
	var cells []*walked
	var sheets []objRef
	for sheet, byIndex := range ka.cells {
		for _, x := range byIndex {
			if x.node.has("focused") {
				cells = append(cells, x)
				sheets = append(sheets, objRef{a.name, sheet})
			}
		}
	}
	refs := make([]objRef, len(cells))
	oks := make([]bool, len(cells))
	var wg sync.WaitGroup
	for i, x := range cells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			refs[i], oks[i] = a.childAt(ctx, sheets[i], int64(x.it.index))
		}()
	}
	wg.Wait()
	for i, x := range cells {
		if !oks[i] || refs[i].Name != a.name {
			return false
		}
		delete(ka.byPath, x.it.ref.Path)
		x.it.ref = refs[i]
		ka.byPath[refs[i].Path] = x
		stale[x] = changedFacts
	}
	return true
}

// maxClimb bounds the parents asked above an object out of the tree.
const maxClimb = 16

// maxPlaced bounds the objects out of a kept tree that one reuse looks
// for among its sheets' cells: past it the application is walked again.
const maxPlaced = 16

// placeCells finds, for each of paths (objects events named that a kept
// tree with a sheet does not hold), the kept cell it is: LibreOffice
// makes a cell's object anew for each request and each event, so the
// focused cell losing the focus is told under a path no walk saw
// (measured in TestE2EOSWorldImage). Each is asked its parent and its
// index; a cell found is asked again under its new path (added to
// stale). An object gone since (its state defunct, or no such object)
// is in no tree, this one's or a fresh walk's (the editing object a
// typed cell shows while it is typed into), but it may have been the
// focused cell's: those are asked again (refocus). Otherwise its parents are
// asked up to the first in the tree (other than a sheet), which gets
// the children it lists now (added to reshaped; mend.go): a new child
// is built, and an object it does not list (a popup's, a tooltip's) is in
// no tree. One whose parents lead out of the application is in none of
// its windows. False when one is none of these, or does not answer: the
// application is then walked again, with what the one it could not
// place is.
func (a *appWalk) placeCells(ctx context.Context, ka *keptApp, paths []dbus.ObjectPath, stale map[*walked]change, reshaped map[*walked]bool) (bool, string) {
	if len(paths) > maxPlaced {
		return false, fmt.Sprintf("%d objects out of the tree", len(paths))
	}
	found := make([]*walked, len(paths))
	under := make([]*walked, len(paths))
	gone := make([]bool, len(paths))
	seen := make([]string, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := objRef{a.name, p}
			var states []uint32
			err := a.call(ctx, r, ifAccessible+".GetState", nil, &states)
			const defunct = 6 // ATSPI_STATE_DEFUNCT
			var reply dbus.Error
			if errors.As(err, &reply) || err == nil && len(states) > 0 && states[0]&(1<<defunct) != 0 {
				gone[i] = true
				return
			}
			var parent dbus.Variant
			var index int32
			var role uint32
			if err != nil || a.call(ctx, r, ifProps+".Get", []any{ifAccessible, "Parent"}, &parent) != nil ||
				a.call(ctx, r, ifAccessible+".GetIndexInParent", nil, &index) != nil {
				seen[i] = fmt.Sprintf("%s: no parent or index", p)
				return
			}
			_ = a.call(ctx, r, ifAccessible+".GetRole", nil, &role)
			var up objRef
			_ = dbus.Store([]any{parent.Value()}, &up)
			if up.Name != a.name || up.Path == nullPath {
				gone[i] = true // another application's, or none: in no window of this one
				return
			}
			if found[i] = ka.cells[up.Path][index]; found[i] != nil {
				return
			}
			// Not a cell: up the parents, to the first in the tree.
			for range maxClimb {
				if x := ka.byPath[up.Path]; x != nil {
					if !managed(x) {
						under[i] = x
					}
					break
				}
				var v dbus.Variant
				if a.call(ctx, up, ifProps+".Get", []any{ifAccessible, "Parent"}, &v) != nil {
					break
				}
				if dbus.Store([]any{v.Value()}, &up) != nil || up.Name != a.name || up.Path == nullPath {
					gone[i] = true // in no window of this one
					return
				}
			}
			if under[i] == nil {
				seen[i] = fmt.Sprintf("a %s, child %d of %s, above which none is in the tree", roleName(role), index, up.Path)
			}
		}()
	}
	wg.Wait()
	if slices.Contains(gone, true) && !a.refocus(ctx, ka, stale) {
		return false, "the focused cells did not answer"
	}
	for i, x := range found {
		if gone[i] {
			continue
		}
		if under[i] != nil {
			reshaped[under[i]] = true
			continue
		}
		if x == nil {
			return false, seen[i]
		}
		delete(ka.byPath, x.it.ref.Path)
		x.it.ref.Path = paths[i]
		ka.byPath[paths[i]] = x
		stale[x] = changedFacts
	}
	return true, ""
}

// gridMoved is the sheets of ka, among those not in reshaped already,
// whose cells moved without an event: a column widened or a row made
// taller moves every cell right of or below it, and no event tells it
// (TestE2EOSWorldImage's column dragged wider). Each sheet's first row
// of cells kept and the first cell of each of its rows are asked their
// box again, under new objects (kept ones lapse, calc.go's
// withBasics): a column's or a row's edge that moved moves one of them,
// and the sheet is then built again. Two calls a cell, for the sheet's
// first row and column of those on the screen: with the ranges asked
// again (reuse), 250-450 calls more a kept walk of LibreOffice in the
// bench scene (docs/benchmarks.md, stop 35). False when one does not
// answer.
func (a *appWalk) gridMoved(ctx context.Context, ka *keptApp, reshaped map[*walked]bool) ([]*walked, bool) {
	type probe struct {
		sheet *walked
		cell  *walked
	}
	var probes []probe
	for path, byIndex := range ka.cells {
		sheet := ka.byPath[path]
		if sheet == nil || reshaped[sheet] || len(byIndex) == 0 {
			continue
		}
		for _, k := range gridEdges(slices.Sorted(maps.Keys(byIndex))) {
			if c := byIndex[k]; c.node.Box != nil {
				probes = append(probes, probe{sheet, c})
			}
		}
	}
	moved := make([]bool, len(probes))
	failed := make([]bool, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, ok := a.childAt(ctx, p.sheet.it.ref, int64(p.cell.it.index))
			var e struct{ X, Y, W, H int32 }
			if !ok || r.Name != a.name || a.call(ctx, r, ifComponent+".GetExtents", []any{uint32(0)}, &e) != nil {
				failed[i] = true
				return
			}
			moved[i] = [4]int32{e.X, e.Y, e.W, e.H} != *p.cell.node.Box
		}()
	}
	wg.Wait()
	if slices.Contains(failed, true) {
		return nil, false
	}
	var out []*walked
	for i, p := range probes {
		if moved[i] && !slices.Contains(out, p.sheet) {
			out = append(out, p.sheet)
		}
	}
	return out, !a.hung.Load() && ctx.Err() == nil
}

// gridEdges are, of a sheet's cells kept (their indices, sorted: a row
// of them is a run of consecutive indices), those of the first row and
// the first of each row.
func gridEdges(idx []int32) []int32 {
	var out []int32
	for i, k := range idx {
		if i == 0 || idx[i-1] != k-1 || k-idx[0] == int32(i) {
			out = append(out, k)
		}
	}
	return out
}
