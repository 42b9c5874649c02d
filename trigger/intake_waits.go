package trigger

import (
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// Crash points of intake (TOUBA_CRASHPOINT, tests only): the queue
// committed a new entry whose Offers matched open waits (after-match) or
// whose Cancels ended entries (after-cancel), and the sender has not had
// its answer. A restart must show the match or the cancel done once, and
// the sender's retry of the delivery is then a duplicate.
const (
	CrashAfterMatch  = "after-match"
	CrashAfterCancel = "after-cancel"
)

// matched follows up a new entry of t whose enqueue matched waits or
// cancelled entries: it logs them (queue ids). The caller then notifies
// the dispatcher (Enqueued), which leases the entries a match made
// pending as it leases the new one.
func (in *Intake) matched(t *Trigger, eventID string, res touba.EnqueueResult) {
	if len(res.Matched) > 0 {
		crashpoint.Hit(CrashAfterMatch)
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", eventID).Str("queue_id", res.QueueID).
			Strs("matched", res.Matched).Msg("delivery matched waiting entries")
	}
	if len(res.Cancelled) > 0 {
		crashpoint.Hit(CrashAfterCancel)
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", eventID).Str("queue_id", res.QueueID).
			Strs("cancelled", res.Cancelled).Msg("delivery cancelled entries")
	}
}
