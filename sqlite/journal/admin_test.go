package journal_test

import (
	"context"
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

func TestCountByState(t *testing.T) {
	ctx := context.Background()
	j, err := journal.Open(ctx, filepath.Join(t.TempDir(), "j.sqlite"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if got, err := j.CountByState(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty journal: %v %v", got, err)
	}
	for i, outcome := range []string{touba.EffectApplied, touba.EffectApplied, touba.EffectUnknown, ""} {
		id := string(rune('a' + i))
		p := touba.EffectPrepare{Scope: "q", EffectID: "q:" + id, ToolRef: "tool:t", Operation: touba.OperationInvoke,
			Fingerprint: "sha256:" + id, RetryMode: touba.RetryReconcile, CallID: "c" + id}
		if _, err := j.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
		if outcome == "" {
			continue // stays prepared
		}
		if err := j.Dispatch(ctx, "q", p.EffectID, p.CallID); err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: p.EffectID, CallID: p.CallID, State: outcome,
			ReceiptRef: "r", Result: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := j.CountByState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{touba.EffectApplied: 2, touba.EffectUnknown: 1, touba.EffectPrepared: 1}
	if len(got) != len(want) {
		t.Fatalf("counts=%v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("counts=%v, want %v", got, want)
		}
	}
}
