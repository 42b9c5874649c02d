package trigger

import (
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/expr"
)

// Which routes take a delivery (SPEC §2.4), decided at intake once the
// accepting trigger took it (its filter, then its own keys): each route's
// filter, then its keys. The routes' deliveries go to the queue with the
// accepting trigger's (touba.Delivery.Routes), in one transaction.

// SetRoutes gives d, a delivery t accepts (its own keys set), a delivery
// of each route of t whose filter takes it (Routes), each with its
// route's keys (SetKeys), and what every route did with it (Routing). A
// t with no steps and no gathering stores its entry done at once (Done):
// nothing would run it.
//
// A route filter's expression that fails does not feed that route: its
// outcome says ExpressionFailed, and intake logs the delivery under the
// route so an operator can replay it there once the program is fixed. A
// route key that fails (ExpressionFailed) or is over the limit
// (KeyTooLong) leaves the route unfed too, and is returned: intake
// refuses the delivery whole (nothing enqueued anywhere), as for a key of
// its own; an operator's replay enqueues it with the routes that could.
func (t *Trigger) SetRoutes(d *touba.Delivery) error { return t.setRoutes(d, nil) }

// setRoutes is SetRoutes with the filter document intake decoded for t's
// own filter (doc; nil to decode it here if a route's filter needs it).
func (t *Trigger) setRoutes(d *touba.Delivery, doc map[string]any) error {
	if len(t.Routes) == 0 {
		return nil
	}
	if len(t.Steps) == 0 && t.Gather == nil {
		// No run: no key to hold, no cancel to wait for.
		d.Done, d.ConcKey, d.ConcMax, d.CancelKeys = true, "", 0, nil
	}
	if d.ReceivedAt.IsZero() {
		// An operator's replay: one time for the entry and its routes.
		d.ReceivedAt = time.Now().UTC()
	}
	r := &touba.Routing{Routes: make([]touba.RouteOutcome, len(t.Routes))}
	d.Routing, d.Routes = r, make([]*touba.Delivery, 0, len(t.Routes))
	// Decoded once for every route's filter, and one set of variables for
	// their expressions, each route's own trigger_ref in it in turn.
	var vars *expr.Vars
	var failed error
	for i, rt := range t.Routes {
		o := &r.Routes[i]
		o.TriggerRef = rt.Ref
		if len(rt.Filter) > 0 {
			if doc == nil {
				doc = filterDoc(d.Headers, d.Body)
			}
			ok, err := passes(rt.Filter, doc, func() *expr.Vars {
				if vars == nil {
					vars = &expr.Vars{EventID: d.EventID, ReceivedAt: touba.FormatTime(d.ReceivedAt), Headers: d.Headers, Body: doc["body"]}
				}
				vars.TriggerRef, vars.Event = rt.Ref, nil
				return vars
			})
			switch {
			case err != nil:
				o.Code, o.Message = touba.EExpressionFailed, touba.ErrorMessage(err)
				continue
			case !ok:
				o.Code = touba.IntakeFiltered
				continue
			}
		}
		rd := &touba.Delivery{TriggerRef: rt.Ref, EventID: d.EventID, Digest: d.Digest, Body: d.Body, Headers: d.Headers,
			ReceivedAt: d.ReceivedAt, RemoteAddr: d.RemoteAddr, TraceParent: d.TraceParent}
		err := rt.SetKeys(rd)
		if err == nil {
			err = rt.CheckKeys(rd)
		}
		if err != nil {
			o.Code, o.Message = touba.ErrorCode(err), touba.ErrorMessage(err)
			if failed == nil {
				failed = touba.Errorf(o.Code, "route %s: %s", rt.Ref, o.Message)
			}
			continue
		}
		o.Fed = true
		d.Routes = append(d.Routes, rd)
	}
	return failed
}
