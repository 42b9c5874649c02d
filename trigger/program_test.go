package trigger_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/trigger"
)

// specExamplePath is the program of SPEC §2.1, copied verbatim.
var specExamplePath = filepath.Join("testdata", "programs", "spec-example.json")

// Builders of small programs: each wraps one fragment in an otherwise
// valid document, so a table case shows only what it varies.
const (
	okSource = `{"kind":"webhook"}`
	okSteps  = `[{"id":"s","tool":"tool:a/B"}]`
)

func doc(triggers ...string) string {
	out := `{"air_version":"touba-air-v1","triggers":[`
	for i, t := range triggers {
		if i > 0 {
			out += ","
		}
		out += t
	}
	return out + `]}`
}

func trig(ref, source, steps string) string {
	return `{"ref":"` + ref + `","source":` + source + `,"steps":` + steps + `}`
}

func withSource(source string) string { return doc(trig("trigger:a", source, okSteps)) }
func withSteps(steps string) string   { return doc(trig("trigger:a", okSource, steps)) }

func withVerify(verify string) string {
	return withSource(`{"kind":"webhook","verify":` + verify + `}`)
}

func withRetry(retry string) string {
	return doc(`{"ref":"trigger:a","source":` + okSource + `,"steps":` + okSteps + `,"retry":` + retry + `}`)
}

func withDispatch(dispatch string) string {
	return doc(`{"ref":"trigger:a","source":` + okSource + `,"steps":` + okSteps + `,"dispatch":` + dispatch + `}`)
}

// MustParse parses src as p.json, failing the test on a refusal.
func MustParse(tb testing.TB, src string) *trigger.Program {
	tb.Helper()
	p, err := trigger.ParseProgram("p.json", []byte(src))
	if err != nil {
		tb.Fatalf("parse: %v\nprogram: %s", err, src)
	}
	return p
}

// compact re-encodes raw without spaces so inputs compare by content.
func compact(tb testing.TB, raw []byte) string {
	tb.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		tb.Fatalf("compact %q: %v", raw, err)
	}
	return b.String()
}

func TestLoadProgram_SpecExample(t *testing.T) {
	p, err := trigger.LoadProgram(specExamplePath)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got, want := p.Path, specExamplePath; got != want {
		t.Fatalf("Path=%q, want %q", got, want)
	}
	if got, want := len(p.Triggers), 1; got != want {
		t.Fatalf("len(Triggers)=%d, want %d", got, want)
	}
	tr := p.Triggers[0]
	want := trigger.Trigger{
		Ref:  "trigger:examples.orders/OrderWebhook",
		Name: "examples.orders/OrderWebhook",
		Source: trigger.Source{
			Kind:         "webhook",
			EventID:      trigger.EventIDSource{Header: "X-Touba-Event-Id"}, // canonicalised
			MaxBodyBytes: 1048576,
			Redelivery:   touba.RedeliveryAcknowledge,
			Verify: &trigger.Verify{
				Scheme:       "standard-webhooks",
				Secrets:      []secret.Ref{{Env: "ORDERS_WEBHOOK_SECRET"}},
				ToleranceSec: 300,
				Single:       true,
			},
		},
		Retry:  trigger.Retry{MaxAttempts: 8, InitialIntervalMS: 500, MaxIntervalMS: 60000},
		Weight: 10,
	}
	steps := tr.Steps
	got := *tr
	got.Steps, got.Digest, got.Definition = nil, "", nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trigger=%+v\nwant     %+v", got, want)
	}
	if got, want := *tr.Source.Verify, *want.Source.Verify; !reflect.DeepEqual(got, want) {
		t.Fatalf("verify=%+v, want %+v", got, want)
	}

	wantSteps := []struct{ id, tool, input string }{
		{"read", "tool:examples.orders/ReadOrder", `{"order_id":{"$ref":"/event/body/order_id"}}`},
		{"create", "tool:examples.orders/CreateOrder", `{"request":{"$ref":"/event/body"},"existing":{"$ref":"/steps/read/output"}}`},
	}
	if got, want := len(steps), len(wantSteps); got != want {
		t.Fatalf("len(Steps)=%d, want %d", got, want)
	}
	for i, w := range wantSteps {
		s := steps[i]
		if s.ID != w.id || s.Tool != w.tool || compact(t, s.Input) != w.input {
			t.Fatalf("step %d = {%q %q %s}, want {%q %q %s}", i, s.ID, s.Tool, s.Input, w.id, w.tool, w.input)
		}
	}

	if got, ok := p.Lookup("examples.orders/OrderWebhook"); !ok || got != tr {
		t.Fatalf("Lookup(name)=%p,%v, want %p,true", got, ok, tr)
	}
	for _, name := range []string{"trigger:examples.orders/OrderWebhook", "examples.orders", "", "examples.orders/orderwebhook"} {
		if _, ok := p.Lookup(name); ok {
			t.Fatalf("Lookup(%q) found a trigger", name)
		}
	}
	if got, want := p.ToolRefs(), []string{"tool:examples.orders/CreateOrder", "tool:examples.orders/ReadOrder"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ToolRefs=%q, want %q", got, want)
	}
}

func TestLoadProgram_MissingFile(t *testing.T) {
	_, err := trigger.LoadProgram(filepath.Join(t.TempDir(), "absent.json"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err=%v, want fs.ErrNotExist", err)
	}
}

func TestParseProgram_Defaults(t *testing.T) {
	p := MustParse(t, withSource(okSource))
	want := &trigger.Trigger{
		Ref:  "trigger:a",
		Name: "a",
		Source: trigger.Source{
			Kind:         "webhook",
			EventID:      trigger.EventIDSource{Header: "X-Touba-Event-Id"},
			MaxBodyBytes: 1048576,
			Redelivery:   touba.RedeliveryAcknowledge,
		},
		Steps:  []trigger.Step{{ID: "s", Tool: "tool:a/B", Input: json.RawMessage("{}")}},
		Retry:  trigger.Retry{MaxAttempts: 8, InitialIntervalMS: 500, MaxIntervalMS: 60000},
		Weight: trigger.DefaultWeight,
		// The trigger's object as written, canonical, and its SHA-256.
		Definition: json.RawMessage(`{"ref":"trigger:a","source":{"kind":"webhook"},"steps":[{"id":"s","tool":"tool:a/B"}]}`),
		Digest:     "58e525107d93fabea1927d7ba329e17bd390cfcae742896eb7318343c322b369",
	}
	if got := p.Triggers[0]; !reflect.DeepEqual(got, want) {
		t.Fatalf("trigger=%+v\nwant     %+v", got, want)
	}
}

func TestParseProgram_EventIDDefaults(t *testing.T) {
	tests := []struct {
		name, source string
		want         trigger.EventIDSource
	}{
		{"no verify", okSource, trigger.EventIDSource{Header: "X-Touba-Event-Id"}},
		{"hmac-sha256", verifySource("hmac-sha256", ""), trigger.EventIDSource{Header: "X-Touba-Event-Id"}},
		// Slack's url_verification challenge has no event_id: optional.
		{"slack", verifySource("slack", ""), trigger.EventIDSource{JSONPointer: "/event_id"}},
		// The schemes' own ids are required by default (SPEC §2.1).
		{"standard-webhooks", verifySource("standard-webhooks", ""), trigger.EventIDSource{Header: "Webhook-Id", Required: true}},
		{"stripe", verifySource("stripe", ""), trigger.EventIDSource{JSONPointer: "/id", Required: true}},
		{"github", verifySource("github", ""), trigger.EventIDSource{Header: "X-Github-Delivery", Required: true}},
		// Another source than the scheme's: optional unless asked.
		{"shopify", verifySource("shopify", ""), trigger.EventIDSource{Header: "X-Shopify-Webhook-Id", Required: true}},
		{"shopify with pointer", verifySource("shopify", `{"json_pointer":"/id"}`), trigger.EventIDSource{JSONPointer: "/id"}},
		{"stripe with header", verifySource("stripe", `{"header":"x-request-id"}`), trigger.EventIDSource{Header: "X-Request-Id"}},
		{"github with pointer", verifySource("github", `{"json_pointer":"/hook/id"}`), trigger.EventIDSource{JSONPointer: "/hook/id"}},
		{"pointer escapes kept", `{"kind":"webhook","event_id":{"json_pointer":"/a~1b/~0c"}}`, trigger.EventIDSource{JSONPointer: "/a~1b/~0c"}},
		// The scheme's own source written out is still its default.
		{"stripe /id written out", verifySource("stripe", `{"json_pointer":"/id"}`), trigger.EventIDSource{JSONPointer: "/id", Required: true}},
		{"github header written out", verifySource("github", `{"header":"x-github-delivery"}`), trigger.EventIDSource{Header: "X-Github-Delivery", Required: true}},
		{"webhook-id written out", verifySource("standard-webhooks", `{"header":"webhook-id"}`), trigger.EventIDSource{Header: "Webhook-Id", Required: true}},
		// The default id header of no scheme: optional.
		{"x-touba-event-id under stripe", verifySource("stripe", `{"header":"x-touba-event-id"}`), trigger.EventIDSource{Header: "X-Touba-Event-Id"}},
		// required given: it wins either way.
		{"required false on the scheme default", verifySource("stripe", `{"required":false}`), trigger.EventIDSource{JSONPointer: "/id"}},
		{"required true on another source", verifySource("stripe", `{"header":"x-request-id","required":true}`), trigger.EventIDSource{Header: "X-Request-Id", Required: true}},
		{"required true alone, no verify", `{"kind":"webhook","event_id":{"required":true}}`, trigger.EventIDSource{Header: "X-Touba-Event-Id", Required: true}},
		{"required true on slack", verifySource("slack", `{"required":true}`), trigger.EventIDSource{JSONPointer: "/event_id", Required: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := MustParse(t, withSource(tt.source))
			if got := p.Triggers[0].Source.EventID; got != tt.want {
				t.Fatalf("EventID=%+v, want %+v", got, tt.want)
			}
		})
	}
}

// A verified trigger whose event id comes from a header the signature
// does not cover is named replayable; one whose id is signed is not.
func TestUnsignedEventID(t *testing.T) {
	for _, tt := range []struct {
		name, source string
		warn         bool
	}{
		{"no verify", okSource, false},
		{"github default", verifySource("github", ""), true},
		{"github body id", verifySource("github", `{"json_pointer":"/hook/id"}`), false},
		{"hmac-sha256 default header", verifySource("hmac-sha256", ""), true},
		{"hmac-sha256 body id", verifySource("hmac-sha256", `{"json_pointer":"/id"}`), false},
		{"standard-webhooks default", verifySource("standard-webhooks", ""), false},
		{"standard-webhooks other header", verifySource("standard-webhooks", `{"header":"x-request-id"}`), true},
		{"stripe default", verifySource("stripe", ""), false},
		{"stripe header", verifySource("stripe", `{"header":"x-request-id"}`), true},
		{"slack default", verifySource("slack", ""), false},
		{"shopify default", verifySource("shopify", ""), true}, // X-Shopify-Webhook-Id is not signed
		{"shopify body id", verifySource("shopify", `{"json_pointer":"/id"}`), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			why := MustParse(t, withSource(tt.source)).Triggers[0].UnsignedEventID()
			if (why != "") != tt.warn {
				t.Fatalf("UnsignedEventID=%q, want a warning: %v", why, tt.warn)
			}
		})
	}
}

// verifySource is a source verified with scheme, with an optional event_id.
func verifySource(scheme, eventID string) string {
	s := `{"kind":"webhook","verify":{"scheme":"` + scheme + `","secret":{"env":"K"}}`
	if eventID != "" {
		s += `,"event_id":` + eventID
	}
	return s + `}`
}

func TestParseProgram_Accepts(t *testing.T) {
	tests := []struct {
		name, src string
		check     func(t *testing.T, tr *trigger.Trigger)
	}{
		{"secrets for rotation", withVerify(`{"scheme":"github","secrets":[{"env":"NEW"},{"file":"old.key"},{"credential":"older"}]}`),
			func(t *testing.T, tr *trigger.Trigger) {
				want := []secret.Ref{{Env: "NEW"}, {File: "old.key"}, {Credential: "older"}}
				if got := tr.Source.Verify.Secrets; !reflect.DeepEqual(got, want) {
					t.Fatalf("Secrets=%v, want %v", got, want)
				}
			}},
		{"hmac header name", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"header":"X-Acme-Signature"}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if got, want := tr.Source.Verify.Header, "X-Acme-Signature"; got != want {
					t.Fatalf("Header=%q, want %q", got, want)
				}
			}},
		{"hmac encoding and prefix", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":"base64","prefix":""}`),
			func(t *testing.T, tr *trigger.Trigger) {
				v := tr.Source.Verify
				if v.Encoding != "base64" || v.Prefix == nil || *v.Prefix != "" {
					t.Fatalf("Encoding=%q Prefix=%v, want base64 and an empty prefix", v.Encoding, v.Prefix)
				}
			}},
		{"hmac defaults leave encoding and prefix unset", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"}}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if v := tr.Source.Verify; v.Encoding != "" || v.Prefix != nil {
					t.Fatalf("Encoding=%q Prefix=%v, want both unset", v.Encoding, v.Prefix)
				}
			}},
		{"hmac custom prefix, hex", withVerify(`{"scheme":"hmac-sha256","secret":{"env":"K"},"encoding":"hex","prefix":"v1="}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if v := tr.Source.Verify; v.Encoding != "hex" || v.Prefix == nil || *v.Prefix != "v1=" {
					t.Fatalf("Encoding=%q Prefix=%v, want hex and v1=", v.Encoding, v.Prefix)
				}
			}},
		{"shopify", withVerify(`{"scheme":"shopify","secrets":[{"env":"NEW"},{"env":"OLD"}]}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if got, want := tr.Source.Verify.Scheme, "shopify"; got != want {
					t.Fatalf("Scheme=%q, want %q", got, want)
				}
			}},
		{"bounds", withSource(`{"kind":"webhook","max_body_bytes":67108864,"verify":{"scheme":"slack","secret":{"env":"K"},"tolerance_sec":86400}}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if got, want := tr.Source.MaxBodyBytes, int64(64<<20); got != want {
					t.Fatalf("MaxBodyBytes=%d, want %d", got, want)
				}
				if got, want := tr.Source.Verify.ToleranceSec, int64(86400); got != want {
					t.Fatalf("ToleranceSec=%d, want %d", got, want)
				}
			}},
		{"partial retry keeps defaults", withRetry(`{"max_attempts":1}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if got, want := tr.Retry, (trigger.Retry{MaxAttempts: 1, InitialIntervalMS: 500, MaxIntervalMS: 60000}); got != want {
					t.Fatalf("Retry=%+v, want %+v", got, want)
				}
			}},
		{"retry equal intervals", withRetry(`{"initial_interval_ms":1000,"max_interval_ms":1000}`),
			func(t *testing.T, tr *trigger.Trigger) {
				if got, want := tr.Retry.MaxIntervalMS, int64(1000); got != want {
					t.Fatalf("MaxIntervalMS=%d, want %d", got, want)
				}
			}},
		{"refs in arrays and literal look-alikes", withSteps(`[{"id":"a","tool":"tool:t/A"},{"id":"b","tool":"tool:t/A","input":
			{"list":[{"$ref":"/steps/a/output"},{"$ref":"/event/headers/x"}],"lit":{"$ref":5,"also":"literal"},"n":null}}]`),
			func(t *testing.T, tr *trigger.Trigger) {
				if got, want := compact(t, tr.Steps[1].Input), `{"list":[{"$ref":"/steps/a/output"},{"$ref":"/event/headers/x"}],"lit":{"$ref":5,"also":"literal"},"n":null}`; got != want {
					t.Fatalf("Input=%s, want %s", got, want)
				}
			}},
		{"surrounding whitespace", " \n" + withSource(okSource) + "\n\t ",
			func(t *testing.T, tr *trigger.Trigger) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, MustParse(t, tt.src).Triggers[0])
		})
	}
}

func TestProgram_LookupSeveral(t *testing.T) {
	p := MustParse(t, doc(trig("trigger:a", okSource, okSteps), trig("trigger:a/b", okSource, `[{"id":"s","tool":"tool:z/Z"}]`), trig("trigger:a.b", okSource, okSteps)))
	for i, name := range []string{"a", "a/b", "a.b"} {
		if got, ok := p.Lookup(name); !ok || got != p.Triggers[i] {
			t.Fatalf("Lookup(%q)=%v,%v, want trigger %d", name, got, ok, i)
		}
	}
	if got, want := p.ToolRefs(), []string{"tool:a/B", "tool:z/Z"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ToolRefs=%q, want %q", got, want)
	}
}

func TestProgram_CheckTools(t *testing.T) {
	p, err := trigger.LoadProgram(specExamplePath)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	bound := map[string]bool{"tool:examples.orders/ReadOrder": true, "tool:examples.orders/CreateOrder": true}
	has := func(ref string) bool { return bound[ref] }
	if err := p.CheckTools(has); err != nil {
		t.Fatalf("all bound: %v", err)
	}
	delete(bound, "tool:examples.orders/CreateOrder")
	err = p.CheckTools(has)
	if got, want := errString(err), specExamplePath+`: $.triggers[0].steps[1].tool: tool "tool:examples.orders/CreateOrder" is not bound in the manifest`; got != want {
		t.Fatalf("err=%s\nwant %s", got, want)
	}
	assertConfigError(t, err, specExamplePath, "$.triggers[0].steps[1].tool")

	// The path names the trigger and step of the first unbound tool.
	p = MustParse(t, doc(trig("trigger:a", okSource, okSteps), trig("trigger:b", okSource, `[{"id":"x","tool":"tool:a/B"},{"id":"y","tool":"tool:gone/G"}]`)))
	err = p.CheckTools(func(ref string) bool { return ref == "tool:a/B" })
	assertConfigError(t, err, "p.json", "$.triggers[1].steps[1].tool")
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// assertConfigError checks that err is a *trigger.ConfigError for file and
// path that prints as "<file>: <path>: <rule>" and carries ConfigInvalid.
func assertConfigError(tb testing.TB, err error, file, path string) {
	tb.Helper()
	var ce *trigger.ConfigError
	if !errors.As(err, &ce) {
		tb.Fatalf("err=%v (%T), want *trigger.ConfigError", err, err)
	}
	if ce.File != file || ce.Path != path || ce.Rule == "" {
		tb.Fatalf("ConfigError{%q %q %q}, want file %q path %q and a rule", ce.File, ce.Path, ce.Rule, file, path)
	}
	if got, want := err.Error(), file+": "+path+": "+ce.Rule; got != want {
		tb.Fatalf("Error()=%q, want %q", got, want)
	}
	if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
		tb.Fatalf("ErrorCode=%q, want %q", got, want)
	}
}

// The file name a refusal names is the one LoadProgram was given.
func TestLoadProgram_RefusalNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orders.program.json")
	if err := os.WriteFile(path, []byte(withRetry(`{"max_attempts":0}`)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := trigger.LoadProgram(path)
	assertConfigError(t, err, path, "$.triggers[0].retry.max_attempts")
}

// A JSON string is not an integer, even when it spells one.
func TestParseProgram_QuotedIntegerRefused(t *testing.T) {
	tests := []struct{ src, path string }{
		{withSource(`{"kind":"webhook","max_body_bytes":"1024"}`), "$.triggers[0].source.max_body_bytes"},
		{withRetry(`{"max_attempts":"3"}`), "$.triggers[0].retry.max_attempts"},
		{withVerify(`{"scheme":"slack","secret":{"env":"K"},"tolerance_sec":"60"}`), "$.triggers[0].source.verify.tolerance_sec"},
	}
	for _, tt := range tests {
		_, err := trigger.ParseProgram("p.json", []byte(tt.src))
		if err == nil {
			t.Fatalf("quoted integer accepted: %s", tt.src)
		}
		if got, want := err.Error(), "p.json: "+tt.path+": must be a positive integer (got string)"; got != want {
			t.Fatalf("err=%s, want %s", got, want)
		}
	}
}

// Field names are exact: encoding/json's case-insensitive struct matching
// must not let {"ENV": ...} pass for {"env": ...}.
func TestParseProgram_SecretFieldCaseRefused(t *testing.T) {
	for _, ref := range []string{`{"ENV":"K"}`, `{"Env":"K"}`, `{"env":"K","Env":"L"}`} {
		_, err := trigger.ParseProgram("p.json", []byte(withVerify(`{"scheme":"github","secret":`+ref+`}`)))
		if err == nil {
			t.Fatalf("secret reference %s accepted", ref)
		}
		assertConfigError(t, err, "p.json", "$.triggers[0].source.verify.secret")
	}
}

// A key given twice is refused at its path, not silently the last one.
func TestParseProgram_DuplicateKeyRefused(t *testing.T) {
	_, err := trigger.ParseProgram("p.json", []byte(`{"air_version": "touba-air-v1", "triggers": [
		{"ref": "trigger:a", "ref": "trigger:b", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:a/B"}]}]}`))
	if err == nil || err.Error() != "p.json: $.triggers[0].ref: duplicate key" {
		t.Fatalf("err=%v, want the duplicate ref refused", err)
	}
}
