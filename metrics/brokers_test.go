package metrics_test

import (
	"net/http/httptest"
	"testing"

	"github.com/touba/touba-trigger/metrics"
)

// The broker counters are read at scrape time, by tool_ref.
func TestWatchBrokers(t *testing.T) {
	m := metrics.New()
	counts := map[string]metrics.BrokerCounts{"tool:orders/Publish": {Published: 5, Duplicates: 1, Rejected: 2, Unknown: 3}}
	m.WatchBrokers(func() map[string]metrics.BrokerCounts { return counts })
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	got := Scrape(t, srv.URL)
	want(t, got, `touba_broker_published_total{tool_ref="tool:orders/Publish"}`, 5)
	want(t, got, `touba_broker_duplicates_total{tool_ref="tool:orders/Publish"}`, 1)
	want(t, got, `touba_broker_rejected_total{tool_ref="tool:orders/Publish"}`, 2)
	want(t, got, `touba_broker_unknown_total{tool_ref="tool:orders/Publish"}`, 3)
}
