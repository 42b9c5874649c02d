package journal_test

import (
	"context"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/journal"
)

// TestUnknownStaysUnsafeAfterAModeChange: an effect left unknown under
// idempotency_key is not re-sent once its binding says none or reconcile.
func TestUnknownStaysUnsafeAfterAModeChange(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ now, code string }{
		{touba.RetryNone, touba.EEffectOutcomeUnknown},
		{touba.RetryReconcile, touba.EEffectReconciliationRequired},
		{touba.RetryIdempotencyKey, ""},
	} {
		j := mustOpen(t, journalPath(t), journal.Options{})
		p := prep("q", "q:s", "c1")
		if _, err := j.Prepare(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := j.Dispatch(ctx, "q", "q:s", "c1"); err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(ctx, touba.EffectOutcome{Scope: "q", EffectID: "q:s", CallID: "c1", State: touba.EffectUnknown}); err != nil {
			t.Fatal(err)
		}
		again := prep("q", "q:s", "c2")
		again.RetryMode = tc.now
		_, err := j.Prepare(ctx, again)
		if got := touba.ErrorCode(err); (tc.code == "" && err != nil) || (tc.code != "" && got != tc.code) {
			t.Fatalf("mode now %s: err=%v (code %s), want code %q", tc.now, err, got, tc.code)
		}
	}
}
