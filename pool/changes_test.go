package pool

import (
	"context"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm/vmmtest"
)

// Changed is closed by every change a watcher would show: a warm VM that
// appears, a lease, the end of an episode. A watcher that re-reads Pools
// and List on each close sees each of them.
func TestChangedAnnouncesPoolChanges(t *testing.T) {
	m := newTestManager(t, vmmtest.New(), testConfig(1, 2), t.TempDir())
	// next waits for the channel ch to close, re-reading until cond holds.
	next := func(what string, cond func() bool) {
		t.Helper()
		for {
			ch := m.Changed()
			if cond() {
				return
			}
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("no change announced while waiting for %s: %+v", what, m.Pools())
			}
		}
	}
	next("a warm vm", func() bool { return m.Pools()[0].Warm == 1 })
	ch := m.Changed()
	ep, err := m.Start(context.Background(), "tiny", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("a lease was not announced")
	}
	next("the lease listed", func() bool { return m.Pools()[0].Leased == 1 && len(m.List()) == 1 })
	ch = m.Changed()
	if _, err := m.End(context.Background(), ep.ID, ReasonDeleted); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("the end of the episode was not announced")
	}
	next("the vm back in the pool", func() bool { return m.Pools()[0].Leased == 0 })
}
