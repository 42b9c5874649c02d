package touba

import "encoding/json"

// Routes (SPEC §2.4): one endpoint, many flows. A trigger whose source is
// another trigger (a route) takes its deliveries from that accepting
// trigger instead of from HTTP. When the accepting trigger accepts a new
// delivery, each route whose filter holds gets an entry of its own,
// identity (route, event id), same body, headers and digest, in the
// transaction that stores the accepting trigger's entry: intake hands
// them to Enqueue in Delivery.Routes, and the queue stores them only when
// the accepting entry is new (a duplicate, a conflict or a consumed
// redelivery creates nothing anywhere).

// Why a route did not take a delivery (RouteOutcome.Code): its filter
// did not hold (IntakeFiltered), its filter's expression failed
// (EExpressionFailed), or an entry already held the route's identity
// (IntakeDuplicate: that entry's queue id is in QueueID).

// RouteOutcome is what one route of an accepting trigger did with one
// delivery: fed (a new entry of the route, QueueID) or not, and why not.
type RouteOutcome struct {
	TriggerRef string `json:"trigger_ref"`
	Fed        bool   `json:"fed"`
	QueueID    string `json:"queue_id,omitempty"`
	Code       string `json:"code,omitempty"`
	Message    string `json:"message,omitempty"`
}

// Routing is what an entry records of routes: for an accepting entry,
// every route of its trigger when it was accepted, fed or not (Routes,
// in the program's order); for a route's entry, the accepting entry it
// came from (From). Nil for an entry of a trigger with no routes.
type Routing struct {
	From   string         `json:"from,omitempty"`
	Routes []RouteOutcome `json:"routes,omitempty"`
}

// RoutingOf assigns the queue ids of d's routes (newID for each route
// without one) and returns what the queue stores with d and with each of
// its routes (compact JSON; nil for none). The stores call it in Enqueue,
// before the transaction, once d's own queue id is set.
func RoutingOf(d *Delivery, newID func() string) (own []byte, routes [][]byte) {
	if len(d.Routes) == 0 && d.Routing == nil {
		return nil, nil
	}
	routes = make([][]byte, len(d.Routes))
	for i, r := range d.Routes {
		if r.QueueID == "" {
			r.QueueID = newID()
		}
		if r.ReceivedAt.IsZero() {
			r.ReceivedAt = d.ReceivedAt
		}
		r.Routing = &Routing{From: d.QueueID}
		// A queue id is a UUID: nothing in it to escape.
		routes[i] = []byte(`{"from":"` + d.QueueID + `"}`)
		if d.Routing != nil {
			for j := range d.Routing.Routes {
				if o := &d.Routing.Routes[j]; o.Fed && o.TriggerRef == r.TriggerRef {
					o.QueueID = r.QueueID
				}
			}
		}
	}
	if d.Routing != nil {
		own = d.Routing.JSON()
	}
	return own, routes
}

// JSON is r as the queue stores it; nil for nil.
func (r *Routing) JSON() []byte {
	if r == nil {
		return nil
	}
	b, _ := json.Marshal(r) // strings and bools always marshal
	return b
}

// Held records that route i of d was not fed after all: entry queueID
// already held its identity. It returns d's routing anew.
func (r *Routing) Held(routeRef, queueID string) []byte {
	for j := range r.Routes {
		if o := &r.Routes[j]; o.TriggerRef == routeRef && o.Fed {
			o.Fed, o.QueueID, o.Code = false, queueID, IntakeDuplicate
			o.Message = "entry " + queueID + " already holds this event of the route"
		}
	}
	return r.JSON()
}

// ParseRouting reads what RoutingOf stored; nil for nothing stored.
func ParseRouting(b []byte) (*Routing, error) {
	if len(b) == 0 {
		return nil, nil
	}
	r := &Routing{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	return r, nil
}
