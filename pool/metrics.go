package pool

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the pool's Prometheus series. Sizes are read from the
// Manager at scrape time (collector); events are counted as they happen.
type metrics struct {
	started  *prometheus.CounterVec   // pool, warm
	ended    *prometheus.CounterVec   // pool, reason
	refused  *prometheus.CounterVec   // pool, reason
	failures *prometheus.CounterVec   // pool, kind
	reset    *prometheus.HistogramVec // pool
	boot     *prometheus.HistogramVec // pool
}

func newMetrics() *metrics {
	return &metrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deskfarm_episodes_started_total",
			Help: "Episodes started, by pool and whether a warm VM served them."}, []string{"pool", "warm"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deskfarm_episodes_ended_total",
			Help: "Episodes ended, by pool and reason (deleted, expired, vm_died, vm_gone)."}, []string{"pool", "reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deskfarm_episodes_refused_total",
			Help: "Episode starts refused, by pool and reason (pool_full; host_full when vmm refused the boot; not_warm when StartOn named a vm that is not free)."}, []string{"pool", "reason"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "deskfarm_vm_failures_total",
			Help: "Pool VM failures, by pool and kind (boot, reset, died, vanished)."}, []string{"pool", "kind"}),
		reset: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "deskfarm_reset_duration_seconds",
			Help:    "Time to reset a VM to its ready snapshot when an episode ends.",
			Buckets: []float64{.05, .1, .2, .3, .5, .75, 1, 2, 5, 10, 30}}, []string{"pool"}),
		boot: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "deskfarm_boot_duration_seconds",
			Help:    "Time to boot a pool VM to its ready snapshot.",
			Buckets: []float64{2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 240}}, []string{"pool"}),
	}
}

func (m *metrics) register(r prometheus.Registerer, sizes prometheus.Collector) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.started, m.ended, m.refused, m.failures, m.reset, m.boot, sizes} {
		if err := r.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var (
	descVMs = prometheus.NewDesc("deskfarm_pool_vms",
		"VMs per pool and state (warm, leased, booting, ending).", []string{"pool", "state"}, nil)
	descLeases = prometheus.NewDesc("deskfarm_pool_leases",
		"Active episode leases per pool.", []string{"pool"}, nil)
	descMax     = prometheus.NewDesc("deskfarm_pool_max", "Configured max VMs per pool.", []string{"pool"}, nil)
	descMinWarm = prometheus.NewDesc("deskfarm_pool_min_warm", "Configured warm VMs per pool.", []string{"pool"}, nil)
)

// sizeCollector reports pool sizes from the Manager at scrape time.
type sizeCollector struct{ m *Manager }

func (c sizeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVMs, descLeases, descMax, descMinWarm} {
		ch <- d
	}
}

func (c sizeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.m.Pools() {
		for state, n := range map[string]int{"warm": p.Warm, "leased": p.Leased, "booting": p.Booting, "ending": p.Ending} {
			ch <- prometheus.MustNewConstMetric(descVMs, prometheus.GaugeValue, float64(n), p.Name, state)
		}
		ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(p.Leased), p.Name)
		ch <- prometheus.MustNewConstMetric(descMax, prometheus.GaugeValue, float64(p.Max), p.Name)
		ch <- prometheus.MustNewConstMetric(descMinWarm, prometheus.GaugeValue, float64(p.MinWarm), p.Name)
	}
}
