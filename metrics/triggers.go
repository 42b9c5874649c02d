package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	touba "github.com/touba/touba-trigger"
)

// Runnable, held and running entries per trigger (SPEC §2.1 dispatch, §2.2
// "Holds take nothing"), read from the queue store at scrape time (on
// PostgreSQL the cluster's, so every node reports the same counts: take
// their max, not their sum), and the runs this node's dispatcher handed
// back on each binding.

// heldReasons are the values of touba_trigger_held_entries' reason label:
// the trigger's pause, its concurrency key at max, its binding's
// max_concurrency, its binding's open circuit.
var heldReasons = []string{"paused", "key", "slot", "circuit"}

// TriggerCounts is what the per-trigger gauges read of the queue store
// (touba.HoldStore's CountByTrigger and PausedTriggers).
type TriggerCounts interface {
	CountByTrigger(ctx context.Context) (map[string]map[string]int64, error)
	PausedTriggers(ctx context.Context) ([]touba.TriggerPause, error)
}

type triggerGauges struct {
	q TriggerCounts
	// triggers are refs that get series even with no active entry (the
	// running program's), so a trigger that drains reads 0 rather than
	// vanishing.
	triggers func() []string

	runnable, running, held *prometheus.Desc
}

// WatchTriggers registers touba_trigger_runnable_entries{trigger_ref}
// (pending entries no hold keeps back; 0 while paused),
// touba_trigger_running_entries{trigger_ref} and
// touba_trigger_held_entries{trigger_ref,reason} (pending entries held
// back; reason paused, key, slot or circuit, all four always written),
// for every trigger with active entries and every ref of triggers (which
// may be nil).
func (m *Metrics) WatchTriggers(q TriggerCounts, triggers func() []string) {
	m.r.MustRegister(&triggerGauges{q: q, triggers: triggers,
		runnable: desc("trigger_runnable_entries", "Pending entries of the trigger that no hold keeps back (due or not); 0 while it is paused.",
			"trigger_ref"),
		running: desc("trigger_running_entries", "Entries of the trigger running now.", "trigger_ref"),
		held: desc("trigger_held_entries",
			"Pending entries of the trigger held back, by reason: paused (the trigger's pause), key (its concurrency key at max), slot (no free max_concurrency slot of its binding), circuit (its binding's circuit open).",
			"trigger_ref", "reason"),
	})
}

func (g *triggerGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.runnable
	ch <- g.running
	ch <- g.held
}

func (g *triggerGauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := g.q.CountByTrigger(ctx)
	if err == nil {
		var ps []touba.TriggerPause
		if ps, err = g.q.PausedTriggers(ctx); err == nil {
			g.emit(ch, counts, ps)
			return
		}
	}
	for _, d := range []*prometheus.Desc{g.runnable, g.running, g.held} {
		ch <- prometheus.NewInvalidMetric(d, err)
	}
}

func (g *triggerGauges) emit(ch chan<- prometheus.Metric, counts map[string]map[string]int64, ps []touba.TriggerPause) {
	paused := map[string]bool{}
	for _, p := range ps {
		paused[p.TriggerRef] = true
	}
	refs := map[string]bool{}
	for ref := range counts {
		refs[ref] = true
	}
	if g.triggers != nil {
		for _, ref := range g.triggers() {
			refs[ref] = true
		}
	}
	gauge := func(d *prometheus.Desc, n int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(n), labels...)
	}
	for ref := range refs {
		c := counts[ref] // nil for a trigger with no active entry: all 0
		// The holds are apart from each other, and all are pending; a
		// pause holds what else would run (as admin.Trigger counts them).
		key, slot, circuit := c["held"], c[touba.HeldSlot], c[touba.HeldCircuit]
		free := max(0, c[touba.StatusPending]-key-slot-circuit)
		var runnable, held int64
		if paused[ref] {
			held = free
		} else {
			runnable = free
		}
		gauge(g.runnable, runnable, ref)
		gauge(g.running, c[touba.StatusRunning], ref)
		for i, n := range []int64{held, key, slot, circuit} {
			gauge(g.held, n, ref, heldReasons[i])
		}
	}
}
