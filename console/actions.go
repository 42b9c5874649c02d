package console

import (
	"encoding/json"
	"net/http"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// The actions: each a POST (CSRF checked by ServeHTTP for a session),
// each a call of the admin service, which audits it under the operator
// "console: ..." and refuses it with the CLI's codes. The answer is a page
// saying what happened, with links to what it touched.

// result is what the result page shows.
type result struct {
	Title string
	Lines []string
	Links []link
}

type link struct{ Href, Text string }

// replayEntry: POST /entries/{id}/replay.
func (c *Console) replayEntry(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rep, err := c.svc.ReplayEntries(r.Context(), admin.ReplayRequest{IDs: []string{id}})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	res := result{Title: "Replay of entry " + id, Links: []link{{"/entries/" + id, "the entry"}}}
	for _, it := range rep.Items {
		if it.Replayed {
			res.Lines = append(res.Lines, "replayed: the entry left "+it.From+" and is "+it.Status+" again, with the same queue id")
			continue
		}
		// Nothing replayed is a refusal, like the CLI's exit status.
		c.fail(w, r, touba.Errorf(touba.ENothingReplayed, "entry %s was not replayed: %s %s", id, it.Reason, it.Hint))
		return
	}
	c.render(w, r, http.StatusOK, "result", res)
}

// resolve: POST /effects/{scope}/{effect}/resolve with verdict=applied
// (receipt_ref, optional result JSON) or verdict=not_applied, which can
// make the write happen twice and so is done only with confirm=yes, after a
// page that says so (SPEC §6.1). A refused verdict shows the effect page
// again with what the operator typed.
func (c *Console) resolve(w http.ResponseWriter, r *http.Request) {
	scope, id := r.PathValue("scope"), r.PathValue("effect")
	t := typed{ReceiptRef: strings.TrimSpace(r.PostFormValue("receipt_ref")), Result: r.PostFormValue("result")}
	req := admin.ResolveRequest{Scope: scope, EffectID: id, State: r.PostFormValue("verdict"), ReceiptRef: t.ReceiptRef}
	refuse := func(err error) {
		code, text := errText(err)
		if code == touba.EINTERNAL {
			c.fail(w, r, err)
			return
		}
		c.effectPage(w, r, touba.HTTPStatus(code), t, text)
	}
	switch req.State {
	case touba.EffectApplied:
		// Validated here too, before the service: the operator sees what
		// is wrong with the JSON, and nothing is stored.
		if raw := strings.TrimSpace(t.Result); raw != "" {
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				refuse(touba.Errorf(touba.EBadRequest, "the result is not valid JSON: %v", err))
				return
			}
			req.Result = json.RawMessage(raw)
		}
	case touba.EffectNotApplied:
		// Only a verdict that will be recorded is confirmed; one the
		// service refuses (the effect is not unknown) is refused at once.
		if r.PostFormValue("confirm") != "yes" && c.awaitsVerdict(r, scope, id) {
			c.render(w, r, http.StatusOK, "confirm", confirmation{
				Title: "Resolve " + id + " not applied?",
				Lines: []string{
					"The journal will record the effect not applied and release its identity; this cannot be undone.",
					"The entry goes back to pending, and its next attempt calls the handler again with the same effect id " + id + ".",
					"If the write did happen after all, it will happen twice. Resolve it applied instead if you found it on the remote system.",
				},
				Action: r.URL.Path, Fields: map[string]string{"verdict": touba.EffectNotApplied},
				Button: "Yes, resolve not applied", Back: "/effects/" + scope + "/" + id})
			return
		}
	}
	out, err := c.svc.Resolve(r.Context(), req)
	if err != nil {
		refuse(err)
		return
	}
	res := result{Title: "Effect " + id + " resolved " + out.Effect.State,
		Links: []link{{"/entries/" + scope, "the entry"}, {"/effects/" + scope + "/" + id, "the effect"}, {"/parked", "parked runs"}}}
	if out.Effect.ReceiptRef != "" {
		res.Lines = append(res.Lines, "receipt: "+out.Effect.ReceiptRef)
	}
	switch {
	case out.Replayed:
		res.Lines = append(res.Lines, "the entry is pending again; the dispatcher picks it up")
	case out.Note != "":
		res.Lines = append(res.Lines, out.Note)
	}
	c.render(w, r, http.StatusOK, "result", res)
}

// awaitsVerdict reports whether effect scope/id is unknown (or dispatched
// with no call holding it): what a verdict is for.
func (c *Console) awaitsVerdict(r *http.Request, scope, id string) bool {
	d, err := c.svc.Entry(r.Context(), scope)
	if err != nil {
		return true // the service says what is wrong after the confirmation
	}
	for _, e := range d.Effects {
		if e.EffectID == id {
			return e.State == touba.EffectUnknown || e.State == touba.EffectDispatched
		}
	}
	return true
}

// confirmation is the page that asks before an action that can make a
// write happen twice.
type confirmation struct {
	Title  string
	Lines  []string
	Action string
	Fields map[string]string
	Button string
	Back   string
}

// compensate: POST /effects/{scope}/{effect}/compensate.
func (c *Console) compensate(w http.ResponseWriter, r *http.Request) {
	scope, id := r.PathValue("scope"), r.PathValue("effect")
	out, err := c.svc.Compensate(r.Context(), admin.CompensateRequest{Scope: scope, EffectID: id})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	res := result{Title: "Compensation " + out.CompensationID + ": " + out.State,
		Links: []link{{"/entries/" + scope, "the entry"}}}
	if out.Already {
		res.Lines = append(res.Lines, "it had been applied before: its journaled result is shown, no handler was called")
	}
	if out.ReceiptRef != "" {
		res.Lines = append(res.Lines, "receipt: "+out.ReceiptRef)
	}
	if out.ErrorCode != "" {
		res.Lines = append(res.Lines, out.ErrorCode+": "+out.Message)
	}
	if out.State == touba.EffectUnknown {
		res.Lines = append(res.Lines, "its outcome is unknown: find out whether it happened, then resolve "+out.CompensationID)
		res.Links = append(res.Links, link{"/effects/" + scope + "/" + out.CompensationID, "the compensation"})
	}
	c.render(w, r, http.StatusOK, "result", res)
}

// replayDelivery: POST /deliveries/{id}/replay, new_event_id=1 for a fresh
// identity.
func (c *Console) replayDelivery(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	out, err := c.svc.ReplayDelivery(r.Context(), admin.DeliveryReplayRequest{DeliveryID: id,
		NewEventID: r.PostFormValue("new_event_id") == "1"})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if out.Code != "" {
		// Answered like intake: the identity is held by another entry.
		c.fail(w, r, touba.Errorf(out.Code, "%s (entry %s) %s", out.Message, out.QueueID, out.Hint))
		return
	}
	res := result{Title: "Delivery " + id + " replayed: " + out.Status,
		Lines: []string{"event id: " + out.EventID, "queue id: " + out.QueueID},
		Links: []link{{"/entries/" + out.QueueID, "the entry"}, {"/deliveries/" + id, "the delivery"}}}
	c.render(w, r, http.StatusOK, "result", res)
}
