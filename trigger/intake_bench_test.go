package trigger_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// nullQueue takes every delivery and stores nothing: the benchmark
// measures intake, not SQLite.
type nullQueue struct{ n atomic.Int64 }

func (q *nullQueue) Enqueue(_ context.Context, d *touba.Delivery) (touba.EnqueueResult, error) {
	return touba.EnqueueResult{QueueID: "q" + strconv.FormatInt(q.n.Add(1), 10), Created: true, Digest: d.Digest, Status: touba.StatusPending}, nil
}

// intakeBenchProgram: trigger:bench/Plain is named by no wait or cancel
// (the common case, which durable steps must leave as it was);
// trigger:bench/Paid is awaited by a wait_for and cancels through a
// cancel_on, so each of its deliveries gives an Offer and a Cancel.
const intakeBenchProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:bench/Plain", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/Paid", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/Order", "source": {"kind": "webhook"},
   "cancel_on": [{"trigger": "trigger:bench/Paid", "match": {"$ref": "/event/body/order_id"}, "on": "/body/order_id"}],
   "steps": [{"id": "paid", "wait_for": {"trigger": "trigger:bench/Paid", "match": {"$ref": "/event/body/order_id"},
     "on": "/body/data/order_id", "timeout_ms": 60000}}]}]}`

// BenchmarkIntakeDurable is one 202 through intake's router with a 1 KiB
// JSON body, for a trigger nothing awaits and for an awaited one.
func BenchmarkIntakeDurable(b *testing.B) {
	body := `{"order_id":"o-42","data":{"order_id":"o-42","pad":"` + strings.Repeat("x", 960) + `"}}`
	for _, name := range []string{"bench/Plain", "bench/Paid"} {
		b.Run(strings.TrimPrefix(name, "bench/"), func(b *testing.B) {
			p, err := trigger.ParseProgram("program.air.json", []byte(intakeBenchProgram))
			if err != nil && name == "bench/Plain" {
				// A build without durable steps (the baseline): the
				// plain trigger alone.
				p, err = trigger.ParseProgram("program.air.json", []byte(`{"air_version": "touba-air-v1", "triggers": [
				  {"ref": "trigger:bench/Plain", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`))
			}
			if err != nil {
				b.Skipf("program: %v", err)
			}
			in := &trigger.Intake{Queue: &nullQueue{}}
			in.SetConfig(&trigger.Config{Program: p})
			h := in.Router(nil)
			var i int
			b.ReportAllocs()
			for b.Loop() {
				i++
				r := httptest.NewRequest(http.MethodPost, "/triggers/"+name, strings.NewReader(body))
				r.Header.Set("X-Touba-Event-Id", "e"+strconv.Itoa(i))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusAccepted {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkSetDurable is intake's durable-steps work alone, per delivery.
func BenchmarkSetDurable(b *testing.B) {
	p, err := trigger.ParseProgram("program.air.json", []byte(intakeBenchProgram))
	if err != nil {
		b.Skipf("program: %v", err)
	}
	body := []byte(`{"order_id":"o-42","data":{"order_id":"o-42","pad":"` + strings.Repeat("x", 960) + `"}}`)
	for _, name := range []string{"bench/Plain", "bench/Paid", "bench/Order"} {
		t, _ := p.Lookup(name)
		b.Run(strings.TrimPrefix(name, "bench/"), func(b *testing.B) {
			d := &touba.Delivery{TriggerRef: t.Ref, EventID: "e", Body: body, Headers: map[string]string{"content-type": "application/json"}}
			b.ReportAllocs()
			for b.Loop() {
				d.Offers, d.Cancels, d.CancelKeys = nil, nil, nil
				t.SetDurable(d)
			}
		})
	}
}
