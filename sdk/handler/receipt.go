package handler

import "github.com/touba/touba-trigger/protocol"

// Receipt is a handler's statement about the outcome of one external write.
// It can only be made by Call.Receipt, which binds it to that call's
// effect_id and fingerprint; the SDK sends a receipt only in the answer to
// the call that made it, so a handler cannot vouch for another identity.
// The zero Receipt is bound to nothing and is never sent.
type Receipt struct {
	call        *Call
	effectID    string
	fingerprint string
	outcome     Outcome
	ref         string
}

// Receipt returns a receipt for the call's effect with the given outcome
// and an optional reference in the remote system (such as "order:42";
// empty for none). It returns nil when the call carries no effect, so a
// handler may attach it unconditionally.
//
// The receipt does not make the remote write idempotent: it only ties the
// outcome to the right identity. State Unknown whenever the write may have
// happened.
func (c *Call) Receipt(outcome Outcome, ref string) *Receipt {
	if c == nil || c.effect == nil {
		return nil
	}
	return &Receipt{
		call:        c,
		effectID:    c.effect.EffectID,
		fingerprint: c.effect.Fingerprint,
		outcome:     outcome,
		ref:         ref,
	}
}

// EffectID returns the effect_id the receipt is bound to.
func (r *Receipt) EffectID() string { return r.effectID }

// Fingerprint returns the fingerprint the receipt is bound to.
func (r *Receipt) Fingerprint() string { return r.fingerprint }

// Outcome returns the stated outcome.
func (r *Receipt) Outcome() Outcome { return r.outcome }

// Ref returns the receipt reference, or "".
func (r *Receipt) Ref() string { return r.ref }

// wire returns the receipt as sent in the answer to c, or a reason it must
// not be sent. A nil receipt is simply absent.
func (r *Receipt) wire(c *Call) (*protocol.Receipt, string) {
	switch {
	case r == nil:
		return nil, ""
	case r.call == nil:
		return nil, "receipt not made by Call.Receipt"
	case r.call != c:
		return nil, "receipt made by another call"
	case !r.outcome.Valid():
		return nil, "receipt outcome " + string(r.outcome) + " is not applied, not_applied or unknown"
	}
	return &protocol.Receipt{
		EffectID:    r.effectID,
		Fingerprint: r.fingerprint,
		Outcome:     r.outcome,
		ReceiptRef:  r.ref,
	}, ""
}
