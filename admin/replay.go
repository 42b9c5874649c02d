package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
)

// ReplayBatch is how many entries a bulk replay puts back to pending in
// one transaction: small enough that intake, which shares the queue's
// writer, waits at most one batch (a few milliseconds) at a time.
const ReplayBatch = 100

// ReplayEntries puts failed, parked and cancelled entries back to pending
// with their queue ids, so effects already applied are read back, not
// repeated (SPEC §3.2). Nothing is swallowed: every id that is not replayed
// gets a reason and a way to a real re-run, and a parked entry whose
// effect still awaits a verdict is not replayed (it would only park
// again). A bulk replay (r.Status) counts its selection first (a dry run
// stops there), then works in batches of ReplayBatch, each one transaction
// of the queue and one of the audit trail.
func (s *Service) ReplayEntries(ctx context.Context, r ReplayRequest) (*ReplayReport, error) {
	ids := r.IDs
	switch {
	case len(ids) > 0 && r.Status != "":
		return nil, badRequest("give queue ids or --status, not both")
	case len(ids) == 0 && r.Status == "":
		return nil, badRequest("give queue ids or --status failed|parked|cancelled")
	case r.Status != "" && r.Status != touba.StatusFailed && r.Status != touba.StatusParked && r.Status != touba.StatusCancelled:
		return nil, badRequest("--status %s: only failed, parked and cancelled entries are replayed", r.Status)
	case r.Status == "" && (r.TriggerRef != "" || r.Code != "" || !r.Since.IsZero()):
		return nil, badRequest("--trigger, --code and --since go with --status")
	}
	rep := &ReplayReport{Items: []ReplayItem{}, DryRun: r.DryRun}
	if r.Status != "" {
		var err error
		if ids, err = s.Queue.SelectIDs(ctx, touba.EntrySelection{Status: r.Status, TriggerRef: TriggerRef(r.TriggerRef),
			Code: r.Code, Since: r.Since}); err != nil {
			return nil, err
		}
		rep.Matched, rep.DryRun = len(ids), r.DryRun
		if len(ids) == 0 || r.DryRun {
			rep.Note = fmt.Sprintf("%d %s entries", len(ids), r.Status)
			if len(ids) == 0 {
				rep.Note = fmt.Sprintf("no %s entries", r.Status)
			}
			if r.TriggerRef != "" {
				rep.Note += " of " + TriggerRef(r.TriggerRef)
			}
			if r.Code != "" {
				rep.Note += " with code " + r.Code
			}
			if !r.Since.IsZero() {
				rep.Note += " received since " + touba.FormatTime(r.Since)
			}
			if r.DryRun && len(ids) > 0 {
				rep.Note += " would be replayed (dry run: nothing changed)"
			}
			return rep, nil
		}
	}
	items := make([]ReplayItem, len(ids))
	at := map[string]int{}
	for start := 0; start < len(ids); start += ReplayBatch {
		end := min(start+ReplayBatch, len(ids))
		took, err := s.replayBatch(ctx, ids[start:end], items[start:end], start, at, r)
		if err != nil {
			return nil, err
		}
		rep.Batches++
		if end < len(ids) {
			// The queue's writer is intake's too: leave it to intake for
			// as long as the batch held it, so a long replay takes at most
			// half of it.
			time.Sleep(min(took, 50*time.Millisecond))
		}
	}
	for _, it := range items {
		if it.Replayed {
			rep.Replayed++
		}
	}
	rep.Items = items
	return rep, nil
}

// replayBatch replays one batch of ids (items their slots, first the
// index of the first), and audits it in one transaction. It returns how
// long the queue's transaction took.
func (s *Service) replayBatch(ctx context.Context, ids []string, items []ReplayItem, first int, at map[string]int, r ReplayRequest) (time.Duration, error) {
	var todo []string
	var claimed []string
	defer func() {
		for _, id := range claimed {
			s.busy.drop(s.Claims, id)
		}
	}()
	for i, id := range ids {
		items[i] = ReplayItem{QueueID: id}
		// A merged entry's run is its carrier's (SPEC §2.1). A bulk
		// selection names no merged entry: no read more per entry.
		if r.Status == "" {
			if carrier, err := s.carrierOf(ctx, id); err != nil {
				return 0, err
			} else if carrier != "" {
				items[i] = ReplayItem{QueueID: carrier, Merged: id}
				id = carrier
			}
		}
		if _, dup := at[id]; dup {
			items[i].Reason = "named twice; replayed once"
			continue
		}
		at[id] = first + i
		// Claimed before the check, held until the queue update: a
		// compensation cannot start on it in between (see busy).
		if held := s.busy.take(s.Claims, id, "replay"); held != "" {
			items[i].Reason = "a " + held + " of this entry is running"
			items[i].Hint = "replay it once that ended: touba-trigger queue replay " + id
			continue
		}
		claimed = append(claimed, id)
		// Every entry is checked, a bulk selection's too: one selected
		// failed may have been replayed and parked on an unknown effect
		// since, and the queue's Replay takes parked entries as well. The
		// check reads (no writer time), under the claim taken above.
		if err := s.checkReplay(ctx, id, &items[i], r); err != nil {
			return 0, err
		}
		if items[i].Reason == "" {
			todo = append(todo, id)
		}
	}
	if r.DryRun {
		return 0, nil // checked (and the plans made), nothing changed
	}
	opt := touba.ReplayOptions{IgnoreCancel: r.IgnoreCancel}
	for _, it := range items {
		if it.Repin != nil && it.Reason == "" {
			if opt.Repin == nil {
				opt.Repin = map[string]string{}
			}
			opt.Repin[it.trigger] = it.Repin.digest
		}
	}
	replayed := 0
	var took time.Duration
	if len(todo) > 0 {
		start := time.Now()
		res, err := s.Queue.Replay(ctx, todo, opt)
		took = time.Since(start)
		if err != nil {
			return 0, err
		}
		for _, x := range res {
			it := &items[at[x.QueueID]-first]
			if x.From == "" {
				// The entry moved between the check and the replay.
				it.Reason = x.Reason
				continue
			}
			it.Replayed, it.From, it.Status = true, x.From, x.To
			if x.To == touba.StatusCancelled {
				it.Hint = cancelKeptHint(x.QueueID)
			}
			replayed++
		}
	}
	if replayed > 0 && s.Wake != nil {
		s.Wake()
	}
	evs := make([]touba.OperatorEvent, 0, len(items))
	for _, it := range items {
		ev := touba.OperatorEvent{Action: "queue.replay", QueueID: it.QueueID, Target: it.QueueID, Outcome: "done",
			Detail: it.From + " -> " + it.Status, Reason: r.Reason}
		if it.Status == touba.StatusCancelled {
			ev.Detail += " (a cancel requested while its step ran)"
		} else if r.IgnoreCancel {
			ev.Detail += " (--ignore-cancel)"
		}
		if it.Repin != nil && it.Replayed {
			ev.Detail += "; --repin: " + it.Repin.String()
		}
		if !it.Replayed {
			ev.Outcome, ev.Detail = "refused", it.Reason
		}
		if it.Merged != "" {
			ev.Detail += "; asked for merged entry " + it.Merged
		}
		evs = append(evs, ev)
	}
	s.auditAll(ctx, evs)
	return took, nil
}

// checkReplay fills it.Reason and it.Hint when id cannot be replayed.
func (s *Service) checkReplay(ctx context.Context, id string, it *ReplayItem, r ReplayRequest) error {
	ignoreCancel := r.IgnoreCancel
	d, err := s.Queue.Get(ctx, id)
	if err != nil {
		return err
	}
	if d == nil {
		it.Reason, it.Hint = "no such entry", "list entries with: touba-trigger queue ls"
		return nil
	}
	it.Status, it.trigger = d.Status, d.TriggerRef
	if d.Status == touba.StatusFailed || d.Status == touba.StatusParked || d.Status == touba.StatusCancelled {
		var refusal string
		if it.Repin, refusal, err = s.repinChoice(ctx, d, r.Repin, "touba-trigger queue replay "+id, ""); err != nil {
			return err
		} else if refusal != "" {
			it.Reason = refusal
			if _, ok := s.runningTrigger(d.TriggerRef); ok {
				it.Hint = "see what it would keep and run again first: touba-trigger queue replay " + id + " --repin --dry-run"
			}
			return nil
		}
	}
	switch d.Status {
	case touba.StatusFailed, touba.StatusCancelled:
		return nil
	case touba.StatusParked:
		if s.Journal == nil {
			return nil
		}
		if ws := s.waitStore(); ws != nil && !ignoreCancel {
			// Asked to cancel while its step ran: the replay ends it
			// cancelled and runs nothing, whatever its effects' state.
			if yes, err := ws.CancelRequested(ctx, id); err != nil || yes {
				return err
			}
		}
		effs, err := s.awaitingVerdict(ctx, id)
		if err != nil {
			return err
		}
		if len(effs) > 0 {
			e := effs[0]
			it.Reason = fmt.Sprintf("parked on effect %s, whose outcome is unknown (retry mode %s): a replay would park it again",
				e.EffectID, e.RetryMode)
			it.Hint = resolveHint(e.Scope, e.EffectID) + " (either one puts the entry back to pending, or ends it cancelled when a cancel was requested while its step ran)"
		}
		return nil
	case touba.StatusDone:
		it.Reason = "entry is done: a replay would only read its effects back from the journal and call no handler"
		it.Hint = doneHint(ctx, s, d)
	case touba.StatusPending:
		it.Reason, it.Hint = "entry is already pending", "the dispatcher runs it; see: touba-trigger queue show "+id
	case touba.StatusWaiting:
		it.Reason = "entry is waiting in a durable step (a sleep or a wait for an event)"
		it.Hint = "it goes on by itself when the sleep ends or the event comes; see: touba-trigger queue show " + id
	case touba.StatusRunning:
		it.Reason = "entry is running now"
		it.Hint = "if it ends failed or parked, replay it then (a daemon that stopped while it ran resumes it at start)"
	default:
		it.Reason = "entry is " + d.Status
	}
	return nil
}

// unreplayable says why a delivery log row cannot be enqueued again, or ""
// when it can.
func unreplayable(r *touba.LoggedDelivery) string {
	switch {
	case r.ErrorCode == touba.IntakeFiltered && r.BodyStored:
		return "" // filtered out on purpose; an operator may still run it
	case r.ErrorCode == touba.EExpressionFailed && r.BodyStored:
		return "" // a filter's expression failed (SPEC §2.4): replayable once the program is fixed
	case r.StatusCode < 400 && r.ErrorCode != touba.ETriggerReplayRejected:
		// A redelivery of a consumed entry (200 consumed, code
		// TriggerReplayRejected) stays replayable, as its 409 form is.
		return fmt.Sprintf("this delivery was answered %d %s for entry %s: there is nothing to replay; see touba-trigger queue show %s",
			r.StatusCode, touba.IntakeDuplicate, r.QueueID, r.QueueID)
	case r.BodyStored:
		return ""
	case r.ErrorCode == touba.ETriggerSignatureInvalid:
		return "its body is not stored: bodies of requests that failed signature verification are never kept"
	case r.ErrorCode == touba.ETriggerNotFound || r.ErrorCode == touba.ETriggerPayloadTooLarge ||
		r.ErrorCode == touba.ETriggerEventIDInvalid || r.ErrorCode == touba.ETriggerEventIDMissing ||
		r.ErrorCode == touba.EMethodNotAllowed:
		return "its body is not stored: it was refused (" + r.ErrorCode + ") before its signature was verified; have the sender send it again"
	}
	return "its body is no longer stored: the delivery log keeps bodies within its byte, row and age bounds and this one was pruned"
}

// ReplayDelivery enqueues a stored rejected delivery as a new entry of its
// trigger, under its own event id or, with NewEventID, a fresh
// replay-<uuidv7>; the answer is intake's (SPEC §3.1).
func (s *Service) ReplayDelivery(ctx context.Context, r DeliveryReplayRequest) (*DeliveryReplay, error) {
	row, err := s.State.Delivery(ctx, r.DeliveryID)
	if err != nil {
		return nil, err
	} else if row == nil {
		return nil, notFound("no delivery %s in the delivery log", r.DeliveryID)
	}
	refuse := func(code, why string) (*DeliveryReplay, error) {
		s.audit(ctx, touba.OperatorEvent{Action: "deliveries.replay", QueueID: row.QueueID, Target: row.DeliveryID,
			Outcome: "refused", Detail: why, Reason: r.Reason})
		return nil, touba.Errorf(code, "delivery %s cannot be replayed: %s", row.DeliveryID, why)
	}
	if why := unreplayable(row); why != "" {
		return refuse(touba.EDeliveryNotReplayable, why)
	}
	if s.HasTrigger != nil && !s.HasTrigger(row.TriggerRef) {
		return refuse(touba.ETriggerNotFound, "the running program has no trigger "+row.TriggerRef)
	}
	// A fresh identity is derived from the delivery, not drawn at random:
	// running the same command again (after a lost answer, say) then finds
	// the entry it made instead of applying every write once more.
	eventID := row.EventID
	if r.NewEventID || eventID == "" {
		eventID = "replay-" + row.DeliveryID
	}
	d := &touba.Delivery{TriggerRef: row.TriggerRef, EventID: eventID, Digest: dedupe.Digest(row.Body), Body: row.Body,
		Headers: row.Headers, RemoteAddr: row.RemoteAddr}
	if s.Keyed != nil {
		s.Keyed(d)
	}
	out := &DeliveryReplay{DeliveryID: row.DeliveryID, TriggerRef: row.TriggerRef, EventID: eventID}
	res, err := s.Queue.Enqueue(ctx, d)
	switch {
	case errors.Is(err, touba.ErrQueueFull):
		return refuse(touba.ETriggerUnavailable, "the queue is at --max-pending; try again later")
	case errors.Is(err, touba.ErrClosed):
		return refuse(touba.ETriggerUnavailable, "the daemon is shutting down")
	case touba.ErrorCode(err) == touba.EKeyTooLong:
		// A key over the limit under the running program (issue 43).
		return refuse(touba.EKeyTooLong, touba.ErrorMessage(err))
	case err != nil:
		return nil, err
	}
	out.QueueID = res.QueueID
	a := dedupe.Answered(res, d.Digest)
	out.Status, out.Code = a.Status, a.Code
	switch {
	case a.Status == touba.IntakeEnqueued:
		if s.Wake != nil {
			s.Wake()
		}
	case a.Status == touba.IntakeDuplicate:
		out.Hint = "entry " + res.QueueID + " already holds this event and is still pending"
	case a.Code == touba.ETriggerEventPayloadConflict:
		out.Message = "event id " + eventID + " is bound to a different body in entry " + res.QueueID
		out.Hint = "to run this body as a new entry: touba-trigger deliveries replay " + row.DeliveryID + " --new-event-id"
	default:
		out.Message = "entry " + res.QueueID + " already consumed this event (status " + res.Status + ")"
		out.Hint = "to run it again as a new entry: touba-trigger deliveries replay " + row.DeliveryID + " --new-event-id"
	}
	ev := touba.OperatorEvent{Action: "deliveries.replay", QueueID: out.QueueID, Target: row.DeliveryID, Outcome: "done",
		Detail: fmt.Sprintf("event %s: %s%s", eventID, out.Status, out.Code), Reason: r.Reason}
	if out.Status == "" {
		ev.Outcome = "refused"
	}
	s.audit(ctx, ev)
	return out, nil
}

// cancelKeptHint explains an entry a replay, resume or resolve ended
// cancelled: a cancel_on match arrived while its step ran, and survived
// its park (SPEC §2.3).
func cancelKeptHint(id string) string {
	return "ended cancelled: a cancel was requested while its step ran; to run it on anyway: touba-trigger queue replay " +
		id + " (or replay it with --ignore-cancel next time)"
}
