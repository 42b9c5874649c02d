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

// Crash points of gatherings at intake (SPEC §2.1 debounce, batch): the
// queue committed a new entry that opened a gathering (after-gather-opened),
// was merged into one (after-merged), or filled a batch, which started
// (after-gather-started; the wake loop has the point too, for a gathering
// its time started), and the sender has not had its answer.
const (
	CrashAfterGatherOpened  = "after-gather-opened"
	CrashAfterMerged        = "after-merged"
	CrashAfterGatherStarted = "after-gather-started"
)

// matched follows up a new entry of t whose enqueue matched waits,
// cancelled entries or gathered it: it logs them (queue ids) and tells
// Gathered. The caller then notifies the dispatcher (Enqueued), which
// leases the entries a match (or a full batch) made pending as it leases
// the new one.
func (in *Intake) matched(t *Trigger, eventID string, res touba.EnqueueResult) {
	if len(res.Matched) > 0 {
		crashpoint.Hit(CrashAfterMatch)
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", eventID).Str("queue_id", res.QueueID).
			Strs("matched", res.Matched).Msg("delivery matched waiting entries")
	}
	if res.Gather != "" && in.Gathered != nil {
		in.Gathered(t.Ref, res)
	}
	switch res.Gather {
	case touba.GatherOpened:
		crashpoint.Hit(CrashAfterGatherOpened)
	case touba.GatherMerged:
		crashpoint.Hit(CrashAfterMerged)
	case touba.GatherStarted:
		crashpoint.Hit(CrashAfterGatherStarted)
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", eventID).Str("queue_id", res.QueueID).
			Str("carrier", res.Carrier).Msg("delivery filled its batch; the gathering starts")
	}
	if len(res.Cancelled) > 0 {
		crashpoint.Hit(CrashAfterCancel)
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", eventID).Str("queue_id", res.QueueID).
			Strs("cancelled", res.Cancelled).Msg("delivery cancelled entries")
	}
}
