package atspi

import (
	"context"
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
