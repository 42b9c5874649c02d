package storetest

import (
	"context"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// requestDispatcher is the journal's Dispatch that records the request a
// call sends; every backend has it (the dispatcher records what an HTTP
// kind sends with it, and the console shows it).
type requestDispatcher interface {
	DispatchRequest(ctx context.Context, scope, effectID, callID, request string) error
}

// The request an effect sent is kept in its dispatched event, without a
// lease and under one (PostgreSQL's one-statement path), and never when it
// holds a secret value: the call still goes, the request is not recorded.
func testDispatchRequest(t *testing.T, f Factory) {
	const req = "PUT https://orders.test/… Authorization: <secret ORDERS_TOKEN>, Idempotency-Key: <effect id>"
	e := open(t, f, Options{Secrets: []string{theSecret}})
	rd, ok := e.Journal.(requestDispatcher)
	if !ok {
		t.Fatalf("%T has no DispatchRequest", e.Journal)
	}
	a := e.put(t, "a", "1")
	leased := e.lease(t, 1, a)[0]
	for _, tc := range []struct {
		effectID, request, want string
		token                   int64
	}{
		{"q:plain", req, "dispatch attempt 1; request " + req, 0},
		{a + ":leased", req, "dispatch attempt 1; request " + req, leased.LeaseToken},
		{"q:none", "", "dispatch attempt 1", 0},
		{"q:secret", "PUT https://orders.test/… Authorization: Bearer " + theSecret, "dispatch attempt 1; request not recorded: it held a secret value", 0},
	} {
		p := prep(tc.effectID, "c1")
		if tc.token != 0 {
			p.Scope, p.LeaseToken = a, tc.token
		}
		if _, err := e.Journal.Prepare(e.ctx, p); err != nil {
			t.Fatalf("%s: prepare: %v", tc.effectID, err)
		}
		if err := rd.DispatchRequest(e.ctx, p.Scope, tc.effectID, "c1", tc.request); err != nil {
			t.Fatalf("%s: dispatch: %v", tc.effectID, err)
		}
		ev := e.events(t, p.Scope, tc.effectID)
		if len(ev) != 2 || ev[1].State != touba.EffectDispatched || ev[1].Detail != tc.want {
			t.Fatalf("%s: events %+v, want dispatched with detail %q", tc.effectID, ev, tc.want)
		}
		if got := touba.RequestOf(ev[1].Detail); got != tc.request && !strings.Contains(tc.request, theSecret) {
			t.Fatalf("%s: RequestOf = %q, want %q", tc.effectID, got, tc.request)
		}
		if strings.Contains(ev[1].Detail, theSecret) {
			t.Fatalf("%s: the secret was stored: %q", tc.effectID, ev[1].Detail)
		}
		if got := e.effect(t, p.Scope, tc.effectID); got.State != touba.EffectDispatched {
			t.Fatalf("%s: state %s, want dispatched", tc.effectID, got.State)
		}
	}
}
