package trigger_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/trigger"
)

// filterBenchProgram has the same five conditions three ways: none (the
// baseline), today's pointer forms, and one CEL item (SPEC §2.4: a
// five-condition filter costs under 5 µs more a delivery), and five CEL
// items.
const filterBenchProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:bench/None", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/Pointer", "source": {"kind": "webhook"},
   "filter": [{"pointer": "/body/type", "equals": "invoice.paid"},
              {"pointer": "/body/data/object/amount_paid", "exists": true},
              {"pointer": "/headers/x-shop", "equals": "main"},
              {"pointer": "/body/livemode", "equals": false},
              {"pointer": "/body/data/object/currency", "in": ["eur", "usd"]}],
   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/CEL", "source": {"kind": "webhook"},
   "filter": [{"cel": "body.type == 'invoice.paid' && body.data.object.amount_paid > 100 && headers['x-shop'] == 'main' && !body.livemode && body.data.object.currency in ['eur', 'usd']"}],
   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:bench/CEL5", "source": {"kind": "webhook"},
   "filter": [{"cel": "body.type == 'invoice.paid'"}, {"cel": "body.data.object.amount_paid > 100"},
              {"cel": "headers['x-shop'] == 'main'"}, {"cel": "!body.livemode"},
              {"cel": "body.data.object.currency in ['eur', 'usd']"}],
   "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`

// BenchmarkIntakeFilter is one 202 enqueued through intake's router with
// a 1 KiB Stripe-like body, per filter form: the difference to None is
// what the filter costs a delivery (body decoding included).
func BenchmarkIntakeFilter(b *testing.B) {
	body := `{"id":"evt_1","type":"invoice.paid","livemode":false,"data":{"object":{"id":"in_1","amount_paid":1234,` +
		`"currency":"eur","customer":"cus_1","lines":"` + strings.Repeat("x", 850) + `"}}}`
	p, err := trigger.ParseProgram("program.air.json", []byte(filterBenchProgram))
	if err != nil {
		b.Fatal(err)
	}
	in := &trigger.Intake{Queue: &nullQueue{}}
	in.SetConfig(&trigger.Config{Program: p})
	h := in.Router(nil)
	for _, name := range []string{"None", "Pointer", "CEL", "CEL5"} {
		b.Run(name, func(b *testing.B) {
			var i int
			b.ReportAllocs()
			start := cpuTime()
			defer func() { reportCPU(b, start) }()
			for b.Loop() {
				i++
				r := httptest.NewRequest(http.MethodPost, "/triggers/bench/"+name, strings.NewReader(body))
				r.Header.Set("X-Touba-Event-Id", "e"+strconv.Itoa(i))
				r.Header.Set("X-Shop", "main")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), "enqueued") {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}

// BenchmarkFilterTakes is the filter's decision alone (the body decoded
// into the filter document, then every condition), per form: what intake
// spends on a filter beyond a trigger without one.
func BenchmarkFilterTakes(b *testing.B) {
	body := []byte(`{"id":"evt_1","type":"invoice.paid","livemode":false,"data":{"object":{"id":"in_1","amount_paid":1234,` +
		`"currency":"eur","customer":"cus_1","lines":"` + strings.Repeat("x", 850) + `"}}}`)
	headers := map[string]string{"x-shop": "main", "content-type": "application/json", "x-touba-event-id": "e1"}
	p, err := trigger.ParseProgram("program.air.json", []byte(filterBenchProgram))
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	for _, name := range []string{"None", "Pointer", "CEL", "CEL5"} {
		t, _ := p.Lookup("bench/" + name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime()
			defer func() { reportCPU(b, start) }()
			for b.Loop() {
				if ok, err := t.Takes("e1", at, headers, body); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkFilterEval is the conditions alone, on a body decoded once.
func BenchmarkFilterEval(b *testing.B) {
	body := []byte(`{"id":"evt_1","type":"invoice.paid","livemode":false,"data":{"object":{"id":"in_1","amount_paid":1234,` +
		`"currency":"eur","customer":"cus_1","lines":"` + strings.Repeat("x", 850) + `"}}}`)
	headers := map[string]string{"x-shop": "main", "content-type": "application/json", "x-touba-event-id": "e1"}
	p, err := trigger.ParseProgram("program.air.json", []byte(filterBenchProgram))
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"Pointer", "CEL", "CEL5"} {
		t, _ := p.Lookup("bench/" + name)
		eval := trigger.FilterEval(t, headers, body)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			start := cpuTime()
			defer func() { reportCPU(b, start) }()
			for b.Loop() {
				if ok, err := eval(); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// reportCPU reports the process's CPU time per op since start: on a
// shared machine wall time per op counts the other processes' turns too.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}
