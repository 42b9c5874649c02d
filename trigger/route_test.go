package trigger_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

// routesProgram: one Stripe-like endpoint with no steps, three routes by
// type (one keyed by customer, one whose filter fails on a body without
// data), and a schedule with a route.
const routesProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:r/Route1", "source": {"kind": "trigger", "trigger": "trigger:r/Events"},
   "filter": [{"cel": "body.type == 'invoice.paid'"}],
   "concurrency": {"key": {"cel": "body.customer"}, "max": 1},
   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:r/Events", "source": {"kind": "webhook", "max_body_bytes": 4096, "event_id": {"json_pointer": "/id"}},
   "steps": []},
  {"ref": "trigger:r/Route2", "source": {"kind": "trigger", "trigger": "trigger:r/Events"},
   "filter": [{"pointer": "/body/type", "in": ["charge.refunded", "invoice.paid"]}],
   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:r/Route3", "source": {"kind": "trigger", "trigger": "r/Events"},
   "filter": [{"cel": "body.data.object.amount > 0"}],
   "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:r/Nightly", "source": {"kind": "schedule", "cron": "0 3 * * *"}, "steps": []},
  {"ref": "trigger:r/NightlyRoute", "source": {"kind": "trigger", "trigger": "trigger:r/Nightly"},
   "steps": [{"id": "s", "tool": "tool:x/Y"}]}]}`

func TestRoutesLoad(t *testing.T) {
	p, err := trigger.ParseProgram("p.json", []byte(routesProgram))
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := p.Lookup("r/Events")
	var names []string
	for _, r := range ev.Routes {
		names = append(names, r.Ref)
		if r.Accepting() != ev || !r.IsRoute() || r.Source.MaxBodyBytes != 4096 {
			t.Errorf("%s: accepting %v, route %v, max body %d; want Events', 4096", r.Ref, r.Accepting(), r.IsRoute(), r.Source.MaxBodyBytes)
		}
	}
	if got := strings.Join(names, ","); got != "trigger:r/Route1,trigger:r/Route2,trigger:r/Route3" {
		t.Errorf("routes %s, in the program's order", got)
	}
	if n, _ := p.Lookup("r/Nightly"); len(n.Routes) != 1 {
		t.Errorf("the schedule has %d routes, want 1", len(n.Routes))
	}
	// Every expression is listed with its path and cost, for check.
	if len(p.Expressions) != 3 || p.Expressions[1].Path != "$.triggers[0].filter[0].cel" || p.Expressions[0].Trigger != "trigger:r/Route1" ||
		p.Expressions[0].Expr.Cost == 0 {
		t.Errorf("expressions %+v", p.Expressions)
	}
}

func TestRoutesRefused(t *testing.T) {
	route := func(src string) string {
		return `{"air_version":"touba-air-v1","triggers":[{"ref":"trigger:a","source":{"kind":"webhook"},"steps":[]},` +
			`{"ref":"trigger:b","source":` + src + `,"steps":[]}]}`
	}
	for _, tc := range []struct{ name, src, want string }{
		{"no trigger", route(`{"kind":"trigger"}`), `$.triggers[1].source.trigger: required field is missing: the ref of the accepting trigger`},
		{"unknown", route(`{"kind":"trigger","trigger":"trigger:zz"}`), `$.triggers[1].source.trigger: no trigger "trigger:zz" in the program`},
		{"itself", route(`{"kind":"trigger","trigger":"trigger:b"}`), `$.triggers[1].source.trigger: a route cannot take its deliveries from itself`},
		{"verify", route(`{"kind":"trigger","trigger":"trigger:a","verify":{"scheme":"github","secret":{"env":"X"}}}`),
			`$.triggers[1].source.verify: a route (source kind "trigger") has no verify of its own: its accepting trigger's applies (known for a route: kind, trigger)`},
		{"event_id", route(`{"kind":"trigger","trigger":"trigger:a","event_id":{"header":"x"}}`),
			`$.triggers[1].source.event_id: a route (source kind "trigger") has no event_id of its own: its accepting trigger's applies (known for a route: kind, trigger)`},
		{"max_body_bytes", route(`{"kind":"trigger","trigger":"trigger:a","max_body_bytes":10}`),
			`$.triggers[1].source.max_body_bytes: a route (source kind "trigger") has no max_body_bytes of its own: its accepting trigger's applies (known for a route: kind, trigger)`},
		{"cron", route(`{"kind":"trigger","trigger":"trigger:a","cron":"* * * * *"}`),
			`$.triggers[1].source.cron: a route (source kind "trigger") has no cron of its own: its accepting trigger's applies (known for a route: kind, trigger)`},
		{"unknown field", route(`{"kind":"trigger","trigger":"trigger:a","path":"/x"}`),
			`$.triggers[1].source.path: unknown field (known: allow_from, catch_up, cron, event_id, kind, max_body_bytes, rate_limit, redelivery, timezone, trigger, verify)`},
		{"trigger on a webhook", route(`{"kind":"webhook","trigger":"trigger:a"}`),
			`$.triggers[1].source.trigger: unknown field (known: allow_from, event_id, kind, max_body_bytes, rate_limit, redelivery, verify)`},
		{"route of a route", `{"air_version":"touba-air-v1","triggers":[{"ref":"trigger:a","source":{"kind":"webhook"},"steps":[]},` +
			`{"ref":"trigger:b","source":{"kind":"trigger","trigger":"trigger:a"},"steps":[]},` +
			`{"ref":"trigger:c","source":{"kind":"trigger","trigger":"trigger:b"},"steps":[]}]}`,
			`$.triggers[2].source.trigger: trigger:b is itself a route (of trigger:a): no route of a route; name the accepting trigger trigger:a`},
		{"bad cel", route(`{"kind":"trigger","trigger":"trigger:a"},"filter":[{"cel":"body.type ==="}]`),
			`$.triggers[1].filter[0].cel: CEL: 1:13: Syntax error: token recognition error at: '='`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trigger.ParseProgram("p.json", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), "p.json: "+tc.want) {
				t.Fatalf("err=%v\nwant p.json: %s", err, tc.want)
			}
		})
	}
}

// routesFixture is an intake on routesProgram with real files.
func routesFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(dir, "queue.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(ctx, filepath.Join(dir, "state.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := trigger.ParseProgram("program.air.json", []byte(routesProgram))
	if err != nil {
		t.Fatal(err)
	}
	in := &trigger.Intake{Queue: q, Log: st}
	in.SetConfig(&trigger.Config{Program: p})
	f := &fixture{t: t, dir: dir, queue: q, state: st, intake: in, srv: newServer(t, in)}
	t.Cleanup(func() { q.Close(); st.Close() })
	return f
}

// byTrigger counts f's entries by trigger and status.
func (f *fixture) byTrigger(t *testing.T) map[string]string {
	t.Helper()
	all, err := f.queue.List(context.Background(), touba.EntryFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range all {
		out[strings.TrimPrefix(d.TriggerRef, "trigger:r/")] += d.Status + " "
	}
	return out
}

func TestIntakeRoutes(t *testing.T) {
	f := routesFixture(t)
	paid := `{"id":"evt_1","type":"invoice.paid","customer":"cus_1","data":{"object":{"amount":5}}}`
	if r := f.send("POST", "r/Events", paid, nil); r.Status != 202 || r.Answer != touba.IntakeEnqueued {
		t.Fatalf("delivery: %+v", r)
	}
	got := f.byTrigger(t)
	if got["Events"] != "done " || got["Route1"] != "pending " || got["Route2"] != "pending " || got["Route3"] != "pending " {
		t.Fatalf("entries %v: want Events done at once, one pending entry per route", got)
	}
	// A route's key is its own: Route1's entry is keyed by the customer.
	all, _ := f.queue.List(context.Background(), touba.EntryFilter{TriggerRef: "trigger:r/Route1"})
	if len(all) != 1 || all[0].ConcKey != `"cus_1"` || all[0].EventID != "evt_1" {
		t.Fatalf("Route1's entry %+v, want keyed \"cus_1\", event evt_1", all)
	}
	// The same delivery again: consumed (the accepting entry is done);
	// another body: a conflict. Neither creates anything.
	if r := f.send("POST", "r/Events", paid, nil); r.Status != 200 || r.Answer != touba.IntakeConsumed {
		t.Fatalf("redelivery: %+v", r)
	}
	if r := f.send("POST", "r/Events", strings.Replace(paid, "cus_1", "cus_2", 1), nil); r.Status != 409 {
		t.Fatalf("conflict: %+v", r)
	}
	if n := f.count(t); n != 4 {
		t.Fatalf("%d entries after the redeliveries, want 4", n)
	}
	// A refund feeds Route2 only; a body without data fails Route3's
	// expression: not fed, logged under Route3 with ExpressionFailed.
	refund := `{"id":"evt_2","type":"charge.refunded"}`
	if r := f.send("POST", "r/Events", refund, nil); r.Status != 202 || r.Answer != touba.IntakeEnqueued {
		t.Fatalf("refund: %+v", r)
	}
	if got := f.byTrigger(t); got["Route1"] != "pending " || got["Route2"] != "pending pending " || got["Route3"] != "pending " {
		t.Fatalf("entries %v after the refund", got)
	}
	var failed []*touba.LoggedDelivery
	for _, row := range f.logRows(t) {
		if row.ErrorCode == touba.EExpressionFailed {
			failed = append(failed, row)
		}
	}
	if len(failed) != 1 || failed[0].TriggerRef != "trigger:r/Route3" || failed[0].EventID != "evt_2" || string(failed[0].Body) != refund {
		t.Fatalf("ExpressionFailed rows %+v, want evt_2 under Route3 with its body", failed)
	}
	// The accepting entry says what each route did.
	ev, _ := f.queue.List(context.Background(), touba.EntryFilter{TriggerRef: "trigger:r/Events", Newest: true, Limit: 1})
	det, err := f.queue.Detail(context.Background(), ev[0].QueueID)
	if err != nil || det.Routing == nil || len(det.Routing.Routes) != 3 {
		t.Fatalf("routing %+v, %v", det, err)
	}
	r := det.Routing.Routes
	if r[0].Fed || r[0].Code != touba.IntakeFiltered || !r[1].Fed || r[1].QueueID == "" || r[2].Fed || r[2].Code != touba.EExpressionFailed {
		t.Fatalf("outcomes %+v: want Route1 filtered, Route2 fed, Route3 ExpressionFailed", r)
	}
}

func TestIntakeRouteIsNotAnEndpoint(t *testing.T) {
	f := routesFixture(t)
	r := f.send("POST", "r/Route2", `{"id":"evt_1","type":"charge.refunded"}`, nil)
	if r.Status != http.StatusNotFound || r.Error.Code != touba.ETriggerNotFound || !strings.Contains(r.Error.Message, "is a route") {
		t.Fatalf("POST to a route: %+v, want 404 TriggerNotFound", r)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d entries, want none", n)
	}
}

// A route key that fails refuses the delivery whole: 422, nothing
// anywhere.
func TestIntakeRouteKeyFails(t *testing.T) {
	f := routesFixture(t)
	r := f.send("POST", "r/Events", `{"id":"evt_1","type":"invoice.paid","data":{"object":{"amount":5}}}`, nil)
	if r.Status != http.StatusUnprocessableEntity || r.Error.Code != touba.EExpressionFailed || !strings.Contains(r.Error.Message, "route trigger:r/Route1") {
		t.Fatalf("answer %+v, want 422 ExpressionFailed naming Route1", r)
	}
	if n := f.count(t); n != 0 {
		t.Fatalf("%d entries, want none", n)
	}
}

func TestTickFeedsRoutes(t *testing.T) {
	f := routesFixture(t)
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	if st, _, err := f.intake.EnqueueTick(context.Background(), "trigger:r/Nightly", at); err != nil || st != touba.IntakeEnqueued {
		t.Fatalf("tick: %s, %v", st, err)
	}
	if got := f.byTrigger(t); got["Nightly"] != "done " || got["NightlyRoute"] != "pending " {
		t.Fatalf("entries %v, want the tick done and its route's entry pending", got)
	}
}
