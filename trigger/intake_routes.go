package trigger

import (
	"net/http"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// CrashAfterRouted is the crash point (TOUBA_CRASHPOINT, tests only) after
// the queue committed a new entry of an accepting trigger with its routes'
// entries (SPEC §2.4), before the sender has its answer: a restart shows
// all of them, and the sender's retry is a duplicate that creates nothing.
// The stores have their own point inside the transaction, between the
// accepting entry and its routes' (CrashRoutesBetween), where a crash
// leaves none of them.
const CrashAfterRouted = "after-routed"

// CrashRoutesBetween names the stores' crash point inside intake's
// transaction, after the accepting entry's insert and before its routes'
// (sqlite/queue and postgres hit it by this name).
const CrashRoutesBetween = "routes-between"

// routed follows up a new entry of the accepting trigger t (d, res): each
// route entry created is followed up as a new entry of its route is
// (matched waits, cancels, gatherings) and counted in the route's
// metrics; a route whose filter expression failed has the delivery logged
// under it with ExpressionFailed (and its body), so an operator can see
// it and replay it there once the program is fixed (SPEC §2.4).
func (in *Intake) routed(remote string, req *request, t *Trigger, d *touba.Delivery, res touba.EnqueueResult) {
	if d.Routing == nil {
		return
	}
	if len(d.Routes) > 0 {
		crashpoint.Hit(CrashAfterRouted)
	}
	for i, rd := range d.Routes {
		if i >= len(res.Routes) || !res.Routes[i].Created {
			continue
		}
		if rt := routeOf(t, rd.TriggerRef); rt != nil {
			in.matched(rt, d.EventID, res.Routes[i])
		}
		in.observe(rd.TriggerRef, touba.IntakeEnqueued, http.StatusAccepted)
	}
	for _, o := range d.Routing.Routes {
		switch o.Code {
		case touba.IntakeFiltered:
			in.observe(o.TriggerRef, touba.IntakeFiltered, http.StatusAccepted)
		case touba.EExpressionFailed:
			in.Logger.Warn().Str("trigger_ref", o.TriggerRef).Str("accepted_by", t.Ref).Str("event_id", d.EventID).
				Str("queue_id", res.QueueID).Str("code", o.Code).Str("reason", o.Message).
				Msg("route filter expression failed; the route did not take the delivery")
			row := *req
			row.triggerRef = o.TriggerRef
			in.recordFrom(remote, &row, http.StatusAccepted, o.Code, "")
			in.observe(o.TriggerRef, o.Code, http.StatusAccepted)
		}
	}
}

// routeOf is t's route ref.
func routeOf(t *Trigger, ref string) *Trigger {
	for _, r := range t.Routes {
		if r.Ref == ref {
			return r
		}
	}
	return nil
}
