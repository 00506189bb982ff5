package vmm

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBusOrderAndSlowSubscriber(t *testing.T) {
	b := Bus{Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fast := b.Subscribe(ctx, "test")
	slow := b.Subscribe(ctx, "test") // never read until all is published
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
	ch1 := b.Subscribe(ctx, "test")
	ch2 := b.Subscribe(context.Background(), "test")
	cancel()
	if _, ok := <-ch1; ok {
		t.Fatal("subscription open after its context ended")
	}
	b.Close()
	if _, ok := <-ch2; ok {
		t.Fatal("subscription open after the bus closed")
	}
	if _, ok := <-b.Subscribe(context.Background(), "test"); ok {
		t.Fatal("subscription to a closed bus is open")
	}
}

// A subscriber that does not read shows its backlog in Queues, and its
// high-water marks are logged from HighWaterLog on, doubling; one that
// keeps up shows none.
func TestBusQueueDepthAndHighWater(t *testing.T) {
	var logs bytes.Buffer
	b := Bus{Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck := b.Subscribe(ctx, "stuck")
	fast := b.Subscribe(ctx, "fast")
	const n = 3 * HighWaterLog
	for i := 0; i < n; i++ {
		b.Publish(Event{Kind: EventReset, VM: VM{ID: "a", Resets: i}})
		<-fast // keeps up: reads each event before the next is published
	}
	q := b.Queues()
	if len(q) != 2 || q[0].Subscriber != "fast" || q[1].Subscriber != "stuck" {
		t.Fatalf("queues %+v, want fast and stuck", q)
	}
	if q[1].Depth != n || q[1].HighWater != n {
		t.Errorf("stuck subscriber: depth %d, high-water %d; want %d and %d", q[1].Depth, q[1].HighWater, n, n)
	}
	// The reader has every event; the count drops once its send returns.
	for deadline := time.Now().Add(5 * time.Second); b.Queues()[0].Depth != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fast subscriber's depth %d after it read everything", b.Queues()[0].Depth)
		}
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	var marks []string
	for _, l := range lines {
		if strings.Contains(l, "subscriber=stuck") {
			marks = append(marks, l[strings.Index(l, "depth="):])
		} else if strings.Contains(l, "subscriber=fast") {
			t.Errorf("a subscriber that keeps up was logged: %s", l)
		}
	}
	want := []string{fmt.Sprintf("depth=%d vm=a event=reset", HighWaterLog), fmt.Sprintf("depth=%d vm=a event=reset", 2*HighWaterLog)}
	if !slices.Equal(marks, want) {
		t.Errorf("high-water lines for the stuck subscriber %q, want %q", marks, want)
	}
	// Reading the backlog empties the queue.
	for range n {
		<-stuck
	}
	for deadline := time.Now().Add(5 * time.Second); b.Queues()[1].Depth != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stuck subscriber's depth %d after reading its backlog", b.Queues()[1].Depth)
		}
	}
}
