package trigger_test

import (
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// celProgram is one webhook trigger with extra, a JSON fragment of
// trigger fields, and steps.
func celProgram(extra, steps string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:a", "source": {"kind": "webhook", "max_body_bytes": 65536}` + extra + `, "steps": ` + steps + `},
	  {"ref": "trigger:b", "source": {"kind": "webhook"}, "steps": []}]}`
}

const oneStep = `[{"id": "s", "tool": "tool:a/B"}]`

func TestParseProgram_Expressions(t *testing.T) {
	for _, tc := range []struct{ name, extra, steps string }{
		{"filter", `"filter": [{"pointer": "/body/x", "exists": true}, {"cel": "body.type == 'a' && headers['x-k'] == 'v'"}]`, oneStep},
		{"concurrency", `"concurrency": {"key": {"cel": "body.customer.id"}, "max": 1}`, oneStep},
		{"debounce", `"debounce": {"key": {"cel": "string(body.product)"}, "window_ms": 100}`, oneStep},
		{"batch", `"batch": {"key": {"cel": "body.shop"}, "max_size": 5, "window_ms": 100}`, oneStep},
		{"cancel_on", `"cancel_on": [{"trigger": "trigger:b", "match": {"cel": "body.order_id"}, "on": "/body/id"}]`, oneStep},
		{"wait_for", "", `[{"id": "w", "wait_for": {"trigger": "trigger:b", "match": {"cel": "body.order_id"}, "on": "/body/id"}}]`},
		{"input", "", `[{"id": "r", "tool": "tool:a/B", "input": {"a": {"$cel": "body.amount / 100"}, "b": [{"$ref": "/event/body"}, {"$cel": "size(events)"}]}},
			{"id": "s", "tool": "tool:a/B", "input": {"$cel": "{'prev': steps.r.output, 'at': timestamp(event.received_at) + duration('1h')}"}}]`},
		{"when", "", `[{"id": "s", "tool": "tool:a/B", "when": "body.type == 'x'"}, {"id": "z", "sleep": {"ms": 1}, "when": "steps.s.output != null"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := trigger.ParseProgram("p.json", []byte(celProgram(tc.extra, tc.steps)))
			if err != nil {
				t.Fatal(err)
			}
			if p.Env == nil {
				t.Fatal("no expression environment")
			}
		})
	}
}

func TestParseProgram_RefusesExpressions(t *testing.T) {
	for _, tc := range []struct{ name, extra, steps, path, want string }{
		{"syntax", `"filter": [{"cel": "body.type =="}]`, oneStep, `$.triggers[0].filter[0].cel`, "Syntax error"},
		{"type", `"filter": [{"cel": "1 + 'a' == 2"}]`, oneStep, `$.triggers[0].filter[0].cel`, "no matching overload"},
		{"not bool", `"filter": [{"cel": "size(headers)"}]`, oneStep, `$.triggers[0].filter[0].cel`, "must be a bool, not int"},
		{"now", `"filter": [{"cel": "now() > timestamp('2020-01-01T00:00:00Z')"}]`, oneStep, `$.triggers[0].filter[0].cel`,
			"undeclared reference to 'now'"},
		{"steps at intake", `"concurrency": {"key": {"cel": "steps.s.output"}}`, oneStep, `$.triggers[0].concurrency.key.cel`,
			"undeclared reference to 'steps'"},
		{"debounce key", `"debounce": {"key": {"cel": "body.("}, "window_ms": 10}`, oneStep, `$.triggers[0].debounce.key.cel`, "Syntax error"},
		{"batch key", `"batch": {"key": {"cel": "nope"}, "max_size": 2, "window_ms": 10}`, oneStep, `$.triggers[0].batch.key.cel`,
			"undeclared reference to 'nope'"},
		{"cancel_on", `"cancel_on": [{"trigger": "trigger:b", "match": {"cel": "rand()"}, "on": "/body/id"}]`, oneStep,
			`$.triggers[0].cancel_on[0].match.cel`, "undeclared reference to 'rand'"},
		{"wait_for", "", `[{"id": "w", "wait_for": {"trigger": "trigger:b", "match": {"cel": "env.HOME"}, "on": "/body/id"}}]`,
			`$.triggers[0].steps[0].wait_for.match.cel`, "undeclared reference to 'env'"},
		{"input", "", `[{"id": "s", "tool": "tool:a/B", "input": {"x": [1, {"$cel": "body.a +"}]}}]`,
			`$.triggers[0].steps[0].input.x[1]["$cel"]`, "Syntax error"},
		{"when", "", `[{"id": "s", "tool": "tool:a/B", "when": "'yes'"}]`, `$.triggers[0].steps[0].when`, "must be a bool, not string"},
		{"over cost", `"filter": [{"cel": "body.items.all(i, body.items.all(j, i != j || i == j))"}]`, oneStep,
			`$.triggers[0].filter[0].cel`, "over the limit 1000000"},
		{"cel not alone", `"filter": [{"cel": "true", "pointer": "/body/x"}]`, oneStep, `$.triggers[0].filter[0]`, "stands alone"},
		{"cel not a string", `"filter": [{"cel": 1}]`, oneStep, `$.triggers[0].filter[0].cel`, "string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trigger.ParseProgram("p.json", []byte(celProgram(tc.extra, tc.steps)))
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.HasPrefix(err.Error(), "p.json: "+tc.path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err=%v\nwant p.json: %s: ...%s...", err, tc.path, tc.want)
			}
			if tc.name != "cel not alone" && tc.name != "cel not a string" {
				if got, want := touba.ErrorCode(err), touba.EProgramInvalid; got != want {
					t.Fatalf("code=%s, want %s", got, want)
				}
			}
		})
	}
}

// TestParseProgram_CostLimit: the limit comes from --expression-cost-limit.
func TestParseProgram_CostLimit(t *testing.T) {
	src := []byte(celProgram(`"filter": [{"cel": "body.items.exists(i, i == 'x')"}]`, oneStep))
	if _, err := trigger.ParseProgram("p.json", src); err != nil {
		t.Fatalf("default limit: %v", err)
	}
	_, err := trigger.ParseProgramWith("p.json", src, trigger.LoadOptions{ExpressionCostLimit: 1000})
	if err == nil || !strings.Contains(err.Error(), "over the limit 1000 (--expression-cost-limit)") ||
		touba.ErrorCode(err) != touba.EProgramInvalid {
		t.Fatalf("err=%v", err)
	}
}
