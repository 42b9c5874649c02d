package touba_test

import (
	touba "github.com/touba/touba-trigger"
	"testing"
)

func TestKeysByMeaningRoundTrip(t *testing.T) {
	w := touba.WaitKeyOf("trigger:shop/Checkout", "paid", "trigger:stripe/Paid", "/body/data/object/id")
	c := touba.CancelKeyOf("trigger:b/Overdue", "trigger:b/Paid", "/headers/x-account", []byte(`{"$ref":"/event/headers/x-account"}`))
	t.Log(w)
	t.Log(c)
	for _, tc := range []struct {
		key  string
		want touba.ParsedKey
	}{
		{w, touba.ParsedKey{Awaiting: "trigger:shop/Checkout", StepID: "paid", Awaited: "trigger:stripe/Paid", On: "/body/data/object/id"}},
		{c, touba.ParsedKey{Awaiting: "trigger:b/Overdue", Awaited: "trigger:b/Paid", On: "/headers/x-account", Cancel: true}},
		{touba.WaitKeyOf("trigger:a", "cancel_on", "trigger:b", "/body"), touba.ParsedKey{Awaiting: "trigger:a", StepID: "cancel_on", Awaited: "trigger:b", On: "/body"}},
	} {
		if got, ok := touba.ParseKey(tc.key); !ok || got != tc.want {
			t.Fatalf("ParseKey(%s) = %+v %v, want %+v", tc.key, got, ok, tc.want)
		}
	}
	for _, legacy := range []string{touba.WaitKey("trigger:a", "paid"), touba.CancelKey("trigger:a", 3)} {
		if _, ok := touba.ParseKey(legacy); ok {
			t.Fatalf("ParseKey(%s) read a positional key", legacy)
		}
	}
	if touba.CancelKeyOf("trigger:a", "trigger:b", "/x", []byte(`{"$ref":"/event/body/a"}`)) == touba.CancelKeyOf("trigger:a", "trigger:b", "/x", []byte(`{"$ref":"/event/body/b"}`)) {
		t.Fatal("two match expressions gave one key")
	}
}
