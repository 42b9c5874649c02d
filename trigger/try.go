package trigger

import (
	"strconv"

	touba "github.com/touba/touba-trigger"
)

// Try is what intake would decide for a stored delivery of t's source
// (t's own, or for a route its accepting trigger's) under this program
// (SPEC §2.4 `triggers test`): whether t's filter takes it (a route's
// accepting trigger's filter first), the keys it would get, and, for an
// accepting trigger, what each route would do. Nothing is enqueued; the
// steps are the dispatcher's to try (dispatcher.TrySteps).
func (t *Trigger) Try(stored *touba.Delivery) touba.TriedDelivery {
	out := touba.TriedDelivery{QueueID: stored.QueueID, EventID: stored.EventID, ReceivedAt: stored.ReceivedAt}
	d := &touba.Delivery{TriggerRef: t.Ref, EventID: stored.EventID, Digest: stored.Digest, Body: stored.Body,
		Headers: stored.Headers, ReceivedAt: stored.ReceivedAt, RemoteAddr: stored.RemoteAddr}
	for _, f := range []*Trigger{t.accepting, t} {
		if f == nil {
			continue
		}
		ok, err := f.Takes(d.EventID, d.ReceivedAt, d.Headers, d.Body)
		switch {
		case err != nil:
			out.Code, out.Message, out.FilteredBy = touba.ErrorCode(err), touba.ErrorMessage(err), f.Ref
			return out
		case !ok:
			out.Code, out.FilteredBy = touba.IntakeFiltered, f.Ref
			return out
		}
	}
	out.Taken = true
	b := &lazyBody{raw: d.Body}
	if c := t.Concurrency; c != nil {
		out.Keys = append(out.Keys, tried("concurrency.key", t.setConcurrencyKey(d, b), d.ConcKey))
	}
	if g := t.Gather; g != nil {
		err := t.setGather(d, b)
		value := ""
		if d.Gather != nil {
			value = d.Gather.Value
		}
		out.Keys = append(out.Keys, tried(g.Kind+".key", err, value))
	}
	if len(t.CancelOn) > 0 {
		err := t.setDurable(d, b)
		for i, c := range t.CancelOn {
			k := touba.TriedKey{Name: "cancel_on[" + strconv.Itoa(i) + "].match"}
			for _, v := range d.CancelKeys {
				if v.Key == c.key {
					k.Value = v.Value
				}
			}
			if k.Value == "" && c.MatchCEL != nil && err != nil {
				k.Error = touba.ErrorMessage(err)
			}
			out.Keys = append(out.Keys, k)
		}
	}
	for _, k := range out.Keys {
		if k.Error != "" && out.Code == "" {
			// Intake would answer 422: nothing enqueued.
			out.Code, out.Message = touba.EExpressionFailed, k.Name+": "+k.Error
		}
	}
	if len(t.Routes) > 0 {
		rd := &touba.Delivery{TriggerRef: t.Ref, EventID: d.EventID, Digest: d.Digest, Body: d.Body, Headers: d.Headers,
			ReceivedAt: d.ReceivedAt}
		if err := t.SetRoutes(rd); err != nil && out.Code == "" {
			out.Code, out.Message = touba.ErrorCode(err), touba.ErrorMessage(err)
		}
		out.Routes = rd.Routing.Routes
	}
	return out
}

// tried is a key's value or error.
func tried(name string, err error, value string) touba.TriedKey {
	if err != nil {
		return touba.TriedKey{Name: name, Error: touba.ErrorMessage(err)}
	}
	return touba.TriedKey{Name: name, Value: value}
}

// SourceTrigger is the trigger whose deliveries t takes: its accepting trigger
// for a route, t itself otherwise.
func (t *Trigger) SourceTrigger() *Trigger {
	if t.accepting != nil {
		return t.accepting
	}
	return t
}
