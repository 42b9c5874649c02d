package trigger_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// The patterns of SPEC §2.1, restated here so the fuzz test does not trust
// the loader's own copy.
var (
	specRef  = regexp.MustCompile(`^trigger:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	specTool = regexp.MustCompile(`^tool:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
)

// prefixPattern is the rule of verify.prefix: visible ASCII, no spaces.
var prefixPattern = regexp.MustCompile(`^[!-~]{0,32}$`)

var knownSchemes = map[string]bool{"hmac-sha256": true, "github": true, "stripe": true, "standard-webhooks": true, "slack": true, "shopify": true}

func FuzzParseProgram(f *testing.F) {
	spec, err := os.ReadFile(specExamplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(spec)
	f.Add([]byte(withSource(okSource)))
	f.Add([]byte(withVerify(`{"scheme":"hmac-sha256","secrets":[{"env":"A"},{"file":"b"}],"header":"X-Sig","tolerance_sec":5}`)))
	f.Add([]byte(withSource(`{"kind":"webhook","event_id":{"json_pointer":"/a~1b"},"max_body_bytes":1}`)))
	f.Add([]byte(withVerify(`{"scheme":"hmac-sha256","secret":{"env":"A"},"encoding":"base64","prefix":""}`)))
	f.Add([]byte(withVerify(`{"scheme":"hmac-sha256","secret":{"env":"A"},"encoding":"hex","prefix":"v1="}`)))
	f.Add([]byte(withVerify(`{"scheme":"shopify","secret":{"env":"A"}}`)))
	f.Add([]byte(withSource(`{"kind":"webhook","event_id":{"header":"x-id","required":true},"redelivery":"reject"}`)))
	f.Add([]byte(withRetry(`{"max_attempts":3,"initial_interval_ms":10,"max_interval_ms":10}`)))
	f.Add([]byte(withSource(`{"kind":"schedule","cron":"*/5 1-3 * jan,jul mon-fri","timezone":"Europe/Paris","catch_up":"all"}`)))
	f.Add([]byte(doc(trig("trigger:a", okSource, okSteps), trig("trigger:a/b", okSource, `[{"id":"x","tool":"tool:q/Q"},{"id":"y","tool":"tool:q/R","input":{"v":[{"$ref":"/steps/x/output"}]}}]`))))
	for _, tt := range badPrograms {
		f.Add([]byte(tt.src))
	}
	for _, tt := range badDurable {
		f.Add([]byte(tt.src))
	}
	if flows, err := os.ReadFile(durableFlowsPath); err == nil {
		f.Add(flows)
	}
	f.Add([]byte(withCancelOn(`[{"trigger":"trigger:b","match":{"$ref":"/event/headers/x"},"on":"/headers/x"}]`)))
	f.Add([]byte(waitStep(`{` + okWait + `,"timeout_ms":5,"on_timeout":"continue"}`)))
	f.Add([]byte(withGather("debounce", `{"key":{"$ref":"/event/body/p"},"window_ms":5000,"max_wait_ms":60000}`)))
	f.Add([]byte(withGather("batch", `{"key":{"$ref":"/event/headers/x"},"max_size":10,"window_ms":1}`)))

	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := trigger.ParseProgram("f.json", data)
		if err != nil {
			checkRefusal(t, data, err)
			return
		}
		checkProgram(t, data, p)
	})
}

// strictjsonStep is the path of step j's tool in trigger i.
func strictjsonStep(i, j int) string {
	return fmt.Sprintf("$.triggers[%d].steps[%d].tool", i, j)
}

// checkRefusal: every refusal is a ConfigError naming the file and a path,
// with the ConfigInvalid code, and the same input gets the same message.
func checkRefusal(t *testing.T, data []byte, err error) {
	t.Helper()
	var ce *trigger.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("err=%v (%T), want *trigger.ConfigError", err, err)
	}
	if ce.File != "f.json" || !strings.HasPrefix(ce.Path, "$") || ce.Rule == "" {
		t.Fatalf("ConfigError{%q %q %q}: want file f.json, a path from $ and a rule", ce.File, ce.Path, ce.Rule)
	}
	if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
		t.Fatalf("ErrorCode=%q, want %q", got, want)
	}
	_, again := trigger.ParseProgram("f.json", data)
	if again == nil || again.Error() != err.Error() {
		t.Fatalf("second parse: %v, first: %v", again, err)
	}
}

// checkGather: an accepted debounce or batch is within the loader's bounds,
// on a webhook trigger.
func checkGather(t *testing.T, i int, tr *trigger.Trigger) {
	t.Helper()
	g := tr.Gather
	if g == nil {
		return
	}
	ok := !tr.IsSchedule() && g.WindowMS >= 1 && g.WindowMS <= 86_400_000
	switch g.Kind {
	case touba.GatherDebounce:
		ok = ok && g.KeyRef != "" && g.MaxWaitMS >= g.WindowMS && g.MaxWaitMS <= 86_400_000 && g.MaxSize == 0
	case touba.GatherBatch:
		ok = ok && g.MaxSize >= 2 && g.MaxSize <= touba.MaxGathered && g.MaxWaitMS == 0
	default:
		ok = false
	}
	if !ok || g.KeyRef != "" && !strings.HasPrefix(g.KeyRef, "/event/") {
		t.Fatalf("trigger %d: gather %+v accepted", i, g)
	}
}

// checkProgram: an accepted program holds only what SPEC §2.1 allows.
func checkProgram(t *testing.T, data []byte, p *trigger.Program) {
	t.Helper()
	if !json.Valid(data) {
		t.Fatalf("accepted a document that is not JSON: %q", data)
	}
	if p.Path != "f.json" || len(p.Triggers) == 0 {
		t.Fatalf("Path=%q, %d triggers", p.Path, len(p.Triggers))
	}
	names := map[string]bool{}
	tools := map[string]bool{}
	firstTool := "" // the path of the program's first tool step
	for i, tr := range p.Triggers {
		if !specRef.MatchString(tr.Ref) || tr.Name != strings.TrimPrefix(tr.Ref, "trigger:") {
			t.Fatalf("trigger %d: Ref=%q Name=%q", i, tr.Ref, tr.Name)
		}
		if names[tr.Name] {
			t.Fatalf("trigger %d: name %q accepted twice", i, tr.Name)
		}
		names[tr.Name] = true
		if got, ok := p.Lookup(tr.Name); !ok || got != tr {
			t.Fatalf("Lookup(%q)=%p,%v, want trigger %d", tr.Name, got, ok, i)
		}
		checkSource(t, i, tr.Source)
		checkGather(t, i, tr)
		if len(tr.Digest) != 64 || tr.Digest != trigger.Digest(tr.Definition) || !json.Valid(tr.Definition) {
			t.Fatalf("trigger %d: digest %q of definition %q", i, tr.Digest, tr.Definition)
		}
		ids := map[string]bool{}
		for j, s := range tr.Steps {
			if s.ID == "" || ids[s.ID] {
				t.Fatalf("trigger %d step %d: id %q empty or repeated", i, j, s.ID)
			}
			ids[s.ID] = true
			kinds := 0
			for _, set := range []bool{s.Tool != "", s.Sleep != nil, s.WaitFor != nil} {
				if set {
					kinds++
				}
			}
			if kinds != 1 {
				t.Fatalf("trigger %d step %d: %d kinds set", i, j, kinds)
			}
			switch {
			case s.Sleep != nil:
				if (s.Sleep.MS > 0) == (len(s.Sleep.Until) > 0) {
					t.Fatalf("trigger %d step %d: sleep %+v", i, j, s.Sleep)
				}
				continue
			case s.WaitFor != nil:
				if _, ok := p.Lookup(strings.TrimPrefix(s.WaitFor.Trigger, "trigger:")); !ok || s.WaitFor.Trigger == tr.Ref {
					t.Fatalf("trigger %d step %d: waits for %q", i, j, s.WaitFor.Trigger)
				}
				continue
			}
			if firstTool == "" {
				firstTool = strictjsonStep(i, j)
			}
			if !specTool.MatchString(s.Tool) {
				t.Fatalf("trigger %d step %d: tool %q", i, j, s.Tool)
			}
			if !json.Valid(s.Input) {
				t.Fatalf("trigger %d step %d: input %q is not JSON", i, j, s.Input)
			}
			tools[s.Tool] = true
		}
		r := tr.Retry
		if r.MaxAttempts < 1 || r.InitialIntervalMS < 1 || r.MaxIntervalMS < r.InitialIntervalMS {
			t.Fatalf("trigger %d: retry %+v", i, r)
		}
	}

	refs := p.ToolRefs()
	if !sort.StringsAreSorted(refs) || len(refs) != len(tools) {
		t.Fatalf("ToolRefs=%q, want the %d step tools sorted", refs, len(tools))
	}
	for _, r := range refs {
		if !tools[r] {
			t.Fatalf("ToolRefs has %q, named by no step", r)
		}
	}
	if err := p.CheckTools(func(string) bool { return true }); err != nil {
		t.Fatalf("CheckTools(all bound): %v", err)
	}
	err := p.CheckTools(func(string) bool { return false })
	var ce *trigger.ConfigError
	if firstTool == "" {
		if err != nil {
			t.Fatalf("CheckTools(none bound)=%v with no tool step", err)
		}
	} else if !errors.As(err, &ce) || ce.Path != firstTool {
		t.Fatalf("CheckTools(none bound)=%v, want the first tool step's tool %s", err, firstTool)
	}
}

func checkSource(t *testing.T, i int, s trigger.Source) {
	t.Helper()
	if s.Kind == "schedule" {
		sc := s.Schedule
		if sc == nil || sc.Cron == nil || sc.Location == nil || s.Verify != nil || s.EventID != (trigger.EventIDSource{}) ||
			(sc.CatchUp != "last" && sc.CatchUp != "all" && sc.CatchUp != "none") {
			t.Fatalf("trigger %d: schedule source %+v", i, s)
		}
		return
	}
	if s.Kind != "webhook" || s.Schedule != nil || s.MaxBodyBytes < 1 || s.MaxBodyBytes > 64<<20 {
		t.Fatalf("trigger %d: source %+v", i, s)
	}
	if (s.EventID.Header == "") == (s.EventID.JSONPointer == "") {
		t.Fatalf("trigger %d: event id %+v: want exactly one of header, pointer", i, s.EventID)
	}
	if s.EventID.JSONPointer != "" && !strings.HasPrefix(s.EventID.JSONPointer, "/") {
		t.Fatalf("trigger %d: event id pointer %q", i, s.EventID.JSONPointer)
	}
	v := s.Verify
	if v == nil {
		return
	}
	if !knownSchemes[v.Scheme] || len(v.Secrets) == 0 || v.ToleranceSec < 1 {
		t.Fatalf("trigger %d: verify %+v", i, *v)
	}
	if v.Header != "" && v.Scheme != "hmac-sha256" {
		t.Fatalf("trigger %d: header %q on scheme %q", i, v.Header, v.Scheme)
	}
	if (v.Encoding != "" || v.Prefix != nil) && v.Scheme != "hmac-sha256" {
		t.Fatalf("trigger %d: encoding %q or prefix %v on scheme %q", i, v.Encoding, v.Prefix, v.Scheme)
	}
	if v.Encoding != "" && v.Encoding != "hex" && v.Encoding != "base64" {
		t.Fatalf("trigger %d: encoding %q", i, v.Encoding)
	}
	if v.Prefix != nil && !prefixPattern.MatchString(*v.Prefix) {
		t.Fatalf("trigger %d: prefix %q", i, *v.Prefix)
	}
	for _, r := range v.Secrets {
		if err := r.Validate(); err != nil {
			t.Fatalf("trigger %d: secret %v: %v", i, r, err)
		}
	}
}
