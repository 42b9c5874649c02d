package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

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
	req := admin.ReplayRequest{IDs: []string{id}, Reason: reasonOf(r), Repin: r.PostFormValue("repin") == "1",
		IgnoreCancel: r.PostFormValue("ignore_cancel") == "1"}
	if req.Repin && r.PostFormValue("confirm") != "yes" {
		dry := req
		dry.DryRun = true
		plan, err := c.svc.ReplayEntries(r.Context(), dry)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if len(plan.Items) != 1 {
			c.fail(w, r, touba.Errorf(touba.EINTERNAL, "replay plan of %s: %d items", id, len(plan.Items)))
			return
		}
		it := plan.Items[0]
		if it.Reason != "" {
			c.fail(w, r, touba.Errorf(touba.ENothingReplayed, "entry %s would not be replayed: %s %s", id, it.Reason, it.Hint))
			return
		}
		fields := map[string]string{"repin": "1", "reason": req.Reason}
		if req.IgnoreCancel {
			fields["ignore_cancel"] = "1"
		}
		c.render(w, r, http.StatusOK, "confirm", confirmation{Title: "Replay " + id + " under the running definition?",
			Lines: append(repinLines(it.Repin), "The entry goes back to pending with the same queue id."), Action: r.URL.Path,
			Fields: fields, Button: "Yes, replay with repin", Back: "/entries/" + id})
		return
	}
	rep, err := c.svc.ReplayEntries(r.Context(), req)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	res := result{Title: "Replay of entry " + id, Links: []link{{"/entries/" + id, "the entry"}}}
	for _, it := range rep.Items {
		if it.Replayed && it.Status == touba.StatusCancelled {
			res.Lines = append(res.Lines, "the entry left "+it.From+" and ended cancelled: a cancel was requested while its step ran; "+
				"replay it again to run it anyway")
			continue
		}
		if it.Replayed {
			res.Lines = append(res.Lines, "replayed: the entry left "+it.From+" and is "+it.Status+" again, with the same queue id")
			if it.Repin != nil {
				res.Lines = append(res.Lines, repinLines(it.Repin)...)
			}
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
	t := typed{ReceiptRef: strings.TrimSpace(r.PostFormValue("receipt_ref")), Result: r.PostFormValue("result"), Reason: reasonOf(r)}
	req := admin.ResolveRequest{Scope: scope, EffectID: id, State: r.PostFormValue("verdict"), ReceiptRef: t.ReceiptRef,
		Reason: t.Reason}
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
				Action: r.URL.Path, Fields: map[string]string{"verdict": touba.EffectNotApplied, "reason": t.Reason},
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
	out, err := c.svc.Compensate(r.Context(), admin.CompensateRequest{Scope: scope, EffectID: id, Reason: reasonOf(r)})
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
		NewEventID: r.PostFormValue("new_event_id") == "1", Reason: reasonOf(r)})
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

// reasonOf is the reason the operator typed into an action's form, for
// the audit trail (SPEC §6 --reason).
func reasonOf(r *http.Request) string { return strings.TrimSpace(r.PostFormValue("reason")) }

// replayBulk: POST /entries/replay with status (failed, parked or
// cancelled), trigger, code and window (a duration): a bulk replay (SPEC
// §6 `queue replay --status`). The first POST only counts, and shows a
// page that says how many entries it will touch; confirm=yes replays them,
// in batches.
func (c *Console) replayBulk(w http.ResponseWriter, r *http.Request) {
	req := admin.ReplayRequest{Status: r.PostFormValue("status"), TriggerRef: strings.TrimSpace(r.PostFormValue("trigger")),
		Code: strings.TrimSpace(r.PostFormValue("code")), Reason: reasonOf(r)}
	window := strings.TrimSpace(r.PostFormValue("window"))
	if window != "" {
		d, err := time.ParseDuration(window)
		if err != nil || d <= 0 {
			c.fail(w, r, touba.Errorf(touba.EBadRequest, "window %q: want a duration such as 1h or 30m", window))
			return
		}
		req.Since = c.now().Add(-d)
	}
	back := "/entries?" + url.Values{"status": {req.Status}, "trigger": {req.TriggerRef}}.Encode()
	if r.PostFormValue("confirm") != "yes" {
		dry := req
		dry.DryRun = true
		rep, err := c.svc.ReplayEntries(r.Context(), dry)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if rep.Matched == 0 {
			c.fail(w, r, touba.Errorf(touba.ENothingReplayed, "%s: nothing to replay", rep.Note))
			return
		}
		c.render(w, r, http.StatusOK, "confirm", confirmation{
			Title: fmt.Sprintf("Replay %s?", count(rep.Matched, req.Status+" entry", req.Status+" entries")),
			Lines: []string{
				rep.Note + ".",
				fmt.Sprintf("Each goes back to pending with its queue id, in batches of %d; effects journaled applied are read back, not repeated, and an entry parked on an effect still unknown is left parked.", admin.ReplayBatch),
				"Entries that match when you confirm are replayed: the count may have changed by then; the result page says what was done.",
			},
			Action: r.URL.Path, Fields: map[string]string{"status": req.Status, "trigger": req.TriggerRef, "code": req.Code,
				"window": window, "reason": req.Reason},
			Button: "Yes, replay " + count(rep.Matched, "entry", "entries"), Back: back})
		return
	}
	rep, err := c.svc.ReplayEntries(r.Context(), req)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if rep.Replayed == 0 {
		why := rep.Note
		if why == "" && len(rep.Items) > 0 {
			why = rep.Items[0].Reason
		}
		c.fail(w, r, touba.Errorf(touba.ENothingReplayed, "nothing was replayed: %s", why))
		return
	}
	res := result{Title: fmt.Sprintf("Replayed %d of %s", rep.Replayed, count(len(rep.Items), req.Status+" entry", req.Status+" entries")),
		Lines: []string{fmt.Sprintf("%s pending again, in %s", count(rep.Replayed, "entry is", "entries are"), count(rep.Batches, "batch", "batches"))},
		Links: []link{{back, "the entries"}, {"/entries?status=pending", "pending entries"}}}
	shown := 0
	for _, it := range rep.Items {
		if !it.Replayed && shown < 20 {
			res.Lines = append(res.Lines, it.QueueID+" not replayed: "+it.Reason)
			shown++
		}
	}
	if n := len(rep.Items) - rep.Replayed - shown; n > 0 {
		res.Lines = append(res.Lines, fmt.Sprintf("and %d more not replayed (see queue replay --status %s --dry-run and queue ls)", n, req.Status))
	}
	c.render(w, r, http.StatusOK, "result", res)
}
