package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	touba "github.com/touba/touba-trigger"
)

// Holds (SPEC §6 triggers pause, §2.2 circuit): the paused triggers, read
// from the store at scrape time (on PostgreSQL the cluster's), and the
// bindings' circuits as this node sees them, with a counter of their
// transitions.

type holds struct {
	paused   func(ctx context.Context) ([]touba.TriggerPause, error)
	circuits func() []touba.CircuitState
	// triggers and tools are every ref that gets a series (0 or 1), so
	// an alert sees a circuit close or a pause end rather than a series
	// vanish.
	triggers func() []string
	tools    func() []string

	pausedDesc, openDesc *prometheus.Desc
}

// WatchHolds registers touba_trigger_paused{trigger_ref} and
// touba_circuit_open{tool_ref} (1 open or probing, 0 closed), and returns
// the func that counts a circuit transition in
// touba_circuit_transitions_total{tool_ref,to} (dispatcher.Options.OnCircuit).
// triggers and tools list the refs of the running configuration.
func (m *Metrics) WatchHolds(paused func(ctx context.Context) ([]touba.TriggerPause, error), circuits func() []touba.CircuitState,
	triggers, tools func() []string) func(toolRef, from, to string) {
	m.r.MustRegister(&holds{paused: paused, circuits: circuits, triggers: triggers, tools: tools,
		pausedDesc: prometheus.NewDesc(namespace+"_trigger_paused", "1 when the trigger is paused (its dispatch held; intake still accepts).",
			[]string{"trigger_ref"}, nil),
		openDesc: prometheus.NewDesc(namespace+"_circuit_open", "1 when the binding's circuit is open or probing: runs needing it wait.",
			[]string{"tool_ref"}, nil),
	})
	transitions := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "circuit_transitions_total",
		Help: "Circuit transitions of a binding, by the state entered (open, probing, closed)."}, []string{"tool_ref", "to"})
	m.r.MustRegister(transitions)
	// Every circuit-bound binding's series exist from the start, at 0: a
	// rate() over a series that appears only at its first transition
	// misses that transition.
	if tools != nil {
		for _, ref := range tools() {
			for _, to := range []string{touba.CircuitOpen, touba.CircuitProbing, touba.CircuitClosed} {
				transitions.WithLabelValues(ref, to)
			}
		}
	}
	return func(toolRef, _, to string) { transitions.WithLabelValues(toolRef, to).Inc() }
}

func (h *holds) Describe(ch chan<- *prometheus.Desc) { ch <- h.pausedDesc; ch <- h.openDesc }

func (h *holds) Collect(ch chan<- prometheus.Metric) {
	if h.paused != nil {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		defer cancel()
		ps, err := h.paused(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(h.pausedDesc, err)
		} else {
			emit(ch, h.pausedDesc, h.triggers, func(yield func(string)) {
				for _, p := range ps {
					yield(p.TriggerRef)
				}
			})
		}
	}
	if h.circuits != nil {
		cs := h.circuits()
		emit(ch, h.openDesc, h.tools, func(yield func(string)) {
			for _, c := range cs {
				if c.State != touba.CircuitClosed {
					yield(c.ToolRef)
				}
			}
		})
	}
}

// emit writes 1 for each ref of on and 0 for every other ref of all.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, all func() []string, on func(yield func(string))) {
	set := map[string]float64{}
	if all != nil {
		for _, r := range all() {
			set[r] = 0
		}
	}
	on(func(r string) { set[r] = 1 })
	for r, v := range set {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, r)
	}
}
