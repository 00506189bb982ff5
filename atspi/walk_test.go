package atspi

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A role's fact is asked once while the first answers it; when the first
// cannot, each object asks its own.
func TestPerRole(t *testing.T) {
	a := &appWalk{}
	ctx := context.Background()
	var asked atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	got := make([]any, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, ok := a.perRole(ctx, "action menu item", func() (any, bool) {
				asked.Add(1)
				<-release
				return "click", true
			})
			if ok {
				got[i] = v
			}
		}()
	}
	time.Sleep(50 * time.Millisecond) // all 20 waiting on the first
	close(release)
	wg.Wait()
	if n := asked.Load(); n != 1 {
		t.Errorf("asked %d times, want once", n)
	}
	for i, v := range got {
		if v != "click" {
			t.Errorf("object %d got %v", i, v)
		}
	}

	// The first fails: the next asks its own, and succeeds.
	fail := true
	for i := range 3 {
		v, ok := a.perRole(ctx, "bounds menu", func() (any, bool) {
			if fail {
				fail = false
				return "nothing", false
			}
			return "own", true
		})
		if i == 0 && ok || i > 0 && (!ok || v != "own") {
			t.Errorf("call %d: %v %v", i, v, ok)
		}
	}

	// A walk that ends does not wait for the first.
	a2 := &appWalk{}
	hold := make(chan struct{})
	defer close(hold)
	go a2.perRole(ctx, "k", func() (any, bool) { <-hold; return 1, true })
	for { // until the first holds the role
		a2.roleMu.Lock()
		e := a2.byRole["k"]
		a2.roleMu.Unlock()
		if e != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := a2.perRole(cctx, "k", func() (any, bool) { return 2, true }); ok {
		t.Error("a cancelled walk got a fact")
	}
}

// A Calc cell's name is its address, as ScAccessibleCell gives it: the
// column's letters past Z and the row from 1, for a sheet of 16,384
// columns (LibreOffice 7.4) and of 1,024 (older), as the bench scene's
// cells are named (A1, P25).
func TestCellName(t *testing.T) {
	for _, c := range []struct {
		index, ncols int64
		want         string
	}{
		{0, 16384, "A1"},
		{15, 16384, "P1"},
		{24*16384 + 15, 16384, "P25"},
		{25, 16384, "Z1"},
		{26, 16384, "AA1"},
		{701, 16384, "ZZ1"},
		{702, 16384, "AAA1"},
		{16383, 16384, "XFD1"},
		{1048575*16384 + 16383, 16384, "XFD1048576"},
		{1024 + 1023, 1024, "AMJ2"},
		{-1, 16384, ""},
		{5, 0, ""},
	} {
		if got := cellName(c.index, c.ncols); got != c.want {
			t.Errorf("cellName(%d, %d) = %q, want %q", c.index, c.ncols, got, c.want)
		}
	}
}

// A box set on a node that had none (a cell that did not answer it when
// first asked) is written where a fresh walk writes it: after the attr:
// attributes, before the Value's, as OSWorld's XML orders them.
func TestSetBoxAdds(t *testing.T) {
	n := &Node{Attrs: []Attr{{"attr:Formula", ""}, {"val:value", "0.0"}}}
	n.setBox(&[4]int32{123, 159, 82, 17})
	n.setBox(&[4]int32{123, 160, 82, 17})
	var got []string
	for _, a := range n.Attrs {
		got = append(got, a.Key+"="+a.Value)
	}
	want := []string{"attr:Formula=", "cp:screencoord=(123, 160)", "cp:size=(82, 17)", "val:value=0.0"}
	if !slices.Equal(got, want) {
		t.Errorf("attributes after setBox: %q, want %q", got, want)
	}
	if n.Box == nil || *n.Box != [4]int32{123, 160, 82, 17} {
		t.Errorf("box %v, want [123 160 82 17]", n.Box)
	}
}

// TestGridEdges: the cells a kept sheet asks its box again are its first
// row's and each row's first, which a column's or a row's edge moving
// moves; a row cut short (the scan stops at a cell not showing) is still
// a row.
func TestGridEdges(t *testing.T) {
	for _, c := range []struct {
		idx, want []int32
	}{
		// Three rows of four from column C of a 10-column sheet.
		{[]int32{2, 3, 4, 5, 12, 13, 14, 15, 22, 23, 24, 25}, []int32{2, 3, 4, 5, 12, 22}},
		// One row.
		{[]int32{0, 1, 2}, []int32{0, 1, 2}},
		// One column.
		{[]int32{0, 16384, 32768}, []int32{0, 16384, 32768}},
		// A ragged last row.
		{[]int32{0, 1, 2, 10, 11, 12, 20}, []int32{0, 1, 2, 10, 20}},
		{nil, nil},
	} {
		if got := gridEdges(c.idx); !slices.Equal(got, c.want) {
			t.Errorf("gridEdges(%v) = %v, want %v", c.idx, got, c.want)
		}
	}
}
