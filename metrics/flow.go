package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Flow control (SPEC §2.1, §2.2): refusals by allow_from and rate_limit and
// filtered deliveries are counted in deliveries_total under their codes
// (TriggerSourceForbidden, TriggerRateLimited, filtered); what is held or
// waiting now is read here at scrape time.

// flow reads the held concurrency keys and the runs waiting for a binding
// slot at scrape time.
type flow struct {
	heldKeys func(ctx context.Context) (int64, error)
	waiting  func() int64

	held, wait *prometheus.Desc
}

// WatchFlow registers the gauges of held concurrency keys (read from the
// queue file) and of runs waiting for a binding's max_concurrency slot.
// Either func may be nil.
func (m *Metrics) WatchFlow(heldKeys func(ctx context.Context) (int64, error), waiting func() int64) {
	m.r.MustRegister(&flow{heldKeys: heldKeys, waiting: waiting,
		held: desc("concurrency_held_keys", "Concurrency keys holding back at least one pending entry behind an earlier one."),
		wait: desc("binding_slot_waiting_runs", "Runs waiting for a slot of a binding's max_concurrency, or for its open circuit."),
	})
}

func (f *flow) Describe(ch chan<- *prometheus.Desc) { ch <- f.held; ch <- f.wait }

func (f *flow) Collect(ch chan<- prometheus.Metric) {
	if f.heldKeys != nil {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		defer cancel()
		if n, err := f.heldKeys(ctx); err != nil {
			ch <- prometheus.NewInvalidMetric(f.held, err)
		} else {
			ch <- prometheus.MustNewConstMetric(f.held, prometheus.GaugeValue, float64(n))
		}
	}
	if f.waiting != nil {
		ch <- prometheus.MustNewConstMetric(f.wait, prometheus.GaugeValue, float64(f.waiting()))
	}
}
