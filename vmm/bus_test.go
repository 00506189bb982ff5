package vmm

import (
	"context"
	"testing"
	"time"
)

func TestBusOrderAndSlowSubscriber(t *testing.T) {
	var b Bus
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fast := b.Subscribe(ctx)
	slow := b.Subscribe(ctx) // never read until all is published
	const n = 1000
	done := make(chan struct{})
	go func() {
		for i := 0; i < n; i++ {
			b.Publish(Event{Kind: EventReset, VM: VM{ID: "a", Resets: i}})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publish blocked on a subscriber that does not read")
	}
	for _, ch := range []<-chan Event{fast, slow} {
		for i := 0; i < n; i++ {
			ev := <-ch
			if ev.VM.Resets != i {
				t.Fatalf("event %d has Resets %d: out of order", i, ev.VM.Resets)
			}
		}
	}
}

func TestBusCloseEndsSubscriptions(t *testing.T) {
	var b Bus
	ctx, cancel := context.WithCancel(context.Background())
	ch1 := b.Subscribe(ctx)
	ch2 := b.Subscribe(context.Background())
	cancel()
	if _, ok := <-ch1; ok {
		t.Fatal("subscription open after its context ended")
	}
	b.Close()
	if _, ok := <-ch2; ok {
		t.Fatal("subscription open after the bus closed")
	}
	if _, ok := <-b.Subscribe(context.Background()); ok {
		t.Fatal("subscription to a closed bus is open")
	}
}
