package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Flow control (SPEC §2.1, §2.2): refusals by allow_from and rate_limit and
// filtered deliveries are counted in deliveries_total under their codes
// (TriggerSourceForbidden, TriggerRateLimited, filtered); what is held or
// waiting now is read here at scrape time, with the runs handed back on
// each binding.

// flow reads the held concurrency keys and the runs waiting for a binding
// slot at scrape time.
type flow struct {
	heldKeys func(ctx context.Context) (int64, error)
	waiting  func() int64

	held, wait *prometheus.Desc
}

// WatchFlow registers the gauges of held concurrency keys (read from the
// queue file) and of runs waiting inside a worker for a binding's
// max_concurrency slot or open circuit: only with a store without fair
// dispatch, since with one a held run is handed back to the queue
// (WatchHeldRuns) and this stays 0. Either func may be nil.
func (m *Metrics) WatchFlow(heldKeys func(ctx context.Context) (int64, error), waiting func() int64) {
	m.r.MustRegister(&flow{heldKeys: heldKeys, waiting: waiting,
		held: desc("concurrency_held_keys", "Concurrency keys holding back at least one pending entry behind an earlier one."),
		wait: desc("binding_slot_waiting_runs",
			"Runs waiting inside a worker for a slot of a binding's max_concurrency, or for its open circuit (stores without fair dispatch only; with it, see touba_binding_held_runs)."),
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

// heldRuns reads the runs handed back on each binding at scrape time.
type heldRuns struct {
	held  func() map[string]int64
	tools func() []string
	d     *prometheus.Desc
}

// WatchHeldRuns registers touba_binding_held_runs{tool_ref}: the runs
// handed back to the queue on a binding (no free max_concurrency slot, or
// its circuit open) as held reads them (dispatcher.Dispatcher.Held: as
// this node last read them from the store or counted them). Either func
// may be nil; tools lists the bindings that can hold a run, so each has a
// series from the start, at 0.
func (m *Metrics) WatchHeldRuns(held func() map[string]int64, tools func() []string) {
	m.r.MustRegister(&heldRuns{held: held, tools: tools,
		d: desc("binding_held_runs",
			"Runs handed back to the queue on a binding, waiting pending in no worker and no lease for a slot of its max_concurrency or for its open circuit.",
			"tool_ref"),
	})
}

func (h *heldRuns) Describe(ch chan<- *prometheus.Desc) { ch <- h.d }

func (h *heldRuns) Collect(ch chan<- prometheus.Metric) {
	set := map[string]int64{}
	if h.tools != nil {
		for _, ref := range h.tools() {
			set[ref] = 0
		}
	}
	if h.held != nil {
		for ref, n := range h.held() {
			set[ref] = n
		}
	}
	for ref, n := range set {
		ch <- prometheus.MustNewConstMetric(h.d, prometheus.GaugeValue, float64(n), ref)
	}
}
