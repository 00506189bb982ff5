package vmm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"github.com/deskfarm/deskfarm/internal/testenv"
	"github.com/deskfarm/deskfarm/vmm"
)

// After a reset returns, libvirt's guest agent connection is the one it
// keeps: loadvm makes libvirt close and reopen it (agent lifecycle events),
// and an exec sent on the old one fails "guest agent disappeared". Each reset
// must end with libvirt's "connected", with no "disconnected" after it, and
// execs right after the reset must work. The events, watched on a libvirt
// connection of the test's own, are logged with their times.
func TestE2EResetAgentEvents(t *testing.T) {
	m := testenv.Manager(t, "tiny")
	ctx := context.Background()
	vm, err := m.Create(ctx, vmm.CreateOptions{Image: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(vmm.DefaultLibvirtSocket)))
	if err := l.ConnectToURI(libvirt.QEMUSystem); err != nil {
		t.Fatal(err)
	}
	defer l.Disconnect()
	sctx, cancel := context.WithCancel(ctx)
	evs, err := l.SubscribeEvents(sctx, libvirt.DomainEventIDAgentLifecycle, libvirt.OptDomain{})
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		at    time.Time
		state libvirt.ConnectDomainEventAgentLifecycleState
	}
	var mu sync.Mutex
	var got []seen
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for e := range evs {
			if ev, ok := e.(*libvirt.DomainEventCallbackAgentLifecycleMsg); ok && ev.Dom.Name == vm.Domain {
				mu.Lock()
				got = append(got, seen{time.Now(), libvirt.ConnectDomainEventAgentLifecycleState(ev.State)})
				mu.Unlock()
			}
		}
	}()
	defer func() { cancel(); <-drained }()

	for i := 0; i < 6; i++ {
		mu.Lock()
		from := len(got)
		mu.Unlock()
		start := time.Now()
		rr, err := m.Reset(ctx, vm.ID)
		if err != nil {
			t.Fatalf("reset %d: %v", i, err)
		}
		// The exec that used to fail is the first one after the reset.
		for j := 0; j < 5; j++ {
			if _, err := m.Exec(ctx, vm.ID, vmm.ExecRequest{Argv: []string{"true"}, Timeout: 10 * time.Second}); err != nil {
				t.Fatalf("reset %d, exec %d after it: %v", i, j, err)
			}
		}
		time.Sleep(time.Second) // let a late event show
		mu.Lock()
		cycle := append([]seen(nil), got[from:]...)
		mu.Unlock()
		var log []string
		for _, s := range cycle {
			log = append(log, map[libvirt.ConnectDomainEventAgentLifecycleState]string{1: "connected", 2: "disconnected"}[s.state]+
				" at +"+s.at.Sub(start).Round(time.Millisecond).String())
		}
		t.Logf("reset %d returned at +%s; agent events: %v", i, rr.Duration.Round(time.Millisecond), log)
		if len(cycle) == 0 || cycle[len(cycle)-1].state != libvirt.ConnectDomainEventAgentLifecycleStateConnected {
			t.Fatalf("reset %d: agent events %v, want them to end with connected", i, log)
		}
	}
}
