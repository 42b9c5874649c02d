package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// WorkerCounts are one worker binding's state (SPEC §4.3): workers
// connected (a take open, or one within the last 60 s), calls waiting for
// a worker (runs held back for want of one, and calls leased and not yet
// taken), calls held by workers now, and calls handed out and timed out
// since start.
type WorkerCounts struct {
	Connected, Waiting, InFlight int64
	HandedOut, TimedOut          int64
}

type workerCollector struct {
	counts func() map[string]WorkerCounts
	descs  [5]*prometheus.Desc
}

// WatchWorkers registers touba_worker_connected, touba_worker_calls_waiting,
// touba_worker_calls_in_flight, touba_worker_calls_handed_out_total and
// touba_worker_calls_timed_out_total by tool_ref, read at each scrape.
func (m *Metrics) WatchWorkers(counts func() map[string]WorkerCounts) {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "worker", name), help, []string{"tool_ref"}, nil)
	}
	m.r.MustRegister(&workerCollector{counts: counts, descs: [5]*prometheus.Desc{
		d("connected", "Workers of a worker binding connected to this node: takes open, or 1 when none is open but one was within 60 s."),
		d("calls_waiting", "Calls of a worker binding waiting for a worker: runs held back for want of one, and calls not yet taken."),
		d("calls_in_flight", "Calls of a worker binding handed to a worker and not answered yet."),
		d("calls_handed_out_total", "Calls of a worker binding handed to a worker (journaled dispatched)."),
		d("calls_timed_out_total", "Calls of a worker binding with no answer within timeout_ms of being handed out (unknown)."),
	}})
}

// Describe sends the descriptions.
func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the counts.
func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counts()
	for _, ref := range slices.Sorted(maps.Keys(counts)) {
		n := counts[ref]
		ch <- prometheus.MustNewConstMetric(c.descs[0], prometheus.GaugeValue, float64(n.Connected), ref)
		ch <- prometheus.MustNewConstMetric(c.descs[1], prometheus.GaugeValue, float64(n.Waiting), ref)
		ch <- prometheus.MustNewConstMetric(c.descs[2], prometheus.GaugeValue, float64(n.InFlight), ref)
		ch <- prometheus.MustNewConstMetric(c.descs[3], prometheus.CounterValue, float64(n.HandedOut), ref)
		ch <- prometheus.MustNewConstMetric(c.descs[4], prometheus.CounterValue, float64(n.TimedOut), ref)
	}
}
