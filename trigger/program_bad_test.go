package trigger_test

import (
	"errors"
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// badPrograms are refused programs with the exact message each must get:
// the file, the JSON path of the offending value and the rule.
var badPrograms = []struct{ name, src, want string }{
	// The document.
	{"empty", ``, `$: invalid JSON at line 1, column 1 (byte 0): unexpected end of input`},
	{"not json", `{"air_version":`, `$.air_version: invalid JSON at line 1, column 16 (byte 15): unexpected end of input`},
	{"top-level array", `[` + withSource(okSource) + `]`, `$: must be an object (got array)`},
	{"top-level null", `null`, `$: must not be null`},
	{"top-level string", `"touba-air-v1"`, `$: must be an object (got string)`},
	{"trailing document", withSource(okSource) + ` {}`, `$: trailing data after the JSON document (at line 1, column 132 (byte 131))`},
	{"trailing brace", withSource(okSource) + `}`, `$: trailing data after the JSON document (at line 1, column 131 (byte 130))`},
	{"unknown top field", `{"air_version":"touba-air-v1","triggers":[],"version":1}`, `$.version: unknown field (known: air_version, triggers)`},
	{"field name case", `{"Air_version":"touba-air-v1","air_version":"touba-air-v1","triggers":[]}`, `$.Air_version: unknown field (known: air_version, triggers)`},
	{"air_version missing", `{"triggers":[]}`, `$.air_version: required field is missing`},
	{"air_version wrong", `{"air_version":"touba-air-v2","triggers":[]}`, `$.air_version: must be "touba-air-v1"`},
	{"air_version number", `{"air_version":1,"triggers":[]}`, `$.air_version: must be a string (got number)`},
	{"triggers missing", `{"air_version":"touba-air-v1"}`, `$.triggers: required field is missing`},
	{"triggers empty", `{"air_version":"touba-air-v1","triggers":[]}`, `$.triggers: must hold at least one trigger`},
	{"triggers object", `{"air_version":"touba-air-v1","triggers":{}}`, `$.triggers: must be an array (got object)`},
	{"triggers null", `{"air_version":"touba-air-v1","triggers":null}`, `$.triggers: must not be null`},

	// The trigger.
	{"trigger null", doc(`null`), `$.triggers[0]: must not be null`},
	{"trigger unknown field", doc(`{"ref":"trigger:a","source":{"kind":"webhook"},"steps":[],"name":"a"}`), `$.triggers[0].name: unknown field (known: batch, cancel_on, concurrency, debounce, dispatch, filter, ref, retry, source, steps)`},
	{"ref missing", doc(`{"source":{"kind":"webhook"},"steps":[]}`), `$.triggers[0].ref: required field is missing`},
	{"source missing", doc(`{"ref":"trigger:a","steps":[]}`), `$.triggers[0].source: required field is missing`},
	{"steps missing", doc(`{"ref":"trigger:a","source":{"kind":"webhook"}}`), `$.triggers[0].steps: required field is missing`},
	{"ref no prefix", doc(trig("orders", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref empty name", doc(trig("trigger:", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref empty segment", doc(trig("trigger:a//b", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref trailing slash", doc(trig("trigger:a/", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref space", doc(trig("trigger:a b", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref query", doc(trig("trigger:a?x=1", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref upper prefix", doc(trig("Trigger:a", okSource, okSteps)), `$.triggers[0].ref: ` + refRule},
	{"ref number", doc(`{"ref":7,"source":{"kind":"webhook"},"steps":[]}`), `$.triggers[0].ref: must be a string (got number)`},
	{"duplicate ref", doc(trig("trigger:a", okSource, okSteps), trig("trigger:b", okSource, okSteps), trig("trigger:a", okSource, okSteps)), `$.triggers[2].ref: duplicate trigger ref "trigger:a"`},
	{"error in second trigger", doc(trig("trigger:a", okSource, okSteps), trig("trigger:b", okSource, `[{"id":"s","tool":"b"}]`)), `$.triggers[1].steps[0].tool: ` + toolRule},

	// The source.
	{"source null", withSource(`null`), `$.triggers[0].source: must not be null`},
	{"source unknown field", withSource(`{"kind":"webhook","path":"/hooks/a"}`), `$.triggers[0].source.path: unknown field (known: allow_from, event_id, kind, max_body_bytes, rate_limit, redelivery, verify)`},
	{"kind missing", withSource(`{}`), `$.triggers[0].source.kind: required field is missing`},
	{"kind wrong", withSource(`{"kind":"poll"}`), `$.triggers[0].source.kind: must be "webhook", "schedule" or "trigger"`},
	{"max_body_bytes fraction", withSource(`{"kind":"webhook","max_body_bytes":1.5}`), `$.triggers[0].source.max_body_bytes: must be a positive integer (got 1.5)`},
	{"max_body_bytes exponent", withSource(`{"kind":"webhook","max_body_bytes":1e3}`), `$.triggers[0].source.max_body_bytes: must be a positive integer (got 1e3)`},
	{"max_body_bytes 1.0", withSource(`{"kind":"webhook","max_body_bytes":1.0}`), `$.triggers[0].source.max_body_bytes: must be a positive integer (got 1.0)`},
	{"max_body_bytes negative", withSource(`{"kind":"webhook","max_body_bytes":-1}`), `$.triggers[0].source.max_body_bytes: must be a positive integer (got -1)`},
	{"max_body_bytes zero", withSource(`{"kind":"webhook","max_body_bytes":0}`), `$.triggers[0].source.max_body_bytes: must be a positive integer (got 0)`},
	{"max_body_bytes too big", withSource(`{"kind":"webhook","max_body_bytes":67108865}`), `$.triggers[0].source.max_body_bytes: must be at most 67108864 (got 67108865)`},
	{"max_body_bytes past int64", withSource(`{"kind":"webhook","max_body_bytes":9223372036854775808}`), `$.triggers[0].source.max_body_bytes: must be at most 67108864 (got 9223372036854775808)`},
	{"max_body_bytes null", withSource(`{"kind":"webhook","max_body_bytes":null}`), `$.triggers[0].source.max_body_bytes: must not be null`},
	{"max_body_bytes bool", withSource(`{"kind":"webhook","max_body_bytes":true}`), `$.triggers[0].source.max_body_bytes: must be a positive integer (got boolean)`},

	// The event id.
	{"event_id both", withSource(`{"kind":"webhook","event_id":{"header":"x-id","json_pointer":"/id"}}`), `$.triggers[0].source.event_id: must have exactly one of "header", "json_pointer"`},
	{"event_id neither", withSource(`{"kind":"webhook","event_id":{}}`), `$.triggers[0].source.event_id: must have one of "header", "json_pointer", or "required"`},
	{"event_id required string", withSource(`{"kind":"webhook","event_id":{"header":"x-id","required":"yes"}}`), `$.triggers[0].source.event_id.required: must be a boolean (got string)`},
	{"event_id required null", withSource(`{"kind":"webhook","event_id":{"required":null}}`), `$.triggers[0].source.event_id.required: must not be null`},
	{"redelivery unknown", withSource(`{"kind":"webhook","redelivery":"ignore"}`), `$.triggers[0].source.redelivery: must be "acknowledge" or "reject"`},
	{"redelivery case", withSource(`{"kind":"webhook","redelivery":"Reject"}`), `$.triggers[0].source.redelivery: must be "acknowledge" or "reject"`},
	{"redelivery bool", withSource(`{"kind":"webhook","redelivery":true}`), `$.triggers[0].source.redelivery: must be a string (got boolean)`},
	{"redelivery null", withSource(`{"kind":"webhook","redelivery":null}`), `$.triggers[0].source.redelivery: must not be null`},
	{"event_id null", withSource(`{"kind":"webhook","event_id":null}`), `$.triggers[0].source.event_id: must not be null`},
	{"event_id string", withSource(`{"kind":"webhook","event_id":"x-id"}`), `$.triggers[0].source.event_id: must be an object (got string)`},
	{"event_id unknown field", withSource(`{"kind":"webhook","event_id":{"query":"id"}}`), `$.triggers[0].source.event_id.query: unknown field (known: header, json_pointer, required)`},
	{"header with space", withSource(`{"kind":"webhook","event_id":{"header":"x id"}}`), `$.triggers[0].source.event_id.header: must be an HTTP header name`},
	{"header with colon", withSource(`{"kind":"webhook","event_id":{"header":"x-id:"}}`), `$.triggers[0].source.event_id.header: must be an HTTP header name`},
	{"header empty", withSource(`{"kind":"webhook","event_id":{"header":""}}`), `$.triggers[0].source.event_id.header: must be an HTTP header name`},
	{"header non-ascii", withSource(`{"kind":"webhook","event_id":{"header":"x-idé"}}`), `$.triggers[0].source.event_id.header: must be an HTTP header name`},
	{"header number", withSource(`{"kind":"webhook","event_id":{"header":1}}`), `$.triggers[0].source.event_id.header: must be a string (got number)`},
	{"pointer no slash", withSource(`{"kind":"webhook","event_id":{"json_pointer":"id"}}`), `$.triggers[0].source.event_id.json_pointer: must be a non-empty JSON pointer`},
	{"pointer empty", withSource(`{"kind":"webhook","event_id":{"json_pointer":""}}`), `$.triggers[0].source.event_id.json_pointer: must be a non-empty JSON pointer`},
	{"pointer bad escape", withSource(`{"kind":"webhook","event_id":{"json_pointer":"/a~2"}}`), `$.triggers[0].source.event_id.json_pointer: must be a non-empty JSON pointer`},

	// Verification.
	{"verify null", withVerify(`null`), `$.triggers[0].source.verify: must not be null`},
	{"verify unknown field", withVerify(`{"scheme":"github","secret":{"env":"K"},"algorithm":"sha1"}`), `$.triggers[0].source.verify.algorithm: unknown field (known: encoding, header, prefix, scheme, secret, secrets, tolerance_sec)`},
	{"scheme missing", withVerify(`{"secret":{"env":"K"}}`), `$.triggers[0].source.verify.scheme: required field is missing`},
	{"scheme unknown", withVerify(`{"scheme":"hmac-sha1","secret":{"env":"K"}}`), `$.triggers[0].source.verify.scheme: unknown scheme "hmac-sha1" (want one of hmac-sha256, github, stripe, standard-webhooks, slack, shopify)`},
	{"scheme case", withVerify(`{"scheme":"GitHub","secret":{"env":"K"}}`), `$.triggers[0].source.verify.scheme: unknown scheme "GitHub" (want one of hmac-sha256, github, stripe, standard-webhooks, slack, shopify)`},
	{"secret and secrets", withVerify(`{"scheme":"github","secret":{"env":"K"},"secrets":[{"env":"K"}]}`), `$.triggers[0].source.verify: must have exactly one of "secret", "secrets"`},
	{"no secret", withVerify(`{"scheme":"github"}`), `$.triggers[0].source.verify: must have exactly one of "secret", "secrets"`},
	{"secret two sources", withVerify(`{"scheme":"github","secret":{"env":"K","file":"k.txt"}}`), `$.triggers[0].source.verify.secret: ` + oneSourceRule},
	{"secret no source", withVerify(`{"scheme":"github","secret":{}}`), `$.triggers[0].source.verify.secret: ` + oneSourceRule},
	{"secret empty env", withVerify(`{"scheme":"github","secret":{"env":""}}`), `$.triggers[0].source.verify.secret: ` + oneSourceRule},
	{"secret unknown field", withVerify(`{"scheme":"github","secret":{"env":"K","value":"hunter2"}}`), `$.triggers[0].source.verify.secret: secret reference: unknown field "value"`},
	{"secret null", withVerify(`{"scheme":"github","secret":null}`), `$.triggers[0].source.verify.secret: must be a secret reference`},
	{"secret credential path", withVerify(`{"scheme":"github","secret":{"credential":"../k"}}`), `$.triggers[0].source.verify.secret: secret reference: credential name must not contain a path separator`},
	{"secrets empty", withVerify(`{"scheme":"github","secrets":[]}`), `$.triggers[0].source.verify.secrets: must hold at least one secret reference`},
	{"secrets object", withVerify(`{"scheme":"github","secrets":{"env":"K"}}`), `$.triggers[0].source.verify.secrets: must be an array (got object)`},
	{"secrets null entry", withVerify(`{"scheme":"github","secrets":[{"env":"K"},null]}`), `$.triggers[0].source.verify.secrets[1]: must be a secret reference`},
	{"secrets bad entry", withVerify(`{"scheme":"github","secrets":[{"env":"K"},{"env":"A","credential":"b"}]}`), `$.triggers[0].source.verify.secrets[1]: ` + oneSourceRule},
	{"header on github", withVerify(`{"scheme":"github","secret":{"env":"K"},"header":"X-Sig"}`), `$.triggers[0].source.verify.header: only the hmac-sha256 scheme takes a header name`},
	{"header on stripe", withVerify(`{"scheme":"stripe","secret":{"env":"K"},"header":"Stripe-Signature"}`), `$.triggers[0].source.verify.header: only the hmac-sha256 scheme takes a header name`},
	{"hmac header bad", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"header":"X Sig"}`), `$.triggers[0].source.verify.header: must be an HTTP header name`},
	{"hmac header null", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"header":null}`), `$.triggers[0].source.verify.header: must not be null`},
	{"scheme Shopify case", withVerify(`{"scheme":"Shopify","secret":{"env":"K"}}`), `$.triggers[0].source.verify.scheme: unknown scheme "Shopify" (want one of hmac-sha256, github, stripe, standard-webhooks, slack, shopify)`},
	{"header on shopify", withVerify(`{"scheme":"shopify","secret":{"env":"K"},"header":"X-Shopify-Hmac-Sha256"}`), `$.triggers[0].source.verify.header: only the hmac-sha256 scheme takes a header name`},
	{"encoding unknown", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":"base64url"}`), `$.triggers[0].source.verify.encoding: unknown encoding "base64url" (want "hex" or "base64")`},
	{"encoding case", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":"HEX"}`), `$.triggers[0].source.verify.encoding: unknown encoding "HEX" (want "hex" or "base64")`},
	{"encoding empty", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":""}`), `$.triggers[0].source.verify.encoding: unknown encoding "" (want "hex" or "base64")`},
	{"encoding number", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":64}`), `$.triggers[0].source.verify.encoding: must be a string (got number)`},
	{"encoding null", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":null}`), `$.triggers[0].source.verify.encoding: must not be null`},
	{"encoding on shopify", withVerify(`{"scheme":"shopify","secret":{"env":"K"},"encoding":"base64"}`), `$.triggers[0].source.verify.encoding: only the hmac-sha256 scheme takes an encoding`},
	{"encoding on github", withVerify(`{"scheme":"github","secret":{"env":"K"},"encoding":"hex"}`), `$.triggers[0].source.verify.encoding: only the hmac-sha256 scheme takes an encoding`},
	{"prefix on github", withVerify(`{"scheme":"github","secret":{"env":"K"},"prefix":"sha256="}`), `$.triggers[0].source.verify.prefix: only the hmac-sha256 scheme takes a prefix`},
	{"prefix on slack", withVerify(`{"scheme":"slack","secret":{"env":"K"},"prefix":""}`), `$.triggers[0].source.verify.prefix: only the hmac-sha256 scheme takes a prefix`},
	{"prefix with space", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"prefix":"sha256= "}`), `$.triggers[0].source.verify.prefix: prefix must be visible ASCII without spaces`},
	{"prefix non-ascii", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"prefix":"sig\u00e9="}`), `$.triggers[0].source.verify.prefix: prefix must be visible ASCII without spaces`},
	{"prefix too long", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"prefix":"` + long65[:33] + `"}`), `$.triggers[0].source.verify.prefix: prefix is longer than 32 bytes`},
	{"prefix null", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"prefix":null}`), `$.triggers[0].source.verify.prefix: must not be null`},
	{"tolerance zero", withVerify(`{"scheme":"slack","secret":{"env":"K"},"tolerance_sec":0}`), `$.triggers[0].source.verify.tolerance_sec: must be a positive integer (got 0)`},
	{"tolerance too big", withVerify(`{"scheme":"slack","secret":{"env":"K"},"tolerance_sec":86401}`), `$.triggers[0].source.verify.tolerance_sec: must be at most 86400 (got 86401)`},
	{"tolerance fraction", withVerify(`{"scheme":"slack","secret":{"env":"K"},"tolerance_sec":2.5}`), `$.triggers[0].source.verify.tolerance_sec: must be a positive integer (got 2.5)`},

	// The steps.
	{"steps object", withSteps(`{"id":"s","tool":"tool:a/B"}`), `$.triggers[0].steps: must be an array (got object)`},
	{"step null", withSteps(`[null]`), `$.triggers[0].steps[0]: must not be null`},
	{"step unknown field", withSteps(`[{"id":"s","tool":"tool:a/B","with":{}}]`), `$.triggers[0].steps[0].with: unknown field (known: id, input, sleep, tool, wait_for, when)`},
	{"step id missing", withSteps(`[{"tool":"tool:a/B"}]`), `$.triggers[0].steps[0].id: required field is missing`},
	{"step tool missing", withSteps(`[{"id":"s"}]`), `$.triggers[0].steps[0]: must have exactly one of "tool", "sleep", "wait_for"`},
	{"step id empty", withSteps(`[{"id":"","tool":"tool:a/B"}]`), `$.triggers[0].steps[0].id: must match [A-Za-z0-9_-]{1,64}`},
	{"step id with slash", withSteps(`[{"id":"a/b","tool":"tool:a/B"}]`), `$.triggers[0].steps[0].id: must match [A-Za-z0-9_-]{1,64}`},
	{"step id too long", withSteps(`[{"id":"` + long65 + `","tool":"tool:a/B"}]`), `$.triggers[0].steps[0].id: must match [A-Za-z0-9_-]{1,64}`},
	{"duplicate step id", withSteps(`[{"id":"s","tool":"tool:a/B"},{"id":"t","tool":"tool:a/B"},{"id":"s","tool":"tool:a/C"}]`), `$.triggers[0].steps[2].id: duplicate step id "s"`},
	{"tool no prefix", withSteps(`[{"id":"s","tool":"examples.orders/ReadOrder"}]`), `$.triggers[0].steps[0].tool: ` + toolRule},
	{"tool empty name", withSteps(`[{"id":"s","tool":"tool:"}]`), `$.triggers[0].steps[0].tool: ` + toolRule},
	{"tool trailing slash", withSteps(`[{"id":"s","tool":"tool:a/"}]`), `$.triggers[0].steps[0].tool: ` + toolRule},
	{"tool is a trigger", withSteps(`[{"id":"s","tool":"trigger:a/B"}]`), `$.triggers[0].steps[0].tool: ` + toolRule},
	{"tool number", withSteps(`[{"id":"s","tool":1}]`), `$.triggers[0].steps[0].tool: must be a string (got number)`},

	// Input references.
	{"ref to later step", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"/steps/b/output"}}},{"id":"b","tool":"tool:a/B"}]`), `$.triggers[0].steps[0].input.x["$ref"]: must name an earlier step`},
	{"ref to itself", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"/steps/a/output"}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must name an earlier step`},
	{"ref to unknown step", withSteps(`[{"id":"a","tool":"tool:a/B"},{"id":"b","tool":"tool:a/B","input":{"x":{"$ref":"/steps/c/output"}}}]`), `$.triggers[0].steps[1].input.x["$ref"]: must name an earlier step`},
	{"ref to steps root", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"/steps"}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must name an earlier step`},
	{"ref unknown root", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"/env/HOME"}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must be a JSON pointer into /event, /events or /steps`},
	{"ref without slash", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"event/body"}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must be a JSON pointer into /event, /events or /steps`},
	{"ref whole context", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":""}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must be a JSON pointer into /event, /events or /steps`},
	{"ref bad escape", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":"/event/~x"}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must be a JSON pointer into /event, /events or /steps`},
	{"ref non-string", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"x":{"$ref":["/event"]}}}]`), `$.triggers[0].steps[0].input.x["$ref"]: must be a string (got array)`},
	{"ref in array", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"l":[1,{"$ref":"/event"},{"$ref":"/nope"}]}}]`), `$.triggers[0].steps[0].input.l[2]["$ref"]: must be a JSON pointer into /event, /events or /steps`},
	{"ref whole input", withSteps(`[{"id":"a","tool":"tool:a/B","input":{"$ref":"/queue"}}]`), `$.triggers[0].steps[0].input["$ref"]: must be a JSON pointer into /event, /events or /steps`},

	// Retry.
	{"retry null", withRetry(`null`), `$.triggers[0].retry: must not be null`},
	{"retry unknown field", withRetry(`{"backoff":"exponential"}`), `$.triggers[0].retry.backoff: unknown field (known: initial_interval_ms, max_attempts, max_interval_ms)`},
	{"max_attempts zero", withRetry(`{"max_attempts":0}`), `$.triggers[0].retry.max_attempts: must be a positive integer (got 0)`},
	{"max_attempts too many", withRetry(`{"max_attempts":1001}`), `$.triggers[0].retry.max_attempts: must be at most 1000 (got 1001)`},
	{"max_attempts fraction", withRetry(`{"max_attempts":1.5}`), `$.triggers[0].retry.max_attempts: must be a positive integer (got 1.5)`},
	{"max_attempts exponent", withRetry(`{"max_attempts":1e1}`), `$.triggers[0].retry.max_attempts: must be a positive integer (got 1e1)`},
	{"initial negative", withRetry(`{"initial_interval_ms":-1}`), `$.triggers[0].retry.initial_interval_ms: must be a positive integer (got -1)`},
	{"max interval zero", withRetry(`{"max_interval_ms":0}`), `$.triggers[0].retry.max_interval_ms: must be a positive integer (got 0)`},
	{"max below initial", withRetry(`{"initial_interval_ms":2000,"max_interval_ms":1000}`), `$.triggers[0].retry.max_interval_ms: must not be below initial_interval_ms`},

	// Dispatch.
	{"dispatch null", withDispatch(`null`), `$.triggers[0].dispatch: must not be null`},
	{"dispatch number", withDispatch(`10`), `$.triggers[0].dispatch: must be an object (got number)`},
	{"dispatch unknown field", withDispatch(`{"weight":10,"priority":1}`), `$.triggers[0].dispatch.priority: unknown field (known: weight)`},
	{"weight zero", withDispatch(`{"weight":0}`), `$.triggers[0].dispatch.weight: must be a positive integer (got 0)`},
	{"weight negative", withDispatch(`{"weight":-5}`), `$.triggers[0].dispatch.weight: must be a positive integer (got -5)`},
	{"weight too big", withDispatch(`{"weight":101}`), `$.triggers[0].dispatch.weight: must be at most 100 (got 101)`},
	{"weight past int64", withDispatch(`{"weight":9223372036854775808}`), `$.triggers[0].dispatch.weight: must be at most 100 (got 9223372036854775808)`},
	{"weight fraction", withDispatch(`{"weight":2.5}`), `$.triggers[0].dispatch.weight: must be a positive integer (got 2.5)`},
	{"weight 10.0", withDispatch(`{"weight":10.0}`), `$.triggers[0].dispatch.weight: must be a positive integer (got 10.0)`},
	{"weight exponent", withDispatch(`{"weight":1e1}`), `$.triggers[0].dispatch.weight: must be a positive integer (got 1e1)`},
	{"weight string", withDispatch(`{"weight":"10"}`), `$.triggers[0].dispatch.weight: must be a positive integer (got string)`},
	{"weight null", withDispatch(`{"weight":null}`), `$.triggers[0].dispatch.weight: must not be null`},
}

// Rules repeated across cases.
const (
	refRule       = `must be "trigger:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*`
	toolRule      = `must be "tool:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*`
	ptrRule       = `must be a JSON pointer into /event, /events or /steps`
	oneSourceRule = `secret reference must name exactly one of "env", "file", "credential"`
	long65        = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)

func TestParseProgram_Refuses(t *testing.T) {
	if got := len(long65); got != 65 {
		t.Fatalf("len(long65)=%d", got)
	}
	seen := map[string]bool{}
	for _, tt := range badPrograms {
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
