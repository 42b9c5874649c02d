// Package metrics is the daemon's Prometheus metrics (SPEC §7), on a
// registry of its own: deliveries by trigger and code, queue depth by
// status, the age of the oldest pending entry, dispatch latency and
// handler calls by outcome, effects by state, and commit batch sizes of
// the queue and the journal.
//
// Counters that intake and the dispatcher see happen (deliveries, calls)
// are counted as they happen; what the files hold (depth, effects) is read
// at scrape time, so a scrape always tells the truth of the files.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "touba"

// Metrics holds the collectors of one daemon.
type Metrics struct {
	reg *prometheus.Registry
	r   prometheus.Registerer // reg, with the node's label when it has one

	deliveries   *prometheus.CounterVec
	calls        *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	journalBatch prometheus.Histogram
	journalTook  prometheus.Histogram
	gathered     *prometheus.CounterVec // WatchGatherings
}

// New returns metrics on a fresh registry, with the Go runtime and process
// collectors.
func New() *Metrics { return NewNode("") }

// NewNode is New for one node of several on a shared database (SPEC §8):
// every metric carries the constant label node_id, so the nodes' series
// can be told apart and summed. "" adds no label.
func NewNode(nodeID string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.r = m.reg
	if nodeID != "" {
		m.r = prometheus.WrapRegistererWith(prometheus.Labels{"node_id": nodeID}, m.reg)
	}
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "deliveries_total",
		Help: "Webhook requests answered, by trigger, code (enqueued, duplicate, or the error code) and HTTP status."},
		[]string{"trigger_ref", "code", "status"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "handler_calls_total",
		Help: "Handler calls, by tool and outcome (applied, not_applied, unknown for external writes; ok or error otherwise)."},
		[]string{"tool_ref", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "dispatch_latency_seconds",
		Help:    "Time from the start of a handler call to its answer, by tool.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}},
		[]string{"tool_ref"})
	m.journalBatch = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "journal_commit_batch_size",
		Help:    "Effect journal transitions committed together in one transaction (one fsync).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	m.journalTook = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "journal_commit_seconds",
		Help:    "Time one effect journal commit took, fsync included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 12)})
	m.r.MustRegister(m.deliveries, m.calls, m.latency, m.journalBatch, m.journalTook,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text format. A collector
// that fails (a file that does not answer) leaves its metrics out of that
// scrape and the rest is still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ObserveDelivery counts one intake answer; it is trigger.Intake.Observe.
func (m *Metrics) ObserveDelivery(triggerRef, code string, status int) {
	m.deliveries.WithLabelValues(triggerRef, code, strconv.Itoa(status)).Inc()
}

// ObserveCall counts one handler call and its duration; it is
// dispatcher.Options.Observe.
func (m *Metrics) ObserveCall(toolRef, outcome string, d time.Duration) {
	m.calls.WithLabelValues(toolRef, outcome).Inc()
	m.latency.WithLabelValues(toolRef).Observe(d.Seconds())
}

// ObserveJournalCommit records one journal commit; it is
// journal.Options.OnCommit.
func (m *Metrics) ObserveJournalCommit(transitions int, took time.Duration) {
	m.journalBatch.Observe(float64(transitions))
	m.journalTook.Observe(took.Seconds())
}

// WatchTracing registers the count of spans the trace exporter failed to
// send (SPEC §7), read at scrape time. It is 0 while tracing is off.
func (m *Metrics) WatchTracing(dropped func() uint64) {
	m.r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "trace_spans_dropped_total",
		Help: "Spans the OTLP exporter failed to send (the collector refused them or could not be reached); they are lost."},
		func() float64 { return float64(dropped()) }))
}
