package trigger_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// TestFlowFieldsRefused: each flow-control field is loaded strictly, and a
// refusal names the JSON path.
func TestFlowFieldsRefused(t *testing.T) {
	wrap := func(source, extra string) string {
		return `{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:a", "source": {"kind": "webhook"` + source +
			`}, "steps": [{"id": "s", "tool": "tool:x/Y"}]` + extra + `}]}`
	}
	cases := []struct{ name, doc, path string }{
		{"allow_from not a list", wrap(`, "allow_from": "10.0.0.0/8"`, ""), "$.triggers[0].source.allow_from"},
		{"allow_from empty", wrap(`, "allow_from": []`, ""), "$.triggers[0].source.allow_from"},
		{"bad CIDR", wrap(`, "allow_from": ["10.0.0.0/33"]`, ""), "$.triggers[0].source.allow_from[0]"},
		{"host bits set", wrap(`, "allow_from": ["10.0.0.1/8"]`, ""), "$.triggers[0].source.allow_from[0]"},
		{"CIDR not a string", wrap(`, "allow_from": [null]`, ""), "$.triggers[0].source.allow_from[0]"},
		{"rate zero", wrap(`, "rate_limit": {"per_second": 0}`, ""), "$.triggers[0].source.rate_limit.per_second"},
		{"rate negative", wrap(`, "rate_limit": {"per_second": -5}`, ""), "$.triggers[0].source.rate_limit.per_second"},
		{"rate a string", wrap(`, "rate_limit": {"per_second": "5"}`, ""), "$.triggers[0].source.rate_limit.per_second"},
		{"burst zero", wrap(`, "rate_limit": {"per_second": 5, "burst": 0}`, ""), "$.triggers[0].source.rate_limit.burst"},
		{"rate unknown field", wrap(`, "rate_limit": {"per_second": 5, "per_minute": 1}`, ""), "$.triggers[0].source.rate_limit.per_minute"},
		{"rate null", wrap(`, "rate_limit": null`, ""), "$.triggers[0].source.rate_limit"},
		{"filter empty", wrap("", `, "filter": []`), "$.triggers[0].filter"},
		{"filter pointer outside", wrap("", `, "filter": [{"pointer": "/event/body", "exists": true}]`), "$.triggers[0].filter[0].pointer"},
		{"filter bad pointer", wrap("", `, "filter": [{"pointer": "body/x", "exists": true}]`), "$.triggers[0].filter[0].pointer"},
		{"filter upper-case header", wrap("", `, "filter": [{"pointer": "/headers/X-Kind", "exists": true}]`), "$.triggers[0].filter[0].pointer"},
		{"filter two forms", wrap("", `, "filter": [{"pointer": "/body/a", "equals": 1, "exists": true}]`), "$.triggers[0].filter[0]"},
		{"filter no form", wrap("", `, "filter": [{"pointer": "/body/a"}]`), "$.triggers[0].filter[0]"},
		{"filter unknown field", wrap("", `, "filter": [{"pointer": "/body/a", "matches": "x"}]`), "$.triggers[0].filter[0].matches"},
		{"filter in empty", wrap("", `, "filter": [{"pointer": "/body/a", "in": []}]`), "$.triggers[0].filter[0].in"},
		{"filter exists null", wrap("", `, "filter": [{"pointer": "/body/a", "exists": null}]`), "$.triggers[0].filter[0].exists"},
		{"concurrency no key", wrap("", `, "concurrency": {"max": 1}`), "$.triggers[0].concurrency.key"},
		{"concurrency key not a ref", wrap("", `, "concurrency": {"key": "/event/body/c"}`), "$.triggers[0].concurrency.key"},
		{"concurrency key outside event", wrap("", `, "concurrency": {"key": {"$ref": "/steps/s/output"}}`), `$.triggers[0].concurrency.key["$ref"]`},
		{"concurrency key queue_id", wrap("", `, "concurrency": {"key": {"$ref": "/event/queue_id"}}`), `$.triggers[0].concurrency.key["$ref"]`},
		{"concurrency max zero", wrap("", `, "concurrency": {"key": {"$ref": "/event/body/c"}, "max": 0}`), "$.triggers[0].concurrency.max"},
		{"concurrency max negative", wrap("", `, "concurrency": {"key": {"$ref": "/event/body/c"}, "max": -1}`), "$.triggers[0].concurrency.max"},
		{"concurrency unknown field", wrap("", `, "concurrency": {"key": {"$ref": "/event/body/c"}, "order": "fifo"}`), "$.triggers[0].concurrency.order"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := trigger.ParseProgram("p.json", []byte(c.doc))
			var ce *trigger.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err=%v, want a ConfigError", err)
			}
			if ce.Path != c.path {
				t.Fatalf("path=%q (%v), want %q", ce.Path, err, c.path)
			}
		})
	}
	ok := wrap(`, "allow_from": ["10.0.0.0/8", "192.0.2.7", "::ffff:10.1.0.0/112"], "rate_limit": {"per_second": 2.5}`,
		`, "filter": [{"pointer": "/body/a", "equals": null}], "concurrency": {"key": {"$ref": "/event/headers/x-customer"}, "max": 3}`)
	p, err := trigger.ParseProgram("p.json", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	tr := p.Triggers[0]
	if got := len(tr.Source.AllowFrom); got != 3 || tr.Source.AllowFrom[2].String() != "10.1.0.0/16" {
		t.Fatalf("allow_from=%v", tr.Source.AllowFrom)
	}
	if rl := tr.Source.RateLimit; rl.PerSecond != 2.5 || rl.Burst != 3 {
		t.Fatalf("rate_limit=%+v, want 2.5/s with the default burst 3", rl)
	}
	if c := tr.Concurrency; c.Max != 3 || !strings.HasSuffix(c.KeyRef, "x-customer") {
		t.Fatalf("concurrency=%+v", c)
	}
	if _, err := trigger.ParseCIDRList("10.0.0.0/8, 192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := trigger.ParseCIDRList("10.0.0.0/8,nope"); err == nil {
		t.Fatal("ParseCIDRList accepted nope")
	}
}
