package touba

import "fmt"

// Keys a delivery controls are bounded (issue 43). Every value that a
// delivery's content decides and that a store indexes — the concurrency
// key, the debounce or batch key, the entry's own cancel_on match values,
// the values it offers to wait_for steps and to cancel_on entries, and a
// wait_for's match value — is at most MaxKeyBytes bytes of compact JSON.
// PostgreSQL refuses a btree row over about 2,700 bytes (a third of an
// 8 KB page) once TOAST cannot compress the value (random letters, a
// token), and that refusal is the transaction's: it failed every delivery
// of the commit batch the oversized one was in. SQLite has no such bound;
// the limit is the same on both, so a program behaves alike on either.
// The event id has its own, lower, bound (200 bytes, SPEC §3.1).

// MaxKeyBytes bounds a key value, in bytes of its compact JSON (a string's
// quotes and escapes count): well below PostgreSQL's btree row limit of
// about 2,700 bytes, with room for the rest of the index row (the trigger
// ref, the key's name by meaning, a queue id).
const MaxKeyBytes = 1024

// CheckKeyValue refuses a key value over MaxKeyBytes with EKeyTooLong;
// which names the key for the sender ("concurrency.key /event/body/id").
func CheckKeyValue(which, value string) error {
	if len(value) <= MaxKeyBytes {
		return nil
	}
	return Errorf(EKeyTooLong, "%s is %d bytes of JSON, over the limit of %d bytes", which, len(value), MaxKeyBytes)
}

// KeyFits reports whether value is within MaxKeyBytes.
func KeyFits(value string) bool { return len(value) <= MaxKeyBytes }

// CheckKeys refuses a delivery about to be enqueued whose indexed values
// are over their bounds (EKeyTooLong). Intake checks them first, naming
// the program's pointers; the stores check again before the commit
// writer, so that a delivery from another path (an operator's replay
// under a changed program) is refused alone and never reaches a batch.
func (d *Delivery) CheckKeys() error {
	if len(d.EventID) > MaxKeyBytes {
		return Errorf(EKeyTooLong, "event id is %d bytes, over the limit of %d bytes", len(d.EventID), MaxKeyBytes)
	}
	if err := CheckKeyValue("concurrency key", d.ConcKey); err != nil {
		return err
	}
	if g := d.Gather; g != nil {
		if err := CheckKeyValue(g.Kind+" key", g.Value); err != nil {
			return err
		}
	}
	for _, set := range []struct {
		what string
		vals []MatchValue
	}{{"cancel_on match value", d.CancelKeys}, {"value offered to a wait_for", d.Offers}, {"value for a cancel_on", d.Cancels}} {
		for _, v := range set.vals {
			if err := CheckKeyValue(fmt.Sprintf("%s (%s)", set.what, v.Key), v.Value); err != nil {
				return err
			}
		}
	}
	return nil
}
