package trigger_test

import (
	"testing"

	"github.com/touba/touba-trigger/trigger"
)

// dispatch.weight is read as written, 10 when dispatch or its weight is
// absent.
func TestParseProgram_Dispatch(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      int
	}{
		{"absent", withSource(okSource), trigger.DefaultWeight},
		{"empty", withDispatch(`{}`), 10},
		{"lowest", withDispatch(`{"weight":1}`), 1},
		{"highest", withDispatch(`{"weight":100}`), 100},
		{"some", withDispatch(`{"weight":35}`), 35},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := MustParse(t, tt.src).Triggers[0].Weight; got != tt.want {
				t.Fatalf("Weight=%d, want %d", got, tt.want)
			}
		})
	}
}

// The weight says when runs start, not what they do: a trigger with
// another weight, or none, has the same definition and digest, wherever
// the field stands among the trigger's keys, so the entries accepted
// before a weight change are not parked by version pinning. A stored
// definition, which has no dispatch field, reads back with the default.
func TestTriggerDigest_IgnoresDispatch(t *testing.T) {
	const steps = `"steps":[{"id":"s","tool":"tool:a/B","input":{"x":{"$ref":"/event/body/x"}}}]`
	base := lookup(t, MustParse(t, doc(`{"ref":"trigger:a","source":{"kind":"webhook"},`+steps+`}`)), "trigger:a")
	for _, src := range []string{
		`{"ref":"trigger:a","source":{"kind":"webhook"},` + steps + `,"dispatch":{"weight":50}}`,
		`{"dispatch":{"weight":1},"ref":"trigger:a","source":{"kind":"webhook"},` + steps + `}`,
		`{"ref":"trigger:a", "dispatch" : { "weight" : 100 } ,"source":{"kind":"webhook"},` + steps + `}`,
		`{"ref":"trigger:a","source":{"kind":"webhook"},` + steps + `,"dispatch":{}}`,
	} {
		tr := lookup(t, MustParse(t, doc(src)), "trigger:a")
		if tr.Digest != base.Digest || string(tr.Definition) != string(base.Definition) {
			t.Errorf("%s:\ndigest %s definition %s\nwant   %s definition %s", src, tr.Digest, tr.Definition, base.Digest, base.Definition)
		}
		back, err := trigger.ParseDefinition(tr.Definition)
		if err != nil {
			t.Fatalf("%s: ParseDefinition: %v", src, err)
		}
		if back.Digest != tr.Digest || back.Weight != trigger.DefaultWeight {
			t.Errorf("%s: read back with digest %s weight %d, want %s and %d", src, back.Digest, back.Weight, tr.Digest, trigger.DefaultWeight)
		}
	}
	// What a run does still makes a new digest beside a dispatch field.
	changed := lookup(t, MustParse(t, doc(`{"ref":"trigger:a","source":{"kind":"webhook","max_body_bytes":1024},`+steps+`,"dispatch":{"weight":50}}`)), "trigger:a")
	if changed.Digest == base.Digest {
		t.Fatalf("a changed source kept the digest %s", base.Digest)
	}
}
