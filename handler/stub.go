package handler

import (
	"context"
	"encoding/json"
	"sync"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonx"
)

// AccountingStub is the in-process development stand-in of SPEC §2.2 kind
// "accounting_stub": it "bills" each effect once, answers a repeat of the
// same effect with the same bill, and counts what it saw so tests can tell
// a repeat from a new application.
//
// It remembers the effect ids it billed, not its answers: an answer is
// rebuilt from the request, and under the journal a repeat of an effect id
// carries the same input (the same fingerprint), so it gets the same answer.
// Keeping every answer held each body twice in memory for the daemon's
// lifetime (about 2 KB per 1 KiB delivery, forever).
type AccountingStub struct {
	mu     sync.Mutex
	calls  int
	billed map[string]bool // effect ids
	closed bool
}

// NewAccountingStub returns an empty stub.
func NewAccountingStub() *AccountingStub {
	return &AccountingStub{billed: map[string]bool{}}
}

// Calls returns how many requests reached the stub, repeats included.
func (s *AccountingStub) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Applied returns how many times the effect was applied: 0 or 1, since a
// repeat is deduplicated.
func (s *AccountingStub) Applied(effectID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.billed[effectID] {
		return 1
	}
	return 0
}

// Close makes later calls fail without reaching the stub.
func (s *AccountingStub) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Call answers {"external_id": "BILL-<id>", "payload": <input>} with an
// applied receipt bound to req, where id is the effect id, or the call id
// for a call without an effect. See Runner.
func (s *AccountingStub) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if res := refuseUnsent(req, closed, 0); res != nil {
		return res
	}
	if err := context.Cause(ctx); err != nil {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EHandlerTimeout, "call cancelled before sending: %v", err))
	}
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	if !jsonx.Valid(input) {
		return fail(req, touba.EffectNotApplied, false, touba.Errorf(touba.EINTERNAL, "accounting stub: input is not JSON"))
	}
	if err := dispatched(); err != nil {
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}
	id := effectID(req)
	ref := "BILL-" + id

	s.mu.Lock()
	s.calls++
	s.billed[id] = true
	s.mu.Unlock()

	out := make(json.RawMessage, 0, len(input)+len(ref)+32)
	out = append(out, `{"external_id":`...)
	out = appendString(out, ref)
	out = append(out, `,"payload":`...)
	out = append(append(out, input...), '}')
	res := &Result{OK: true, Output: out, Dispatched: true}
	if req.Context.Effect != nil {
		res.Outcome, res.ReceiptRef = touba.EffectApplied, ref
	}
	return res
}
