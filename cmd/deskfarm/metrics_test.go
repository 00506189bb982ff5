package main

import (
	"context"
	"testing"
	"time"

	"github.com/deskfarm/deskfarm/vmm"
	"github.com/deskfarm/deskfarm/vmm/vmmtest"
	"github.com/prometheus/client_golang/prometheus"
)

// /metrics shows each event subscriber's backlog: two subscriptions named
// "stuck" that never read hold every event of a VM's creation, and one
// that keeps up holds none.
func TestEventQueueMetrics(t *testing.T) {
	farm := vmmtest.New()
	defer farm.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	farm.Subscribe(ctx, "stuck")
	farm.Subscribe(ctx, "stuck")
	reader := farm.Subscribe(ctx, "reader")
	if _, err := farm.Create(ctx, vmm.CreateOptions{Image: "tiny"}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range farm.EventQueues() {
		n = max(n, q.Depth)
	}
	if n == 0 {
		t.Fatal("creating a VM published no event")
	}
	for range n {
		<-reader
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(eventQueueCollector{farm})
	got := map[string]float64{}
	for tries := 0; ; tries++ {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		// The reader's count drops just after each receive returns.
		if got["deskfarm_event_queue_depth/reader"] == 0 || tries == 5000 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	want := map[string]float64{
		"deskfarm_event_queue_depth/stuck":      float64(2 * n),
		"deskfarm_event_queue_high_water/stuck": float64(n),
		"deskfarm_event_subscriptions/stuck":    2,
		"deskfarm_event_queue_depth/reader":     0,
		"deskfarm_event_subscriptions/reader":   1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
