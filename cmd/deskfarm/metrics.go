package main

import (
	"github.com/deskfarm/deskfarm/vmm"
	"github.com/prometheus/client_golang/prometheus"
)

// eventQueues is what eventQueueCollector reads: vmm.Manager (or vmmtest's
// farm) and its lifecycle event bus.
type eventQueues interface {
	EventQueues() []vmm.QueueStat
}

var (
	descQueueDepth = prometheus.NewDesc("deskfarm_event_queue_depth",
		"Lifecycle events published to a subscriber and not yet received, by subscriber (desk, pool, osworld, ...); it should stay near 0.",
		[]string{"subscriber"}, nil)
	descQueueHigh = prometheus.NewDesc("deskfarm_event_queue_high_water",
		"The largest deskfarm_event_queue_depth of a subscriber's current subscriptions since they began.",
		[]string{"subscriber"}, nil)
	descQueueSubs = prometheus.NewDesc("deskfarm_event_subscriptions",
		"Open lifecycle event subscriptions, by subscriber.", []string{"subscriber"}, nil)
)

// eventQueueCollector reports vmm's event queues at scrape time, summed
// over the subscriptions that share a name (the high-water mark is their
// largest).
type eventQueueCollector struct{ q eventQueues }

func (c eventQueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQueueDepth
	ch <- descQueueHigh
	ch <- descQueueSubs
}

func (c eventQueueCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct{ depth, high, subs int }
	by := map[string]*agg{}
	for _, q := range c.q.EventQueues() {
		a := by[q.Subscriber]
		if a == nil {
			a = &agg{}
			by[q.Subscriber] = a
		}
		a.depth += q.Depth
		a.high = max(a.high, q.HighWater)
		a.subs++
	}
	for name, a := range by {
		ch <- prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(a.depth), name)
		ch <- prometheus.MustNewConstMetric(descQueueHigh, prometheus.GaugeValue, float64(a.high), name)
		ch <- prometheus.MustNewConstMetric(descQueueSubs, prometheus.GaugeValue, float64(a.subs), name)
	}
}
