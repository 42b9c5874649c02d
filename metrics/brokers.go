package metrics

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// BrokerCounts are one broker binding's publishes (SPEC §2.2 "Broker
// destinations"): acknowledged (duplicates included), acknowledged as a
// duplicate, refused (by the broker or the egress guard), and unknown.
type BrokerCounts struct {
	Published, Duplicates, Rejected, Unknown int64
}

// brokerCollector reads the broker bindings' counters at scrape time.
type brokerCollector struct {
	counts func() map[string]BrokerCounts
	descs  [4]*prometheus.Desc
}

// WatchBrokers registers touba_broker_published_total,
// touba_broker_duplicates_total, touba_broker_rejected_total and
// touba_broker_unknown_total by tool_ref, read from counts at each scrape.
// The counters are the running configuration's: a reload starts them again
// (a counter reset to Prometheus).
func (m *Metrics) WatchBrokers(counts func() map[string]BrokerCounts) {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "broker", name), help, []string{"tool_ref"}, nil)
	}
	m.r.MustRegister(&brokerCollector{counts: counts, descs: [4]*prometheus.Desc{
		d("published_total", "Messages a broker binding published and the broker acknowledged (duplicates included)."),
		d("duplicates_total", "Publishes the broker acknowledged as a duplicate of an earlier one with the same id (applied)."),
		d("rejected_total", "Publishes refused by the broker (BrokerRejected) or by the egress guard (EgressForbidden)."),
		d("unknown_total", "Publishes sent that got no acknowledgement (connection lost, timeout): unknown outcomes."),
	}})
}

// Describe sends the four descriptions.
func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the counters.
func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.counts()
	for _, ref := range slices.Sorted(maps.Keys(counts)) {
		n := counts[ref]
		for i, v := range []int64{n.Published, n.Duplicates, n.Rejected, n.Unknown} {
			ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(v), ref)
		}
	}
}
