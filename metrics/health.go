package metrics

import "github.com/prometheus/client_golang/prometheus"

// health reports readiness (and, on PostgreSQL, whether the database
// answered) at scrape time, from the daemon's last background check: the
// alert rules in deploy/prometheus read these rather than probing /readyz.
type health struct {
	ready    func() bool
	database func() bool // nil without --database

	readyDesc, dbDesc *prometheus.Desc
}

// WatchHealth registers touba_ready (1 when /readyz answers 200, 0 when it
// fails: draining, a file or disk not writable, the journal lock lost, the
// database not answering) and, when database is not nil,
// touba_database_up (1 when the last check reached the database).
func (m *Metrics) WatchHealth(ready func() bool, database func() bool) {
	m.r.MustRegister(&health{ready: ready, database: database,
		readyDesc: desc("ready", "1 when the node is ready (/readyz answers 200), 0 when not."),
		dbDesc:    desc("database_up", "1 when the node's last health check reached its PostgreSQL database, 0 when not (only with --database)."),
	})
}

func (h *health) Describe(ch chan<- *prometheus.Desc) { ch <- h.readyDesc; ch <- h.dbDesc }

func (h *health) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(h.readyDesc, prometheus.GaugeValue, b2f(h.ready()))
	if h.database != nil {
		ch <- prometheus.MustNewConstMetric(h.dbDesc, prometheus.GaugeValue, b2f(h.database()))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
