package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
)

// TickEventID is the event id of a schedule's tick at at: its time in
// RFC 3339, UTC (SPEC §2.3), so that every node and every restart names
// one tick alike.
func TickEventID(at time.Time) string { return at.UTC().Format(time.RFC3339) }

// TickBody is the body of a schedule's tick.
func TickBody(at time.Time) []byte {
	b, _ := json.Marshal(map[string]string{"scheduled_for": TickEventID(at)})
	return b
}

// EnqueueTick enqueues the tick at of the schedule trigger ref through
// intake's own path: the same identity decision, delivery log rows and
// metrics as a webhook's delivery, with no sender (no headers, no remote
// address). It returns intake's status (enqueued, duplicate, consumed) and
// the entry's queue id; a tick already enqueued, by this node before a
// restart or by another node, is a duplicate or consumed, not an error.
// The queue moves the schedule's cursor to the tick in the same
// transaction (touba.Delivery.Tick), so LatestTickID knows it after
// --history forgot its entry.
// An error has code TriggerNotFound when ref is no longer a schedule of
// the program, or TriggerUnavailable when the queue did not take it.
func (in *Intake) EnqueueTick(ctx context.Context, ref string, at time.Time) (status, queueID string, err error) {
	id := TickEventID(at)
	body := TickBody(at)
	req := &request{at: in.now(), triggerRef: ref, eventID: id, body: body, digest: dedupe.Digest(body),
		verified: true, known: true, headers: map[string]string{}}
	if in.draining.Load() {
		return "", "", touba.Errorf(touba.ETriggerUnavailable, "shutting down")
	}
	t, ok := in.config.Load().Program.Lookup(strings.TrimPrefix(ref, "trigger:"))
	if !ok || !t.IsSchedule() {
		return "", "", touba.Errorf(touba.ETriggerNotFound, "%s is not a schedule trigger of the program", ref)
	}
	d := &touba.Delivery{TriggerRef: t.Ref, EventID: id, Digest: req.digest, Body: body,
		Headers: req.headers, ReceivedAt: req.at, Tick: true}
	t.SetConcurrencyKey(d)
	t.SetDurable(d)
	if err := t.SetRoutes(d); err != nil {
		// A tick has no sender to refuse: it feeds the routes that could.
		in.Logger.Warn().Str("trigger_ref", t.Ref).Str("event_id", id).Err(err).Msg("a route of the tick could not take it")
	}
	res, err := in.Queue.Enqueue(ctx, d)
	if err != nil {
		code := touba.ETriggerUnavailable
		in.recordFrom("", req, touba.HTTPStatus(code), code, "")
		in.observe(t.Ref, code, touba.HTTPStatus(code))
		if errors.Is(err, touba.ErrQueueFull) || errors.Is(err, touba.ErrClosed) {
			return "", "", touba.Errorf(code, "tick %s of %s: %v", id, ref, err)
		}
		return "", "", &touba.Error{Code: code, Message: fmt.Sprintf("tick %s of %s: enqueue: %v", id, ref, err)}
	}
	a := dedupe.Answered(res, req.digest)
	switch {
	case a.Status == touba.IntakeEnqueued:
		in.matched(t, id, res)
		in.routed("", req, t, d, res)
		if in.Enqueued != nil {
			in.Enqueued()
		}
		in.observe(t.Ref, a.Status, http.StatusAccepted)
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", id).Str("queue_id", res.QueueID).Msg("tick enqueued")
		return a.Status, res.QueueID, nil
	case a.Status == touba.IntakeDuplicate:
		in.recordFrom("", req, http.StatusAccepted, "", res.QueueID)
		in.observe(t.Ref, a.Status, http.StatusAccepted)
		return a.Status, res.QueueID, nil
	case a.Code == touba.ETriggerEventPayloadConflict:
		// Only a body written otherwise (another version) can get here.
		in.recordFrom("", req, http.StatusConflict, a.Code, res.QueueID)
		in.observe(t.Ref, a.Code, http.StatusConflict)
		return touba.IntakeConsumed, res.QueueID, nil
	default:
		in.recordFrom("", req, http.StatusOK, a.Code, res.QueueID)
		in.observe(t.Ref, a.Code, http.StatusOK)
		return touba.IntakeConsumed, res.QueueID, nil
	}
}
