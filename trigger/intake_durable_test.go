package trigger_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/trigger"
)

// The values an intake of each trigger of the four flows gives the queue.
func TestIntake_DurableValues(t *testing.T) {
	p := loadFlows(t)
	f := newDurableIntake(t, p)
	var (
		paidKey    = touba.WaitKeyOf("trigger:shop/Checkout", "paid", "trigger:stripe/PaymentSucceeded", "/body/data/object/metadata/order_id")
		invoiceKey = touba.CancelKeyOf("trigger:billing/InvoiceOverdue", "trigger:billing/InvoicePaid", "/body/data/object/id",
			[]byte(`{"$ref":"/event/body/invoice_id"}`))
		accountKey = touba.CancelKeyOf("trigger:billing/InvoiceOverdue", "trigger:billing/InvoicePaid", "/headers/x-account",
			[]byte(`{"$ref":"/event/headers/x-account"}`))
	)
	payment := func(id, orderID string) string {
		meta := `{}`
		if orderID != "" {
			meta = `{"order_id":` + orderID + `}`
		}
		return `{"id":"` + id + `","type":"payment_intent.succeeded","data":{"object":{"metadata":` + meta + `}}}`
	}
	tests := []struct {
		name, trigger, body     string
		hdr                     map[string]string
		offers, cancels, ckeys  []touba.MatchValue
		matched, cancelledEntry bool
	}{
		{name: "checkout", trigger: "shop/Checkout", body: `{"checkout_id":"c1","order_id":"o-42"}`},
		{name: "payment of an order", trigger: "stripe/PaymentSucceeded", body: payment("evt_1", `"o-42"`),
			offers: mv(paidKey, `"o-42"`), matched: true},
		{name: "payment, numeric order id", trigger: "stripe/PaymentSucceeded", body: payment("evt_2", `42`),
			offers: mv(paidKey, `42`), matched: true},
		{name: "payment, object order id in any key order", trigger: "stripe/PaymentSucceeded", body: payment("evt_3", `{"z":1,"a":[true,null]}`),
			offers: mv(paidKey, `{"a":[true,null],"z":1}`), matched: true},
		{name: "payment without order id", trigger: "stripe/PaymentSucceeded", body: payment("evt_4", "")},
		{name: "payment, null order id", trigger: "stripe/PaymentSucceeded", body: payment("evt_5", `null`)},
		{name: "invoice overdue", trigger: "billing/InvoiceOverdue", body: `{"id":"ov1","invoice_id":"in_1"}`,
			hdr: map[string]string{"X-Account": "acct_9"}, ckeys: mv(invoiceKey, `"in_1"`, accountKey, `"acct_9"`)},
		{name: "invoice overdue without account", trigger: "billing/InvoiceOverdue", body: `{"id":"ov2","invoice_id":"in_2"}`,
			ckeys: mv(invoiceKey, `"in_2"`)},
		{name: "invoice paid", trigger: "billing/InvoicePaid", body: `{"id":"pd1","data":{"object":{"id":"in_1"}}}`,
			hdr: map[string]string{"X-Account": "acct_9"}, cancels: mv(invoiceKey, `"in_1"`, accountKey, `"acct_9"`), cancelledEntry: true},
		{name: "invoice paid, header only", trigger: "billing/InvoicePaid", body: `{"id":"pd2","data":{"object":{}}}`,
			hdr: map[string]string{"X-Account": "acct_9"}, cancels: mv(accountKey, `"acct_9"`), cancelledEntry: true},
		{name: "order", trigger: "shop/Order", body: `{"order_id":"o-1","customer_id":"c"}`, hdr: map[string]string{"X-Touba-Event-Id": "o1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.notified.Load()
			d := f.post(t, tt.trigger, tt.body, tt.hdr)
			tr := lookup(t, p, "trigger:"+tt.trigger)
			if d.ProgramDigest != tr.Digest || d.ProgramDigest == "" {
				t.Fatalf("ProgramDigest=%q, want %q", d.ProgramDigest, tr.Digest)
			}
			if !reflect.DeepEqual(d.Offers, tt.offers) || !reflect.DeepEqual(d.Cancels, tt.cancels) || !reflect.DeepEqual(d.CancelKeys, tt.ckeys) {
				t.Fatalf("Offers=%v Cancels=%v CancelKeys=%v\nwant     %v         %v            %v",
					d.Offers, d.Cancels, d.CancelKeys, tt.offers, tt.cancels, tt.ckeys)
			}
			if got := f.notified.Load() - before; got != 1 {
				t.Fatalf("dispatcher notified %d times, want once", got)
			}
			logged := f.log.String()
			if tt.matched && !strings.Contains(logged, `"matched":["q-waiting-`+d.EventID+`"]`) {
				t.Fatalf("match not logged:\n%s", logged)
			}
			if tt.cancelledEntry && !strings.Contains(logged, `"cancelled":["q-cancelled-`+d.EventID+`"]`) {
				t.Fatalf("cancel not logged:\n%s", logged)
			}
		})
	}
	for _, line := range strings.Split(strings.TrimSpace(f.log.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if msg := e["message"]; (msg == "delivery matched waiting entries" || msg == "delivery cancelled entries") &&
			(e["level"] != "info" || e["queue_id"] == nil || e["trigger_ref"] == nil) {
			t.Fatalf("log line %s", line)
		}
	}
}

// A body that is not JSON gives no value at a body pointer; headers
// still do. The values are read from the headers intake keeps.
func TestIntake_DurableValuesNonJSONBody(t *testing.T) {
	p := MustParse(t, doc(
		trig("trigger:a", okSource, `[{"id":"b","wait_for":{"trigger":"trigger:b","match":"x","on":"/body"}},`+
			`{"id":"h","wait_for":{"trigger":"trigger:b","match":"x","on":"/headers/x-k"}},`+
			`{"id":"all","wait_for":{"trigger":"trigger:b","match":"x","on":"/headers"}},`+
			`{"id":"deep","wait_for":{"trigger":"trigger:b","match":"x","on":"/headers/x-k/0"}},`+
			`{"id":"auth","wait_for":{"trigger":"trigger:b","match":"x","on":"/headers/authorization"}}]`),
		trig("trigger:b", okSource, `[]`)))
	f := newDurableIntake(t, p)
	d := f.post(t, "b", `not json {`, map[string]string{"X-K": "v1", "Authorization": "Bearer x", "X-Touba-Event-Id": "e1"})
	// Authorization is never kept, so never offered; "/headers" is every
	// kept header (the client adds its own).
	keyOf := func(step, on string) string { return touba.WaitKeyOf("trigger:a", step, "trigger:b", on) }
	if len(d.Offers) != 2 || d.Offers[0] != (touba.MatchValue{Key: keyOf("h", "/headers/x-k"), Value: `"v1"`}) || d.Offers[1].Key != keyOf("all", "/headers") {
		t.Fatalf("Offers=%v, want the header x-k and all headers", d.Offers)
	}
	var all map[string]string
	if err := json.Unmarshal([]byte(d.Offers[1].Value), &all); err != nil || all["x-k"] != "v1" || all["x-touba-event-id"] != "e1" {
		t.Fatalf("all headers %s: %v", d.Offers[1].Value, err)
	}
	if _, ok := all["authorization"]; ok {
		t.Fatalf("Authorization offered: %s", d.Offers[1].Value)
	}
	d = f.post(t, "b", `{"k":1} {"trailing":true}`, map[string]string{"X-Touba-Event-Id": "e2"})
	if len(d.Offers) != 1 || d.Offers[0].Key != keyOf("all", "/headers") {
		t.Fatalf("two documents read as JSON: Offers=%v, want all headers only", d.Offers)
	}
	d = f.post(t, "b", `"just a string"`, map[string]string{"X-Touba-Event-Id": "e3"})
	if got := d.Offers[0]; got != (touba.MatchValue{Key: keyOf("b", "/body"), Value: `"just a string"`}) {
		t.Fatalf("Offers=%v", d.Offers)
	}
}

// Schedule ticks go through intake's values too: a tick can be awaited
// and can cancel, and a schedule's own cancel_on keys its entries.
func TestIntake_DurableValuesOfTicks(t *testing.T) {
	p := MustParse(t, doc(
		`{"ref":"trigger:nightly","source":{"kind":"schedule","cron":"0 3 * * *"},"steps":[{"id":"s","sleep":{"ms":60000}}],`+
			`"cancel_on":[{"trigger":"trigger:stop","match":{"$ref":"/event/body/scheduled_for"},"on":"/body/night"},`+
			`{"trigger":"trigger:stop","match":{"$ref":"/event/event_id"},"on":"/body/night"},`+
			`{"trigger":"trigger:stop","match":{"$ref":"/event/trigger_ref"},"on":"/body/ref"},`+
			`{"trigger":"trigger:stop","match":{"$ref":"/event/received_at"},"on":"/body/at"},`+
			`{"trigger":"trigger:stop","match":{"$ref":"/event/event_id/x"},"on":"/body/at"}]}`,
		trig("trigger:hold", okSource, `[{"id":"w","wait_for":{"trigger":"trigger:nightly","match":{"$ref":"/event/body/night"},"on":"/body/scheduled_for"}}]`),
		`{"ref":"trigger:stop","source":{"kind":"webhook"},"steps":[],"cancel_on":[{"trigger":"trigger:nightly","match":{"$ref":"/event/body/night"},"on":"/body/scheduled_for"}]}`))
	f := newDurableIntake(t, p)
	recv := time.Date(2026, 12, 2, 2, 0, 1, 500e6, time.UTC)
	f.in.Now = func() time.Time { return recv }
	at := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	status, id, err := f.in.EnqueueTick(context.Background(), "trigger:nightly", at)
	if err != nil || status != touba.IntakeEnqueued || id != "q-2026-12-02T02:00:00Z" {
		t.Fatalf("tick: %q %q %v", status, id, err)
	}
	d := f.q.last(t)
	night := `"2026-12-02T02:00:00Z"`
	if want := mv(touba.WaitKeyOf("trigger:hold", "w", "trigger:nightly", "/body/scheduled_for"), night); !reflect.DeepEqual(d.Offers, want) {
		t.Fatalf("Offers=%v, want %v", d.Offers, want)
	}
	if want := mv(touba.CancelKeyOf("trigger:stop", "trigger:nightly", "/body/scheduled_for", []byte(`{"$ref":"/event/body/night"}`)), night); !reflect.DeepEqual(d.Cancels, want) {
		t.Fatalf("Cancels=%v, want %v", d.Cancels, want)
	}
	ck := func(on, ref string) string {
		return touba.CancelKeyOf("trigger:nightly", "trigger:stop", on, []byte(`{"$ref":"`+ref+`"}`))
	}
	want := mv(ck("/body/night", "/event/body/scheduled_for"), night, ck("/body/night", "/event/event_id"), night,
		ck("/body/ref", "/event/trigger_ref"), `"trigger:nightly"`, ck("/body/at", "/event/received_at"), `"2026-12-02T02:00:01.500Z"`)
	if !reflect.DeepEqual(d.CancelKeys, want) {
		t.Fatalf("CancelKeys=%v\nwant       %v", d.CancelKeys, want)
	}
	if d.ProgramDigest != lookup(t, p, "trigger:nightly").Digest {
		t.Fatalf("ProgramDigest=%q", d.ProgramDigest)
	}
	if f.notified.Load() != 1 || !strings.Contains(f.log.String(), `"matched":["q-waiting-2026-12-02T02:00:00Z"]`) ||
		!strings.Contains(f.log.String(), `"cancelled":["q-cancelled-2026-12-02T02:00:00Z"]`) {
		t.Fatalf("notified %d, log:\n%s", f.notified.Load(), f.log.String())
	}
}

// A trigger nothing awaits gets its digest and nothing else, and the
// values cost it no allocation.
func TestSetDurable_NoAllocationWhenNothingAwaits(t *testing.T) {
	p := loadFlows(t)
	order := lookup(t, p, "trigger:shop/Order")
	d := &touba.Delivery{TriggerRef: order.Ref, EventID: "e", Body: []byte(`{"order_id":"o"}`),
		Headers: map[string]string{"x": "y"}, ReceivedAt: time.Now()}
	if n := testing.AllocsPerRun(1000, func() { order.SetDurable(d) }); n != 0 {
		t.Fatalf("SetDurable allocates %v times for a trigger nothing awaits", n)
	}
	if d.ProgramDigest != order.Digest || d.Offers != nil || d.Cancels != nil || d.CancelKeys != nil {
		t.Fatalf("delivery %+v", d)
	}
}

// Intake in front of the real SQLite queue accepts deliveries of every
// kind of trigger of the four flows.
func TestIntake_DurableFlowsOnSQLite(t *testing.T) {
	q, err := queue.Open(context.Background(), filepath.Join(t.TempDir(), "queue.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	in := &trigger.Intake{Queue: q}
	in.SetConfig(&trigger.Config{Program: loadFlows(t)})
	url := newServer(t, in).URL
	for _, c := range []struct{ name, body string }{
		{"shop/Checkout", `{"checkout_id":"c1","order_id":"o-42"}`},
		{"stripe/PaymentSucceeded", `{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"metadata":{"order_id":"o-42"}}}}`},
		{"billing/InvoiceOverdue", `{"id":"ov1","invoice_id":"in_1"}`},
		{"billing/InvoicePaid", `{"id":"pd1","data":{"object":{"id":"in_1"}}}`},
	} {
		resp, err := http.Post(url+"/triggers/"+c.name, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: %d", c.name, resp.StatusCode)
		}
	}
	if _, _, err := in.EnqueueTick(context.Background(), "trigger:reports/Nightly", time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	got, err := q.List(context.Background(), touba.EntryFilter{Limit: 100})
	if err != nil || len(got) != 5 {
		t.Fatalf("%d entries, %v", len(got), err)
	}
}
