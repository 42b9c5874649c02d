package trigger_test

import (
	"errors"
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// Builders for the durable steps' refusals: trigger:a holds the steps (or
// the cancel_on) under test, trigger:b is there to be awaited.
func withDurable(steps string) string {
	return doc(trig("trigger:a", okSource, steps), trig("trigger:b", okSource, okSteps))
}

func withCancelOn(cancelOn string) string {
	return doc(`{"ref":"trigger:a","source":`+okSource+`,"steps":`+okSteps+`,"cancel_on":`+cancelOn+`}`,
		trig("trigger:b", okSource, okSteps))
}

func waitStep(waitFor string) string { return withDurable(`[{"id":"w","wait_for":` + waitFor + `}]`) }

const (
	okWait      = `"trigger":"trigger:b","match":{"$ref":"/event/body/id"},"on":"/body/id"`
	untilRule   = `must be an RFC 3339 time such as "2026-12-24T09:00:00Z" or {"$ref": POINTER}`
	onRule      = `must be a JSON pointer into /headers or /body of the named trigger's delivery`
	cancelMatch = `must be {"cel": EXPR} or {"$ref": POINTER} into /event/body, /event/headers, /event/event_id, /event/trigger_ref or /event/received_at: it resolves when the entry is accepted`
)

// badDurable are the refusals of sleep, wait_for and cancel_on, with the
// exact message each must get (file, JSON path, rule).
var badDurable = []struct{ name, src, want string }{
	// A step's kind.
	{"step two kinds", withDurable(`[{"id":"s","tool":"tool:a/B","sleep":{"ms":1}}]`), `$.triggers[0].steps[0]: must have exactly one of "tool", "sleep", "wait_for"`},
	{"step sleep and wait", withDurable(`[{"id":"s","sleep":{"ms":1},"wait_for":{` + okWait + `}}]`), `$.triggers[0].steps[0]: must have exactly one of "tool", "sleep", "wait_for"`},
	{"step no kind", withDurable(`[{"id":"s","input":{}}]`), `$.triggers[0].steps[0]: must have exactly one of "tool", "sleep", "wait_for"`},
	{"input on sleep", withDurable(`[{"id":"s","sleep":{"ms":1},"input":{}}]`), `$.triggers[0].steps[0].input: only a "tool" step takes an input`},
	{"input on wait", withDurable(`[{"id":"s","wait_for":{` + okWait + `},"input":{}}]`), `$.triggers[0].steps[0].input: only a "tool" step takes an input`},
	{"duplicate id across kinds", withDurable(`[{"id":"s","sleep":{"ms":1}},{"id":"s","tool":"tool:a/B"}]`), `$.triggers[0].steps[1].id: duplicate step id "s"`},

	// sleep.
	{"sleep null", withDurable(`[{"id":"s","sleep":null}]`), `$.triggers[0].steps[0].sleep: must not be null`},
	{"sleep number", withDurable(`[{"id":"s","sleep":1000}]`), `$.triggers[0].steps[0].sleep: must be an object (got number)`},
	{"sleep empty", withDurable(`[{"id":"s","sleep":{}}]`), `$.triggers[0].steps[0].sleep: must have exactly one of "ms", "until"`},
	{"sleep both", withDurable(`[{"id":"s","sleep":{"ms":1,"until":"2026-12-24T09:00:00Z"}}]`), `$.triggers[0].steps[0].sleep: must have exactly one of "ms", "until"`},
	{"sleep unknown field", withDurable(`[{"id":"s","sleep":{"seconds":1}}]`), `$.triggers[0].steps[0].sleep.seconds: unknown field (known: ms, until)`},
	{"sleep ms zero", withDurable(`[{"id":"s","sleep":{"ms":0}}]`), `$.triggers[0].steps[0].sleep.ms: must be a positive integer (got 0)`},
	{"sleep ms negative", withDurable(`[{"id":"s","sleep":{"ms":-5}}]`), `$.triggers[0].steps[0].sleep.ms: must be a positive integer (got -5)`},
	{"sleep ms fraction", withDurable(`[{"id":"s","sleep":{"ms":1.5}}]`), `$.triggers[0].steps[0].sleep.ms: must be a positive integer (got 1.5)`},
	{"sleep ms string", withDurable(`[{"id":"s","sleep":{"ms":"1000"}}]`), `$.triggers[0].steps[0].sleep.ms: must be a positive integer (got string)`},
	{"sleep ms too long", withDurable(`[{"id":"s","sleep":{"ms":315360000001}}]`), `$.triggers[0].steps[0].sleep.ms: must be at most 315360000000 (got 315360000001)`},
	{"until not a time", withDurable(`[{"id":"s","sleep":{"until":"tomorrow"}}]`), `$.triggers[0].steps[0].sleep.until: ` + untilRule},
	{"until no zone", withDurable(`[{"id":"s","sleep":{"until":"2026-12-24T09:00:00"}}]`), `$.triggers[0].steps[0].sleep.until: ` + untilRule},
	{"until number", withDurable(`[{"id":"s","sleep":{"until":1766566800}}]`), `$.triggers[0].steps[0].sleep.until: ` + untilRule},
	{"until null", withDurable(`[{"id":"s","sleep":{"until":null}}]`), `$.triggers[0].steps[0].sleep.until: must not be null`},
	{"until object not ref", withDurable(`[{"id":"s","sleep":{"until":{"at":"x"}}}]`), `$.triggers[0].steps[0].sleep.until: ` + untilRule},
	{"until ref and more", withDurable(`[{"id":"s","sleep":{"until":{"$ref":"/event/body/at","tz":"UTC"}}}]`), `$.triggers[0].steps[0].sleep.until: ` + untilRule},
	{"until ref outside", withDurable(`[{"id":"s","sleep":{"until":{"$ref":"/env/AT"}}}]`), `$.triggers[0].steps[0].sleep.until["$ref"]: ` + ptrRule},
	{"until ref later step", withDurable(`[{"id":"s","sleep":{"until":{"$ref":"/steps/t/output/at"}}},{"id":"t","tool":"tool:a/B"}]`), `$.triggers[0].steps[0].sleep.until["$ref"]: must name an earlier step`},
	{"until ref itself", withDurable(`[{"id":"s","sleep":{"until":{"$ref":"/steps/s/output/woke_at"}}}]`), `$.triggers[0].steps[0].sleep.until["$ref"]: must name an earlier step`},
	{"until ref not a string", withDurable(`[{"id":"s","sleep":{"until":{"$ref":3}}}]`), `$.triggers[0].steps[0].sleep.until["$ref"]: must be a string (got number)`},

	// wait_for.
	{"wait null", waitStep(`null`), `$.triggers[0].steps[0].wait_for: must not be null`},
	{"wait string", waitStep(`"trigger:b"`), `$.triggers[0].steps[0].wait_for: must be an object (got string)`},
	{"wait unknown field", waitStep(`{` + okWait + `,"timeout":"1h"}`), `$.triggers[0].steps[0].wait_for.timeout: unknown field (known: match, on, on_timeout, timeout_ms, trigger)`},
	{"wait trigger missing", waitStep(`{"match":"x","on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.trigger: required field is missing`},
	{"wait match missing", waitStep(`{"trigger":"trigger:b","on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.match: required field is missing`},
	{"wait on missing", waitStep(`{"trigger":"trigger:b","match":"x"}`), `$.triggers[0].steps[0].wait_for.on: required field is missing`},
	{"wait trigger not a ref", waitStep(`{"trigger":"b","match":"x","on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.trigger: ` + refRule},
	{"wait trigger number", waitStep(`{"trigger":7,"match":"x","on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.trigger: must be a string (got number)`},
	{"wait trigger unknown", waitStep(`{"trigger":"trigger:c","match":"x","on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.trigger: no trigger "trigger:c" in the program`},
	{"wait own trigger", waitStep(`{"trigger":"trigger:a","match":"x","on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.trigger: a step cannot wait for its own trigger: each delivery would offer itself to its own wait`},
	{"wait match null", waitStep(`{"trigger":"trigger:b","match":null,"on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.match: must not be null`},
	{"wait match ref outside", waitStep(`{"trigger":"trigger:b","match":{"$ref":"/queue/id"},"on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.match["$ref"]: ` + ptrRule},
	{"wait match ref nested outside", waitStep(`{"trigger":"trigger:b","match":{"k":[{"$ref":"/nope"}]},"on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.match.k[0]["$ref"]: ` + ptrRule},
	{"wait match ref unknown step", waitStep(`{"trigger":"trigger:b","match":{"$ref":"/steps/x/output"},"on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.match["$ref"]: must name an earlier step`},
	{"wait match ref itself", waitStep(`{"trigger":"trigger:b","match":{"$ref":"/steps/w/output/body"},"on":"/body/id"}`), `$.triggers[0].steps[0].wait_for.match["$ref"]: must name an earlier step`},
	{"wait on outside", waitStep(`{"trigger":"trigger:b","match":"x","on":"/event/body/id"}`), `$.triggers[0].steps[0].wait_for.on: ` + onRule},
	{"wait on not a pointer", waitStep(`{"trigger":"trigger:b","match":"x","on":"body.id"}`), `$.triggers[0].steps[0].wait_for.on: ` + onRule},
	{"wait on empty", waitStep(`{"trigger":"trigger:b","match":"x","on":""}`), `$.triggers[0].steps[0].wait_for.on: ` + onRule},
	{"wait on upper-case header", waitStep(`{"trigger":"trigger:b","match":"x","on":"/headers/X-Order"}`), `$.triggers[0].steps[0].wait_for.on: header names are lower-case (as a filter's)`},
	{"wait on number", waitStep(`{"trigger":"trigger:b","match":"x","on":1}`), `$.triggers[0].steps[0].wait_for.on: must be a string (got number)`},
	{"wait timeout zero", waitStep(`{` + okWait + `,"timeout_ms":0}`), `$.triggers[0].steps[0].wait_for.timeout_ms: must be a positive integer (got 0)`},
	{"wait timeout fraction", waitStep(`{` + okWait + `,"timeout_ms":1e3}`), `$.triggers[0].steps[0].wait_for.timeout_ms: must be a positive integer (got 1e3)`},
	{"wait timeout null", waitStep(`{` + okWait + `,"timeout_ms":null}`), `$.triggers[0].steps[0].wait_for.timeout_ms: must not be null`},
	{"wait on_timeout unknown", waitStep(`{` + okWait + `,"timeout_ms":1,"on_timeout":"skip"}`), `$.triggers[0].steps[0].wait_for.on_timeout: must be "fail" or "continue"`},
	{"wait on_timeout case", waitStep(`{` + okWait + `,"timeout_ms":1,"on_timeout":"Continue"}`), `$.triggers[0].steps[0].wait_for.on_timeout: must be "fail" or "continue"`},
	{"wait on_timeout bool", waitStep(`{` + okWait + `,"timeout_ms":1,"on_timeout":true}`), `$.triggers[0].steps[0].wait_for.on_timeout: must be a string (got boolean)`},
	{"wait on_timeout without timeout", waitStep(`{` + okWait + `,"on_timeout":"continue"}`), `$.triggers[0].steps[0].wait_for.on_timeout: takes effect only with timeout_ms: without it the wait never times out`},
	{"wait in second trigger unknown", doc(trig("trigger:b", okSource, okSteps), trig("trigger:a", okSource, `[{"id":"s","tool":"tool:a/B"},{"id":"w","wait_for":{"trigger":"trigger:z","match":"x","on":"/body"}}]`)), `$.triggers[1].steps[1].wait_for.trigger: no trigger "trigger:z" in the program`},

	// cancel_on.
	{"cancel_on null", withCancelOn(`null`), `$.triggers[0].cancel_on: must not be null`},
	{"cancel_on object", withCancelOn(`{"trigger":"trigger:b"}`), `$.triggers[0].cancel_on: must be an array (got object)`},
	{"cancel_on empty", withCancelOn(`[]`), `$.triggers[0].cancel_on: must hold at least one entry (omit the field when nothing cancels)`},
	{"cancel_on entry null", withCancelOn(`[null]`), `$.triggers[0].cancel_on[0]: must not be null`},
	{"cancel_on unknown field", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/body/id"},"on":"/body/id","when":"always"}]`), `$.triggers[0].cancel_on[0].when: unknown field (known: match, on, trigger)`},
	{"cancel_on trigger missing", withCancelOn(`[{"match":{"$ref":"/event/body/id"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].trigger: required field is missing`},
	{"cancel_on match missing", withCancelOn(`[{"trigger":"trigger:b","on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match: required field is missing`},
	{"cancel_on on missing", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/body/id"}}]`), `$.triggers[0].cancel_on[0].on: required field is missing`},
	{"cancel_on trigger not a ref", withCancelOn(`[{"trigger":"b","match":{"$ref":"/event/body/id"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].trigger: ` + refRule},
	{"cancel_on trigger unknown", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/body/id"},"on":"/body/id"},{"trigger":"trigger:q","match":{"$ref":"/event/body/id"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[1].trigger: no trigger "trigger:q" in the program`},
	{"cancel_on own trigger", withCancelOn(`[{"trigger":"trigger:a","match":{"$ref":"/event/body/id"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].trigger: a trigger cannot cancel its own entries: each delivery would meet its own cancel key`},
	{"cancel_on match literal", withCancelOn(`[{"trigger":"trigger:b","match":"inv_1","on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match: ` + cancelMatch},
	{"cancel_on match object", withCancelOn(`[{"trigger":"trigger:b","match":{"id":{"$ref":"/event/body/id"}},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match: ` + cancelMatch},
	{"cancel_on match into steps", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/steps/s/output/id"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match["$ref"]: ` + cancelMatch},
	{"cancel_on match queue_id", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/queue_id"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match["$ref"]: ` + cancelMatch},
	{"cancel_on match whole event", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event"},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match["$ref"]: ` + cancelMatch},
	{"cancel_on match not a string", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":null},"on":"/body/id"}]`), `$.triggers[0].cancel_on[0].match["$ref"]: must not be null`},
	{"cancel_on match upper header", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/headers/X-Account"},"on":"/headers/x-account"}]`), `$.triggers[0].cancel_on[0].match["$ref"]: header names are lower-case in /event/headers`},
	{"cancel_on on outside", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/body/id"},"on":"/event_id"}]`), `$.triggers[0].cancel_on[0].on: ` + onRule},
	{"cancel_on on upper header", withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/body/id"},"on":"/headers/X-Id"}]`), `$.triggers[0].cancel_on[0].on: header names are lower-case (as a filter's)`},
}

func TestParseProgram_RefusesDurable(t *testing.T) {
	seen := map[string]bool{}
	for _, tt := range badDurable {
		t.Run(tt.name, func(t *testing.T) {
			if seen[tt.name] {
				t.Fatalf("case name %q used twice", tt.name)
			}
			seen[tt.name] = true
			p, err := trigger.ParseProgram("p.json", []byte(tt.src))
			if got, want := errString(err), "p.json: "+tt.want; got != want {
				t.Fatalf("err=%s\nwant %s\nprogram: %s", got, want, tt.src)
			}
			if p != nil {
				t.Fatalf("refused program returned %+v", p)
			}
			var ce *trigger.ConfigError
			errors.As(err, &ce)
			assertConfigError(t, err, "p.json", ce.Path)
		})
	}
}
