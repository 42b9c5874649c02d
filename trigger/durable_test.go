package trigger_test

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// durableFlowsPath holds the four flows of issue 25: a checkout that
// waits up to 24 h for its payment, dunning reminders three days apart
// cancelled by the invoice's payment, a nightly schedule, and a
// four-step order.
var durableFlowsPath = filepath.Join("testdata", "programs", "durable-flows.json")

func loadFlows(tb testing.TB) *trigger.Program {
	tb.Helper()
	p, err := trigger.LoadProgram(durableFlowsPath)
	if err != nil {
		tb.Fatalf("load: %v", err)
	}
	return p
}

func lookup(tb testing.TB, p *trigger.Program, ref string) *trigger.Trigger {
	tb.Helper()
	t, ok := p.Lookup(strings.TrimPrefix(ref, "trigger:"))
	if !ok {
		tb.Fatalf("no %s", ref)
	}
	return t
}

func TestParseProgram_DurableFlows(t *testing.T) {
	p := loadFlows(t)

	checkout := lookup(t, p, "trigger:shop/Checkout")
	if got, want := len(checkout.Steps), 2; got != want {
		t.Fatalf("checkout steps %d, want %d", got, want)
	}
	paid := checkout.Steps[0]
	want := &trigger.WaitFor{Trigger: "trigger:stripe/PaymentSucceeded", On: "/body/data/object/metadata/order_id",
		TimeoutMS: 86_400_000, OnTimeout: trigger.OnTimeoutContinue}
	got := *paid.WaitFor
	if compact(t, got.Match) != `{"$ref":"/event/body/order_id"}` {
		t.Fatalf("match %s", got.Match)
	}
	got.Match = nil
	if paid.ID != "paid" || paid.Tool != "" || paid.Input != nil || paid.Sleep != nil || !reflect.DeepEqual(&got, want) {
		t.Fatalf("paid step %+v wait_for %+v, want %+v", paid, got, want)
	}
	if paid.Kind() != "wait_for" || checkout.Steps[1].Kind() != "tool:shop/SettleOrder" {
		t.Fatalf("kinds %q %q", paid.Kind(), checkout.Steps[1].Kind())
	}

	if pay := lookup(t, p, "trigger:stripe/PaymentSucceeded"); pay.Steps == nil || len(pay.Steps) != 0 {
		t.Fatalf("steps: [] read as %#v, want an empty list", pay.Steps)
	}

	dunning := lookup(t, p, "trigger:billing/InvoiceOverdue")
	for _, i := range []int{1, 3} {
		s := dunning.Steps[i]
		if s.Sleep == nil || s.Sleep.MS != 3*24*3600*1000 || s.Sleep.Until != nil || s.Kind() != "sleep" {
			t.Fatalf("dunning step %d: %+v", i, s)
		}
	}
	if got := len(dunning.CancelOn); got != 2 {
		t.Fatalf("cancel_on %d entries", got)
	}
	c := dunning.CancelOn[0]
	if c.Trigger != "trigger:billing/InvoicePaid" || c.On != "/body/data/object/id" || compact(t, c.Match) != `{"$ref":"/event/body/invoice_id"}` {
		t.Fatalf("cancel_on[0] %+v", c)
	}

	nightly := lookup(t, p, "trigger:reports/Nightly")
	if !nightly.IsSchedule() {
		t.Fatal("nightly is no schedule")
	}
	if s := nightly.Steps[1].Sleep; s == nil || s.MS != 0 || compact(t, s.Until) != `{"$ref":"/steps/export/output/ready_at"}` {
		t.Fatalf("nightly sleep until a ref: %+v", s)
	}
	if s := nightly.Steps[3].Sleep; s == nil || string(s.Until) != `"2026-12-24T09:00:00+01:00"` {
		t.Fatalf("nightly sleep until a time: %+v", s)
	}

	order := lookup(t, p, "trigger:shop/Order")
	if len(order.Steps) != 4 || order.Durable() {
		t.Fatalf("order: %d steps, durable %v", len(order.Steps), order.Durable())
	}

	if got, want := p.ToolRefs(), []string{"tool:billing/RecordPayment", "tool:billing/SendReminder", "tool:reports/Export",
		"tool:reports/Publish", "tool:shop/Charge", "tool:shop/Confirm", "tool:shop/ReadOrder", "tool:shop/Reserve",
		"tool:shop/SettleOrder"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ToolRefs=%q, want %q (no sleep or wait_for step)", got, want)
	}
	if err := p.CheckTools(func(ref string) bool { return ref != "" }); err != nil {
		t.Fatalf("CheckTools checks a step without a tool: %v", err)
	}
}

// The index: for each trigger, who waits for it and who it cancels.
func TestProgramListeners(t *testing.T) {
	p := loadFlows(t)
	tests := []struct {
		ref            string
		waits, cancels []string // Key@On
	}{
		{"trigger:stripe/PaymentSucceeded", []string{touba.WaitKeyOf("trigger:shop/Checkout", "paid", "trigger:stripe/PaymentSucceeded",
			"/body/data/object/metadata/order_id") + "@/body/data/object/metadata/order_id"}, nil},
		{"trigger:billing/InvoicePaid", nil, []string{
			touba.CancelKeyOf("trigger:billing/InvoiceOverdue", "trigger:billing/InvoicePaid", "/body/data/object/id",
				[]byte(`{"$ref":"/event/body/invoice_id"}`)) + "@/body/data/object/id",
			touba.CancelKeyOf("trigger:billing/InvoiceOverdue", "trigger:billing/InvoicePaid", "/headers/x-account",
				[]byte(`{"$ref":"/event/headers/x-account"}`)) + "@/headers/x-account"}},
		{"trigger:shop/Checkout", nil, nil},
		{"trigger:billing/InvoiceOverdue", nil, nil},
		{"trigger:reports/Nightly", nil, nil},
		{"trigger:shop/Order", nil, nil},
		{"trigger:not/InTheProgram", nil, nil},
	}
	flat := func(ls []trigger.Listener, owner string) []string {
		var out []string
		for _, l := range ls {
			if l.Trigger != owner {
				t.Fatalf("listener %+v names owner %q", l, l.Trigger)
			}
			out = append(out, l.Key+"@"+l.On)
		}
		return out
	}
	for _, tt := range tests {
		l := p.Listeners(tt.ref)
		owner := "trigger:shop/Checkout"
		if got := flat(l.Waits, owner); !reflect.DeepEqual(got, tt.waits) {
			t.Errorf("%s waits %q, want %q", tt.ref, got, tt.waits)
		}
		owner = "trigger:billing/InvoiceOverdue"
		if got := flat(l.Cancels, owner); !reflect.DeepEqual(got, tt.cancels) {
			t.Errorf("%s cancels %q, want %q", tt.ref, got, tt.cancels)
		}
	}
	for ref, want := range map[string]bool{"trigger:stripe/PaymentSucceeded": true, "trigger:billing/InvoicePaid": true,
		"trigger:billing/InvoiceOverdue": true, "trigger:shop/Checkout": false, "trigger:shop/Order": false} {
		if got := lookup(t, p, ref).Durable(); got != want {
			t.Errorf("%s Durable()=%v, want %v", ref, got, want)
		}
	}
}

// A wait may name a trigger written after it, and a schedule trigger.
func TestParseProgram_WaitForLaterAndSchedule(t *testing.T) {
	p := MustParse(t, doc(
		trig("trigger:a", okSource, `[{"id":"w","wait_for":{"trigger":"trigger:b","match":"lit","on":"/headers/x-k"}},`+
			`{"id":"n","wait_for":{"trigger":"trigger:tick","match":{"$ref":"/steps/w/output/body/at"},"on":"/body/scheduled_for"}}]`),
		trig("trigger:b", okSource, `[]`),
		trig("trigger:tick", `{"kind":"schedule","cron":"* * * * *"}`, `[]`)))
	w := p.Triggers[0].Steps[0].WaitFor
	if w.OnTimeout != trigger.OnTimeoutFail || w.TimeoutMS != 0 || string(w.Match) != `"lit"` {
		t.Fatalf("defaults: %+v", w)
	}
	if got := p.Listeners("trigger:tick").Waits; len(got) != 1 || got[0].Key != touba.WaitKeyOf("trigger:a", "n", "trigger:tick", "/body/scheduled_for") {
		t.Fatalf("tick listeners %+v", got)
	}
}

func TestCanonicalValue(t *testing.T) {
	num := func(s string) any { return json.Number(s) }
	tests := []struct {
		v    any
		want string
		ok   bool
	}{
		{"42", `"42"`, true},
		{num("42"), `42`, true},
		{num("42.0"), `42.0`, true}, // numbers as written
		{float64(42), `42`, true},
		{true, `true`, true},
		{nil, "", false},
		{json.RawMessage(`null`), "", false},
		{map[string]any{"b": num("2"), "a": "x<y"}, `{"a":"x<y","b":2}`, true},
		{json.RawMessage(` { "b" : 2 , "a" : "x\u003cy" } `), `{"a":"x<y","b":2}`, true},
		{[]any{"a", num("1")}, `["a",1]`, true},
		{json.RawMessage(`{"a":1,"a":2}`), "", false}, // ambiguous: refused
		{"caf\u00e9 \"q\"", `"café \"q\""`, true},
	}
	for _, tt := range tests {
		got, ok := trigger.CanonicalValue(tt.v)
		if got != tt.want || ok != tt.ok {
			t.Errorf("CanonicalValue(%#v)=%q,%v, want %q,%v", tt.v, got, ok, tt.want, tt.ok)
		}
	}
}
