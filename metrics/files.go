package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	touba "github.com/touba/touba-trigger"
)

// Queue is what the metrics read of the queue.
type Queue interface {
	CountByStatus(ctx context.Context) (map[string]int64, error)
	OldestPending(ctx context.Context) (time.Time, bool, error)
	QueueStats() touba.QueueStats
}

// Journal is what the metrics read of the effect journal.
type Journal interface {
	CountByState(ctx context.Context) (map[string]int64, error)
	JournalStats() touba.JournalStats
}

// DeliveryLog reports the delivery log's writes.
type DeliveryLog interface {
	LogStats() (written, dropped int64)
}

// scrapeTimeout bounds the reads of one scrape.
const scrapeTimeout = 5 * time.Second

var (
	// Every status has a series, zero or not, so dashboards and alerts
	// see waiting and cancelled entries before the first one exists.
	statuses = []string{touba.StatusPending, touba.StatusRunning, touba.StatusWaiting, touba.StatusDone, touba.StatusFailed,
		touba.StatusParked, touba.StatusCancelled, touba.StatusMerged}
	states = []string{touba.EffectPrepared, touba.EffectDispatched, touba.EffectApplied, touba.EffectNotApplied, touba.EffectUnknown}
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

// files reads the queue, the journal and the delivery log at scrape time.
type files struct {
	q   Queue
	j   Journal // may be nil
	log DeliveryLog
	now func() time.Time

	depth, oldest, qCommits, qBatched, qEnqueued *prometheus.Desc
	effects, jCommits, jTransitions, jFailed     *prometheus.Desc
	logRows                                      *prometheus.Desc
}

// WatchFiles registers the metrics read from the files at scrape time. j
// and log may be nil.
func (m *Metrics) WatchFiles(q Queue, j Journal, log DeliveryLog) {
	m.r.MustRegister(&files{q: q, j: j, log: log, now: time.Now,
		depth:     desc("queue_entries", "Queue entries by status.", "status"),
		oldest:    desc("queue_oldest_pending_age_seconds", "Age of the oldest pending entry (0 when none is pending)."),
		qCommits:  desc("queue_commits_total", "Queue transactions committed (one fsync each)."),
		qBatched:  desc("queue_commit_requests_total", "Enqueues and state changes committed; divided by queue_commits_total, the mean commit batch size."),
		qEnqueued: desc("queue_enqueued_total", "Entries created since start."),
		effects:   desc("effects", "Journaled effects by state.", "state"),
		jCommits:  desc("journal_commits_total", "Effect journal transactions committed."),
		jTransitions: desc("journal_transitions_total",
			"Effect journal operations committed (an in-process handler's prepared+dispatched is one); divided by journal_commits_total, the mean commit batch size."),
		jFailed: desc("journal_transitions_failed_total", "Effect journal transitions that failed."),
		logRows: desc("delivery_log_rows_total", "Delivery log rows written, or dropped because the log's buffer was full.", "result"),
	})
}

func (f *files) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.depth, f.oldest, f.qCommits, f.qBatched, f.qEnqueued, f.effects,
		f.jCommits, f.jTransitions, f.jFailed, f.logRows} {
		ch <- d
	}
}

func (f *files) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	if counts, err := f.q.CountByStatus(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(f.depth, err)
	} else {
		for _, s := range statuses {
			ch <- prometheus.MustNewConstMetric(f.depth, prometheus.GaugeValue, float64(counts[s]), s)
		}
	}
	if at, ok, err := f.q.OldestPending(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(f.oldest, err)
	} else {
		age := 0.0
		if ok {
			age = max(0, f.now().Sub(at).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(f.oldest, prometheus.GaugeValue, age)
	}
	st := f.q.QueueStats()
	ch <- prometheus.MustNewConstMetric(f.qCommits, prometheus.CounterValue, float64(st.Commits))
	ch <- prometheus.MustNewConstMetric(f.qBatched, prometheus.CounterValue, float64(st.Batched))
	ch <- prometheus.MustNewConstMetric(f.qEnqueued, prometheus.CounterValue, float64(st.Enqueued))
	if f.j != nil {
		if counts, err := f.j.CountByState(ctx); err != nil {
			ch <- prometheus.NewInvalidMetric(f.effects, err)
		} else {
			for _, s := range states {
				ch <- prometheus.MustNewConstMetric(f.effects, prometheus.GaugeValue, float64(counts[s]), s)
			}
		}
		js := f.j.JournalStats()
		ch <- prometheus.MustNewConstMetric(f.jCommits, prometheus.CounterValue, float64(js.Commits))
		ch <- prometheus.MustNewConstMetric(f.jTransitions, prometheus.CounterValue, float64(js.Transitions))
		ch <- prometheus.MustNewConstMetric(f.jFailed, prometheus.CounterValue, float64(js.Failed))
	}
	if f.log != nil {
		written, dropped := f.log.LogStats()
		ch <- prometheus.MustNewConstMetric(f.logRows, prometheus.CounterValue, float64(written), "written")
		ch <- prometheus.MustNewConstMetric(f.logRows, prometheus.CounterValue, float64(dropped), "dropped")
	}
}
