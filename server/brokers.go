package server

import "github.com/touba/touba-trigger/metrics"

// brokerCounts are the running configuration's broker bindings' counters,
// for the metrics.
func (s *Server) brokerCounts() map[string]metrics.BrokerCounts {
	out := map[string]metrics.BrokerCounts{}
	for ref, st := range s.current.Load().BrokerStats() {
		out[ref] = metrics.BrokerCounts{Published: st.Published.Load(), Duplicates: st.Duplicates.Load(),
			Rejected: st.Rejected.Load(), Unknown: st.Unknown.Load()}
	}
	return out
}
