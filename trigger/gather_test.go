package trigger_test

import (
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

func withGather(field, v string) string {
	return doc(`{"ref":"trigger:a","source":` + okSource + `,"steps":` + okSteps + `,"` + field + `":` + v + `}`)
}

const schedSource = `{"kind":"schedule","cron":"0 3 * * *"}`

// Refused gatherings, each with the exact message: file, JSON path, rule.
func TestParseProgram_RefusesGather(t *testing.T) {
	both := doc(`{"ref":"trigger:a","source":` + okSource + `,"steps":` + okSteps +
		`,"debounce":{"key":{"$ref":"/event/body/p"},"window_ms":10},"batch":{"max_size":10,"window_ms":10}}`)
	for _, tt := range []struct{ name, src, want string }{
		{"both", both, `$.triggers[0].batch: debounce and batch exclude each other: a trigger gathers its deliveries one way`},
		{"debounce on schedule", doc(`{"ref":"trigger:a","source":` + schedSource + `,"steps":` + okSteps +
			`,"debounce":{"key":{"$ref":"/event/body/p"},"window_ms":10}}`),
			`$.triggers[0].debounce: a schedule trigger takes no debounce: each tick is its own run`},
		{"batch on schedule", doc(`{"ref":"trigger:a","source":` + schedSource + `,"steps":` + okSteps +
			`,"batch":{"max_size":10,"window_ms":10}}`),
			`$.triggers[0].batch: a schedule trigger takes no batch: each tick is its own run`},
		{"debounce not object", withGather("debounce", `5000`), `$.triggers[0].debounce: must be an object (got number)`},
		{"debounce unknown field", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":10,"wait":1}`),
			`$.triggers[0].debounce.wait: unknown field (known: key, max_bytes, max_wait_ms, window_ms)`},
		{"debounce without key", withGather("debounce", `{"window_ms":10}`), `$.triggers[0].debounce.key: required field is missing`},
		{"debounce without window", withGather("debounce", `{"key":{"$ref":"/event/body/p"}}`),
			`$.triggers[0].debounce.window_ms: required field is missing`},
		{"window zero", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":0}`),
			`$.triggers[0].debounce.window_ms: must be a positive integer (got 0)`},
		{"window over a day", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":86400001}`),
			`$.triggers[0].debounce.window_ms: must be at most 86400000 (got 86400001)`},
		{"max wait below window", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":5000,"max_wait_ms":4999}`),
			`$.triggers[0].debounce.max_wait_ms: must not be below window_ms (5000): the run would start before the window could end`},
		{"max wait over a day", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":5000,"max_wait_ms":86400001}`),
			`$.triggers[0].debounce.max_wait_ms: must be at most 86400000 (got 86400001)`},
		{"key not a ref", withGather("debounce", `{"key":"/event/body/p","window_ms":10}`),
			`$.triggers[0].debounce.key: must be an object (got string)`},
		{"key queue id", withGather("debounce", `{"key":{"$ref":"/event/queue_id"},"window_ms":10}`),
			`$.triggers[0].debounce.key["$ref"]: /event/queue_id is unique to each entry: it cannot gather deliveries`},
		{"key into steps", withGather("debounce", `{"key":{"$ref":"/steps/s/output"},"window_ms":10}`),
			`$.triggers[0].debounce.key["$ref"]: must be a JSON pointer into /event (for example /event/body/customer_id)`},
		{"batch without size", withGather("batch", `{"window_ms":10}`), `$.triggers[0].batch.max_size: required field is missing`},
		{"batch of one", withGather("batch", `{"max_size":1,"window_ms":10}`),
			`$.triggers[0].batch.max_size: must be at least 2: a batch of one is a run of its own`},
		{"batch too big", withGather("batch", `{"max_size":10001,"window_ms":10}`),
			`$.triggers[0].batch.max_size: must be at most 10000 (got 10001)`},
		{"batch without window", withGather("batch", `{"max_size":10}`), `$.triggers[0].batch.window_ms: required field is missing`},
		{"batch max wait", withGather("batch", `{"max_size":10,"window_ms":10,"max_wait_ms":20}`),
			`$.triggers[0].batch.max_wait_ms: unknown field (known: key, max_bytes, max_size, window_ms)`},
		{"max bytes below a kilobyte", withGather("batch", `{"max_size":10,"window_ms":10,"max_bytes":1023}`),
			`$.triggers[0].batch.max_bytes: must be at least 1024: a gathering of a few bytes gathers nothing`},
		{"max bytes over a gibibyte", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":10,"max_bytes":1073741825}`),
			`$.triggers[0].debounce.max_bytes: must be at most 1073741824 (got 1073741825)`},
		{"max bytes not a number", withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":10,"max_bytes":"64MiB"}`),
			`$.triggers[0].debounce.max_bytes: must be a positive integer (got string)`},
		{"batch key in events", withGather("batch", `{"key":{"$ref":"/events/0/body/p"},"max_size":10,"window_ms":10}`),
			`$.triggers[0].batch.key["$ref"]: must be a JSON pointer into /event (for example /event/body/customer_id)`},
		{"events root with bad escape", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"/events/~x"}}}]`),
			`$.triggers[0].steps[0].input.x["$ref"]: ` + ptrRule},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := trigger.ParseProgram("p.json", []byte(tt.src))
			if got, want := errString(err), "p.json: "+tt.want; got != want {
				t.Fatalf("err=%s\nwant %s\nprogram: %s", got, want, tt.src)
			}
		})
	}
}

// A loaded debounce or batch, with its defaults, and a step reading
// /events.
func TestParseProgram_Gather(t *testing.T) {
	for _, tt := range []struct {
		name, field, v string
		want           trigger.Gather
	}{
		{"debounce", "debounce", `{"key":{"$ref":"/event/body/product_id"},"window_ms":5000,"max_wait_ms":60000}`,
			trigger.Gather{Kind: touba.GatherDebounce, KeyRef: "/event/body/product_id", WindowMS: 5000, MaxWaitMS: 60000, MaxBytes: 64 << 20}},
		{"debounce default max wait", "debounce", `{"key":{"$ref":"/event/headers/x-shop"},"window_ms":5000}`,
			trigger.Gather{Kind: touba.GatherDebounce, KeyRef: "/event/headers/x-shop", WindowMS: 5000, MaxWaitMS: 50000, MaxBytes: 64 << 20}},
		{"debounce default max wait capped", "debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":86400000}`,
			trigger.Gather{Kind: touba.GatherDebounce, KeyRef: "/event/body/p", WindowMS: 86400000, MaxWaitMS: 86400000, MaxBytes: 64 << 20}},
		{"debounce max bytes", "debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":10,"max_bytes":1024}`,
			trigger.Gather{Kind: touba.GatherDebounce, KeyRef: "/event/body/p", WindowMS: 10, MaxWaitMS: 100, MaxBytes: 1024}},
		{"batch", "batch", `{"key":{"$ref":"/event/body/account"},"max_size":100,"window_ms":1000}`,
			trigger.Gather{Kind: touba.GatherBatch, KeyRef: "/event/body/account", MaxSize: 100, WindowMS: 1000, MaxBytes: 64 << 20}},
		{"batch without key", "batch", `{"max_size":10000,"window_ms":1}`,
			trigger.Gather{Kind: touba.GatherBatch, MaxSize: 10000, WindowMS: 1, MaxBytes: 64 << 20}},
		{"batch max bytes", "batch", `{"max_size":10,"window_ms":1,"max_bytes":1073741824}`,
			trigger.Gather{Kind: touba.GatherBatch, MaxSize: 10, WindowMS: 1, MaxBytes: 1 << 30}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := MustParse(t, withGather(tt.field, tt.v)).Triggers[0].Gather
			if g == nil || g.Kind != tt.want.Kind || g.KeyRef != tt.want.KeyRef || g.WindowMS != tt.want.WindowMS ||
				g.MaxWaitMS != tt.want.MaxWaitMS || g.MaxSize != tt.want.MaxSize || g.MaxBytes != tt.want.MaxBytes {
				t.Fatalf("gather %+v, want %+v", g, tt.want)
			}
		})
	}
	if g := MustParse(t, withSource(okSource)).Triggers[0].Gather; g != nil {
		t.Fatalf("a trigger without debounce or batch gathers: %+v", g)
	}
	MustParse(t, doc(`{"ref":"trigger:a","source":`+okSource+`,"steps":[{"id":"s","tool":"tool:a/B",`+
		`"input":{"all":{"$ref":"/events"},"n":{"$ref":"/events/0/body"}}}],"debounce":{"key":{"$ref":"/event/body/p"},"window_ms":10}}`))
}

// debounce and batch change what a run does: they are part of the
// trigger's definition and digest.
func TestTriggerDigest_CoversGather(t *testing.T) {
	digest := func(extra string) string {
		return MustParse(t, doc(`{"ref":"trigger:a","source":`+okSource+`,"steps":`+okSteps+extra+`}`)).Triggers[0].Digest
	}
	seen := map[string]string{}
	for _, extra := range []string{"",
		`,"debounce":{"key":{"$ref":"/event/body/p"},"window_ms":5000}`,
		`,"debounce":{"key":{"$ref":"/event/body/p"},"window_ms":6000}`,
		`,"batch":{"max_size":10,"window_ms":5000}`,
		`,"batch":{"max_size":10,"window_ms":5000,"max_bytes":1048576}`,
	} {
		d := digest(extra)
		if prev, dup := seen[d]; dup {
			t.Fatalf("%q and %q have one digest", prev, extra)
		}
		seen[d] = extra
	}
}

// SetGather gives a delivery its gathering's key and value, with the
// trigger's times; a key that resolves to nothing (or null) gathers
// nothing, and a batch without a key gathers the whole trigger.
func TestSetGather(t *testing.T) {
	p := MustParse(t, doc(
		`{"ref":"trigger:d","source":`+okSource+`,"steps":`+okSteps+`,"debounce":{"key":{"$ref":"/event/body/p"},"window_ms":5000}}`,
		`{"ref":"trigger:b","source":`+okSource+`,"steps":`+okSteps+`,"batch":{"max_size":10,"window_ms":1000}}`,
		`{"ref":"trigger:h","source":`+okSource+`,"steps":`+okSteps+`,"batch":{"key":{"$ref":"/event/headers/x-shop"},"max_size":3,"window_ms":1000}}`))
	give := func(ref, body string, headers map[string]string) *touba.GatherSpec {
		tr, _ := p.Lookup(ref)
		d := &touba.Delivery{TriggerRef: "trigger:" + ref, Body: []byte(body), Headers: headers, ReceivedAt: time.Now()}
		tr.SetGather(d)
		return d.Gather
	}
	g := give("d", `{"p":{"b":2,"a":1.50}}`, nil)
	if g == nil || g.Kind != touba.GatherDebounce || g.Value != `{"a":1.50,"b":2}` || g.Window != 5*time.Second ||
		g.MaxWait != 50*time.Second || g.Key != touba.GatherKeyOf(touba.GatherDebounce, "/event/body/p") ||
		g.MaxBytes != touba.DefaultGatherMaxBytes {
		t.Fatalf("debounce spec: %+v", g)
	}
	for _, body := range []string{`{}`, `{"p":null}`, `not json`} {
		if g := give("d", body, nil); g != nil {
			t.Fatalf("body %s: gathered %+v, want a run of its own", body, g)
		}
	}
	if g := give("b", `{}`, nil); g == nil || g.Value != "" || g.MaxSize != 10 || g.Window != time.Second {
		t.Fatalf("batch without a key: %+v", g)
	}
	if g := give("h", `{}`, map[string]string{"x-shop": "s1"}); g == nil || g.Value != `"s1"` || g.MaxSize != 3 {
		t.Fatalf("batch by header: %+v", g)
	}
	if err := give("h", `{}`, map[string]string{"x-shop": "s1"}).Check(); err != nil {
		t.Fatalf("spec check: %v", err)
	}
}
