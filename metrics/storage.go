package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	touba "github.com/touba/touba-trigger"
)

// storage exports the last measure of the storage (SPEC §8.1), taken by
// the daemon's --history loop, never at scrape time: a table's size on
// PostgreSQL sums its partitions, and a scrape stays cheap.
type storage struct {
	read    func() *touba.StorageReport
	history time.Duration
	now     func() time.Time

	bytes, free, oldest, window *prometheus.Desc
}

// WatchStorage exports the storage as read returns it (nil until first
// measured): touba_storage_bytes and touba_storage_free_bytes by file
// (SQLite) or table (PostgreSQL), as kind says, the age of the oldest
// finished entry --history is to forget (touba_oldest_entry_age_seconds)
// and --history itself (touba_history_seconds; the alert compares them).
// It returns what the loop calls after each pass, which counts them.
func (m *Metrics) WatchStorage(kind string, read func() *touba.StorageReport, history time.Duration) func(touba.PruneReport, error) {
	m.r.MustRegister(&storage{read: read, history: history, now: time.Now,
		bytes:  desc("storage_bytes", "Size on disk of each "+kind+" of the storage (a file with its WAL; a table with its partitions, indexes and TOAST).", kind),
		free:   desc("storage_free_bytes", "What each "+kind+" holds but no longer uses, reused before it grows (SQLite free pages).", kind),
		oldest: desc("oldest_entry_age_seconds", "Age of the oldest finished entry --history is to forget (0 when none): far past touba_history_seconds, pruning is stuck."),
		window: desc("history_seconds", "--history: finished entries older than this are forgotten (0 keeps everything)."),
	})
	entries := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "history_forgotten_entries_total",
		Help: "Entries --history forgot (with their runs, checkpoints and effects)."})
	parts := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "history_dropped_partitions_total",
		Help: "PostgreSQL partitions --history dropped whole."})
	failed := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "history_pass_failures_total",
		Help: "--history passes that failed (the next one tries again)."})
	skipped := prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "history_skipped_total",
		Help: "Steps of --history passes not taken because the maintenance lock was held elsewhere (PostgreSQL: another node's pass, one a pass on every node but the maintaining one; or an insert creating its partition): what they would have forgotten stays until a later pass."})
	m.r.MustRegister(entries, parts, failed, skipped)
	return func(r touba.PruneReport, err error) {
		entries.Add(float64(r.Entries))
		parts.Add(float64(r.Partitions))
		skipped.Add(float64(r.Skipped))
		if err != nil {
			failed.Inc()
		}
	}
}

func (s *storage) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.bytes, s.free, s.oldest, s.window} {
		ch <- d
	}
}

func (s *storage) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(s.window, prometheus.GaugeValue, s.history.Seconds())
	rep := s.read()
	if rep == nil {
		return
	}
	for _, f := range rep.Sizes {
		ch <- prometheus.MustNewConstMetric(s.bytes, prometheus.GaugeValue, float64(f.Bytes), f.Name)
		ch <- prometheus.MustNewConstMetric(s.free, prometheus.GaugeValue, float64(f.Free), f.Name)
	}
	age := 0.0
	if rep.OldestFinished != nil {
		age = max(0, s.now().Sub(*rep.OldestFinished).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(s.oldest, prometheus.GaugeValue, age)
}
