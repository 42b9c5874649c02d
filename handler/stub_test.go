package handler_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
)

func TestAccountingStub(t *testing.T) {
	s := handler.NewAccountingStub()
	req := newRequest(t, `{"amount":12.50}`, touba.RetryIdempotencyKey)
	first := s.Call(context.Background(), req, func() error { return nil })
	if !first.OK || first.Outcome != touba.EffectApplied || first.ReceiptRef != "BILL-q-1:create" {
		t.Fatalf("first = %+v", first)
	}
	if got, want := string(first.Output), `{"external_id":"BILL-q-1:create","payload":{"amount":12.50}}`; got != want {
		t.Fatalf("output = %s, want %s", got, want)
	}
	// A repeat of the same effect (the same input, as the journal's
	// fingerprint makes it) is answered alike and not billed again.
	repeat := s.Call(context.Background(), newRequest(t, `{"amount":12.50}`, touba.RetryIdempotencyKey), func() error { return nil })
	if string(repeat.Output) != string(first.Output) || repeat.Outcome != touba.EffectApplied || repeat.ReceiptRef != first.ReceiptRef {
		t.Fatalf("repeat = %+v", repeat)
	}
	if got, want := s.Calls(), 2; got != want {
		t.Fatalf("Calls = %d, want %d", got, want)
	}
	if got, want := s.Applied("q-1:create"), 1; got != want {
		t.Fatalf("Applied = %d, want %d", got, want)
	}
	// Without an effect the call id names the bill.
	plain := s.Call(context.Background(), newRequest(t, `null`, ""), func() error { return nil })
	if got, want := string(plain.Output), `{"external_id":"BILL-call-1","payload":null}`; got != want || plain.Outcome != "" {
		t.Fatalf("output = %s (outcome %q), want %s", got, plain.Outcome, want)
	}
	if got, want := s.Applied("call-1"), 1; got != want {
		t.Fatalf("Applied(call-1) = %d, want %d", got, want)
	}
}

func TestAccountingStubHookError(t *testing.T) {
	s := handler.NewAccountingStub()
	req := newRequest(t, `{}`, touba.RetryNone)
	res := s.Call(context.Background(), req, func() error { return errors.New("journal full") })
	if res.Outcome != touba.EffectNotApplied || errCode(res) != touba.EINTERNAL || res.Dispatched {
		t.Fatalf("result = %+v", res)
	}
	if s.Calls() != 0 || s.Applied(req.Context.Effect.EffectID) != 0 {
		t.Fatalf("calls %d applied %d after a refused dispatch", s.Calls(), s.Applied(req.Context.Effect.EffectID))
	}
}

func TestAccountingStubConcurrentRepeats(t *testing.T) {
	s := handler.NewAccountingStub()
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			s.Call(context.Background(), newRequest(t, `{}`, touba.RetryIdempotencyKey), func() error { return nil })
		})
	}
	wg.Wait()
	if s.Calls() != 32 || s.Applied("q-1:create") != 1 {
		t.Fatalf("calls %d applied %d, want 32 and 1", s.Calls(), s.Applied("q-1:create"))
	}
}
