package postgres

import (
	"context"
	"fmt"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
)

// Routes (SPEC §2.4): a new entry of an accepting trigger carries its
// routes' entries (touba.Delivery.Routes), inserted in the transaction
// that inserts it, each under (route, event id), and only when it is new.
//
// A delivery whose routes are all plain (no key, no offer, cancel or
// gathering) stays on the batched path: flushEnqueues locks its identity
// and its routes' together (a route's identity held elsewhere asks the
// whole delivery again), inserts the batch's deliveries in one statement
// and then the routes of those it created in a second (flushRoutes). A
// delivery with a route that is keyed or durable takes the durable path
// whole, decided now under shortWait's savepoint (enqueueRoutes): a lock
// one of its routes meets held elsewhere undoes it all, to be tried again.

// CrashRoutesBetween is the crash point (internal/crashpoint) inside
// intake's transaction, after an accepting trigger's new entry and before
// its routes' entries: nothing of it is committed.
const CrashRoutesBetween = "routes-between"

// isKeyed tells whether d is limited by a concurrency key.
func isKeyed(d *touba.Delivery) bool { return d.ConcKey != "" && d.ConcMax > 0 }

// isDurable tells whether d carries what the durable path applies.
func isDurable(d *touba.Delivery) bool {
	return len(d.Offers) > 0 || len(d.Cancels) > 0 || len(d.CancelKeys) > 0 || d.Gather != nil
}

// checkRoute refuses, before the writer (where an error fails the
// batch), a route's delivery the writer would refuse.
func checkRoute(r *touba.Delivery) error {
	if r.Gather != nil {
		if err := r.Gather.Check(); err != nil {
			return err
		}
	}
	return r.CheckKeys()
}

// identityKeys appends the identity locks o needs to keys: its own, and
// its routes' when flushEnqueues stores them.
func (o *enqueueOp) identityKeys(keys []int32) []int32 {
	if o.d.EventID == "" {
		return keys
	}
	keys = append(keys, identityKey(o.d.TriggerRef, o.d.EventID))
	if o.batchRoutes {
		for _, r := range o.d.Routes {
			keys = append(keys, identityKey(r.TriggerRef, r.EventID))
		}
	}
	return keys
}

// routeOps are the operations of o's routes.
func routeOps(o *enqueueOp) []*enqueueOp {
	out := make([]*enqueueOp, len(o.d.Routes))
	for i, r := range o.d.Routes {
		out[i] = &enqueueOp{d: r, headers: o.headers, routing: o.routes[i]}
	}
	return out
}

// flushRoutes inserts, in one statement, the routes' entries of the ops
// flushEnqueues created (their identities locked with them).
func flushRoutes(ctx context.Context, q querier, ops []*enqueueOp, now string) error {
	var all []*enqueueOp
	for _, o := range ops {
		if o.batchRoutes && o.res.Created {
			all = append(all, routeOps(o)...)
		}
	}
	if len(all) == 0 {
		return nil
	}
	crashpoint.Hit(CrashRoutesBetween)
	if err := insertEnqueues(ctx, q, all, now); err != nil {
		return fmt.Errorf("routes: %w", err)
	}
	i := 0
	for _, o := range ops {
		if o.batchRoutes && o.res.Created {
			n := len(o.d.Routes)
			if err := settleRoutes(ctx, q, o, all[i:i+n]); err != nil {
				return err
			}
			i += n
		}
	}
	return nil
}

// enqueueRoutes stores the routes' entries of o, new, in tx, each as a
// delivery of its own would be (keyed, durable or plain). errKeyBusy: a
// lock one needs is held elsewhere; the caller's savepoint undoes o too.
func enqueueRoutes(ctx context.Context, tx *Tx, o *enqueueOp, clock time.Time) error {
	crashpoint.Hit(CrashRoutesBetween)
	now := touba.FormatTime(clock)
	rs := routeOps(o)
	for _, r := range rs {
		var err error
		switch {
		case isDurable(r.d):
			err = enqueueDurable(ctx, tx, r, isKeyed(r.d), clock)
		case isKeyed(r.d):
			err = enqueueKeyed(ctx, tx, r, now)
		default:
			if err = flushEnqueues(ctx, tx, []*enqueueOp{r}, now); err == nil && r.busy {
				err = errKeyBusy
			}
		}
		if err != nil {
			return err
		}
	}
	return settleRoutes(ctx, tx, o, rs)
}

// settleRoutes files the results of o's routes (rs) in o's, and records
// in o's entry a route whose identity an entry held already (not fed).
func settleRoutes(ctx context.Context, q querier, o *enqueueOp, rs []*enqueueOp) error {
	o.res.Routes = make([]touba.EnqueueResult, len(rs))
	held := false
	for i, r := range rs {
		o.res.Routes[i] = r.res
		if !r.res.Created {
			o.d.Routing.Held(r.d.TriggerRef, r.res.QueueID)
			held = true
		}
	}
	if held {
		if _, err := q.Exec(ctx, `UPDATE touba.entries SET routing = $2 WHERE queue_id = $1`, o.d.QueueID, string(o.d.Routing.JSON())); err != nil {
			return fmt.Errorf("routes: %w", err)
		}
	}
	return nil
}
