package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	touba "github.com/touba/touba-trigger"
)

// Gatherings (SPEC §2.1 debounce and batch): the gatherings open now, read
// at scrape time (every node sees the cluster's on a shared database), and
// what this node's intake did with each gathered delivery (opened a
// gathering, merged into one, or filled a batch, which started). The
// merged entries are touba_queue_entries{status="merged"}.

// gatherings reads the open gatherings at scrape time.
type gatherings struct {
	counts func(ctx context.Context) (open, merged int64, err error)
	open   *prometheus.Desc
}

// WatchGatherings registers touba_gatherings_open, read by counts, and the
// counter touba_gather_deliveries_total{trigger_ref, outcome} that
// ObserveGather feeds.
func (m *Metrics) WatchGatherings(counts func(ctx context.Context) (open, merged int64, err error)) {
	m.r.MustRegister(&gatherings{counts: counts,
		open: desc("gatherings_open", "Debounce and batch gatherings open now: their carriers wait for their time or to fill."),
	})
	m.gathered = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "gather_deliveries_total",
		Help: "Gathered deliveries accepted by this node, by trigger and outcome: opened (a new gathering), merged (into an open one), started (merged, and it filled a batch)."},
		[]string{"trigger_ref", "outcome"})
	m.r.MustRegister(m.gathered)
}

// GatheringTriggers makes the counter's series of each trigger that
// gathers, at 0, so dashboards and rate() see them before the first
// delivery (called at start and at each reload).
func (m *Metrics) GatheringTriggers(refs []string) {
	if m.gathered == nil {
		return
	}
	for _, ref := range refs {
		for _, o := range []string{touba.GatherOpened, touba.GatherMerged, touba.GatherStarted} {
			m.gathered.WithLabelValues(ref, o)
		}
	}
}

// ObserveGather counts one gathered delivery of triggerRef (outcome:
// touba.GatherOpened, GatherMerged or GatherStarted).
func (m *Metrics) ObserveGather(triggerRef, outcome string) {
	if m.gathered != nil {
		m.gathered.WithLabelValues(triggerRef, outcome).Inc()
	}
}

func (g *gatherings) Describe(ch chan<- *prometheus.Desc) { ch <- g.open }

func (g *gatherings) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if open, _, err := g.counts(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(g.open, err)
	} else {
		ch <- prometheus.MustNewConstMetric(g.open, prometheus.GaugeValue, float64(open))
	}
}
