package trigger_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// A trigger's digest is its definition's: the same trigger written with
// other spaces, other key order, beside other triggers or in another
// position has the same digest; any change to it makes a new one, and
// leaves the other triggers' digests alone.
func TestTriggerDigest(t *testing.T) {
	a := `{"ref":"trigger:a","source":{"kind":"webhook","event_id":{"json_pointer":"/id"}},` +
		`"steps":[{"id":"s","tool":"tool:a/B","input":{"x":{"$ref":"/event/body/x"},"n":1.50}},{"id":"z","sleep":{"ms":1000}}]}`
	aAgain := "{\n  \"steps\": [ {\"tool\": \"tool:a/B\", \"id\": \"s\", \"input\": {\"n\": 1.50, \"x\": {\"$ref\": \"/event/body/x\"}}},\n" +
		"    {\"sleep\": {\"ms\": 1000}, \"id\": \"z\"} ],\n  \"source\": {\"event_id\": {\"json_pointer\": \"/id\"}, \"kind\": \"webhook\"},\n  \"ref\": \"trigger:a\"\n}"
	aChanged := `{"ref":"trigger:a","source":{"kind":"webhook","event_id":{"json_pointer":"/id"}},` +
		`"steps":[{"id":"s","tool":"tool:a/B","input":{"x":{"$ref":"/event/body/x"},"n":1.5}},{"id":"z","sleep":{"ms":1000}}]}`
	b := trig("trigger:b", okSource, okSteps)

	p1 := MustParse(t, doc(a, b))
	p2 := MustParse(t, doc(b, aAgain))
	p3 := MustParse(t, doc(aChanged, b))
	d1, d2, d3 := lookup(t, p1, "trigger:a"), lookup(t, p2, "trigger:a"), lookup(t, p3, "trigger:a")

	wantDef := `{"ref":"trigger:a","source":{"event_id":{"json_pointer":"/id"},"kind":"webhook"},` +
		`"steps":[{"id":"s","input":{"n":1.50,"x":{"$ref":"/event/body/x"}},"tool":"tool:a/B"},{"id":"z","sleep":{"ms":1000}}]}`
	if got := string(d1.Definition); got != wantDef {
		t.Fatalf("Definition=%s\nwant       %s", got, wantDef)
	}
	sum := sha256.Sum256([]byte(wantDef))
	if got, want := d1.Digest, hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("Digest=%s, want %s", got, want)
	}
	if d2.Digest != d1.Digest || string(d2.Definition) != wantDef {
		t.Fatalf("re-indented, reordered: digest %s, want %s", d2.Digest, d1.Digest)
	}
	// 1.50 and 1.5: a number is kept as written, so the input (and the
	// step's effect fingerprint) changed.
	if d3.Digest == d1.Digest {
		t.Fatalf("a changed input kept the digest %s", d1.Digest)
	}
	if b1, b3 := lookup(t, p1, "trigger:b"), lookup(t, p3, "trigger:b"); b1.Digest != b3.Digest || b1.Digest == d1.Digest {
		t.Fatalf("trigger:b's digest %s then %s", b1.Digest, b3.Digest)
	}

	// Two loads of one file agree.
	f1, f2 := loadFlows(t), loadFlows(t)
	for i := range f1.Triggers {
		if f1.Triggers[i].Digest != f2.Triggers[i].Digest || len(f1.Triggers[i].Digest) != 64 {
			t.Fatalf("trigger %d: digests %q and %q", i, f1.Triggers[i].Digest, f2.Triggers[i].Digest)
		}
	}
	if got := trigger.DigestPrefix(d1.Digest); got != d1.Digest[:12] {
		t.Fatalf("DigestPrefix=%q", got)
	}
}

// A stored definition reads back as the trigger it was, with the same
// digest, even when the triggers it names are gone from the program.
func TestParseDefinition(t *testing.T) {
	for _, tr := range loadFlows(t).Triggers {
		got, err := trigger.ParseDefinition(tr.Definition)
		if err != nil {
			t.Fatalf("%s: %v", tr.Ref, err)
		}
		if got.Ref != tr.Ref || got.Digest != tr.Digest || len(got.Steps) != len(tr.Steps) || len(got.CancelOn) != len(tr.CancelOn) {
			t.Fatalf("%s read back as %+v", tr.Ref, got)
		}
		for i, s := range tr.Steps {
			if got.Steps[i].ID != s.ID || got.Steps[i].Kind() != s.Kind() {
				t.Fatalf("%s step %d: %s %s, want %s %s", tr.Ref, i, got.Steps[i].ID, got.Steps[i].Kind(), s.ID, s.Kind())
			}
		}
	}
	_, err := trigger.ParseDefinition([]byte(`{"ref":"trigger:a","source":{"kind":"webhook"},"steps":[{"id":"s","sleep":{"ms":0}}]}`))
	if got, want := errString(err), "program definition: $.steps[0].sleep.ms: must be a positive integer (got 0)"; got != want {
		t.Fatalf("err=%s, want %s", got, want)
	}
}
