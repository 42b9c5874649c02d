package admin

import (
	"context"

	touba "github.com/touba/touba-trigger"
)

// RouteDetail is one route of an accepting entry's trigger (SPEC §2.4):
// whether it took the delivery, its entry and that entry's status now,
// or why not (filtered, ExpressionFailed, or an entry already held the
// route's identity: duplicate).
type RouteDetail struct {
	touba.RouteOutcome
	// Status is the route entry's status now; "" when not fed, or when
	// --history forgot it.
	Status string `json:"status,omitempty"`
}

// routes fills in what an entry recorded of routes: an accepting entry's
// routes, each fed entry with its status, or a route entry's source.
func (s *Service) routes(ctx context.Context, r *touba.Routing, out *EntryDetail) error {
	if r == nil {
		return nil
	}
	out.RoutedFrom = r.From
	for _, o := range r.Routes {
		rd := RouteDetail{RouteOutcome: o}
		if o.QueueID != "" {
			e, err := s.Queue.Get(ctx, o.QueueID)
			if err != nil {
				return err
			} else if e != nil {
				rd.Status = e.Status
			}
		}
		out.Routes = append(out.Routes, rd)
	}
	return nil
}

// RouteWhyNot says why a route did not take a delivery; "" when it did.
func RouteWhyNot(o touba.RouteOutcome) string {
	switch {
	case o.Fed:
		return ""
	case o.Code == touba.IntakeFiltered:
		return "its filter did not hold"
	case o.Code == touba.IntakeDuplicate:
		return "entry " + o.QueueID + " already held this event of the route"
	case o.Message == "":
		return o.Code
	}
	return o.Code + ": " + o.Message
}
