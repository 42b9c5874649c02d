package dispatcher

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/manifest"
)

// windowJournal is a journal of one effect and its audit trail.
type windowJournal struct {
	eff    *touba.Effect
	events []touba.EffectEvent
}

func (j *windowJournal) Prepare(context.Context, touba.EffectPrepare) (*touba.Effect, error) {
	return nil, nil
}
func (j *windowJournal) Dispatch(context.Context, string, string, string) error { return nil }
func (j *windowJournal) Finish(context.Context, touba.EffectOutcome) error      { return nil }
func (j *windowJournal) Abandon(context.Context, string, string, string) error  { return nil }
func (j *windowJournal) Get(context.Context, string, string) (*touba.Effect, error) {
	return j.eff, nil
}
func (j *windowJournal) Events(context.Context, string, string) ([]touba.EffectEvent, error) {
	return j.events, nil
}

// windowRunner is a broker runner with a given window and connection.
type windowRunner struct {
	handler.Runner
	window time.Duration
	known  bool
	ready  bool
}

func (r windowRunner) DedupeWindow() (time.Duration, bool) { return r.window, r.known }
func (r windowRunner) Where() string                       { return "stream ORDERS" }
func (r windowRunner) PublishTimeout() time.Duration       { return 10 * time.Second }
func (r windowRunner) Ready() bool                         { return r.ready }

// TestWindowVerdict is the dedupe window rule's decision table (SPEC §2.2):
// an unknown publish is sent again only while first dispatch + window −
// timeout has not passed, counted from the first dispatch since the last
// not_applied; past it, or with the window not known, it is parked; inside
// it with the broker unreachable, put off; anything but an unknown
// idempotency_key effect is left to the journal's rules.
func TestWindowVerdict(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ev := func(state string, at time.Duration) touba.EffectEvent {
		return touba.EffectEvent{State: state, At: t0.Add(at)}
	}
	chain := []touba.EffectEvent{ev("prepared", 0), ev("dispatched", 0), ev("unknown", 10*time.Second)}
	for _, tt := range []struct {
		name   string
		state  string
		mode   string
		events []touba.EffectEvent
		runner windowRunner
		now    time.Duration
		want   string // none, park or retry
	}{
		{"inside the window", touba.EffectUnknown, touba.RetryIdempotencyKey, chain, windowRunner{window: 2 * time.Minute, known: true, ready: true}, 100 * time.Second, "none"},
		{"at the deadline", touba.EffectUnknown, touba.RetryIdempotencyKey, chain, windowRunner{window: 2 * time.Minute, known: true, ready: true}, 110 * time.Second, "park"},
		{"past the window", touba.EffectUnknown, touba.RetryIdempotencyKey, chain, windowRunner{window: 2 * time.Second, known: true, ready: true}, 11 * time.Second, "park"},
		{"window not known", touba.EffectUnknown, touba.RetryIdempotencyKey, chain, windowRunner{ready: true}, time.Second, "park"},
		{"no window (kafka)", touba.EffectUnknown, touba.RetryIdempotencyKey, chain, windowRunner{known: true, ready: true}, time.Second, "park"},
		{"inside, broker down", touba.EffectUnknown, touba.RetryIdempotencyKey, chain, windowRunner{window: 2 * time.Minute, known: true}, 20 * time.Second, "retry"},
		{"counted from after a not_applied", touba.EffectUnknown, touba.RetryIdempotencyKey,
			[]touba.EffectEvent{ev("dispatched", 0), ev("not_applied", time.Second), ev("dispatched", 5*time.Minute), ev("unknown", 5*time.Minute+10*time.Second)},
			windowRunner{window: 2 * time.Minute, known: true, ready: true}, 6 * time.Minute, "none"},
		{"not unknown", touba.EffectNotApplied, touba.RetryIdempotencyKey, chain, windowRunner{known: true}, time.Hour, "none"},
		{"reconcile: the journal parks it", touba.EffectUnknown, touba.RetryReconcile, chain, windowRunner{known: true}, time.Hour, "none"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := t0.Add(tt.now)
			j := &windowJournal{eff: &touba.Effect{Scope: "q", EffectID: "q:publish", State: tt.state, CreatedAt: t0}, events: tt.events}
			d := &Dispatcher{opts: Options{Now: func() time.Time { return now }}, log: zerolog.Nop(), journal: j}
			b := &Binding{Ref: "tool:p", Contract: manifest.EffectContract{Kind: touba.ContractExternalWrite, RetryMode: tt.mode}, Runner: tt.runner}
			v := d.windowVerdict(context.Background(), b, tt.runner, "q", "q:publish", &callLog{run: zerolog.Nop()})
			got := "none"
			switch {
			case v == nil:
			case v.action == park:
				got = "park"
			case v.action == retry:
				got = "retry"
			default:
				got = "other"
			}
			if got != tt.want {
				t.Fatalf("verdict %s %+v, want %s", got, v, tt.want)
			}
			if got == "park" && (v.code != touba.EEffectReconciliationRequired || !strings.Contains(v.message, "q:publish") ||
				!strings.Contains(v.message, "stream ORDERS")) {
				t.Fatalf("park %s: %s", v.code, v.message)
			}
		})
	}
}
