package console

import (
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// statuses are the entry states of SPEC §3.2, for the overview's counts
// and the listings' filter.
var statuses = []string{touba.StatusPending, touba.StatusRunning, touba.StatusWaiting, touba.StatusDone, touba.StatusFailed,
	touba.StatusParked, touba.StatusCancelled, touba.StatusMerged}

// overview: GET /.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	o, err := c.svc.Overview(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	type count struct {
		Name string
		N    int64
	}
	var byStatus, rejected []count
	for _, s := range statuses {
		byStatus = append(byStatus, count{s, o.Entries[s]})
	}
	for code, n := range o.RejectedByCode {
		rejected = append(rejected, count{code, n})
	}
	sort.Slice(rejected, func(i, k int) bool { return rejected[i].N > rejected[k].N })
	c.render(w, r, http.StatusOK, "overview", map[string]any{"O": o, "ByStatus": byStatus, "Rejected": rejected,
		"Unknown": o.Effects[touba.EffectUnknown], "Parked": o.Entries[touba.StatusParked],
		"Failed": o.Entries[touba.StatusFailed], "Journal": o.Effects != nil})
}

// parked: GET /parked: the parked entries (keyset paged) and the unknown
// effects, each with a link to what settles it.
func (c *Console) parked(w http.ResponseWriter, r *http.Request) {
	after, before := r.URL.Query().Get("after"), r.URL.Query().Get("before")
	list, err := c.svc.Entries(r.Context(), admin.EntryFilter{Status: touba.StatusParked, After: after, Before: before, Limit: c.pageSize})
	if err != nil {
		c.fail(w, r, err)
		return
	}
	effs, err := c.svc.Effects(r.Context(), admin.EffectFilter{State: touba.EffectUnknown, Limit: 500})
	if err != nil && touba.ErrorCode(err) != touba.EEffectJournalRequired {
		c.fail(w, r, err)
		return
	}
	data := map[string]any{"Entries": list, "Effects": effs, "After": after + before, "Journal": err == nil}
	if len(list) == c.pageSize {
		data["Next"] = "/parked?before=" + list[len(list)-1].QueueID
		if after != "" {
			data["Next"] = "/parked?after=" + list[len(list)-1].QueueID
		}
	}
	c.render(w, r, http.StatusOK, "parked", data)
}

// entries: GET /entries?status=&trigger=&before= (newest first; after=
// pages oldest first), or a search with q= (a queue id, or else an event
// id), body=POINTER=VALUE and window= (a duration).
func (c *Console) entries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := admin.EntryFilter{Status: q.Get("status"), TriggerRef: q.Get("trigger"), After: q.Get("after"), Before: q.Get("before"),
		Limit: c.pageSize}
	if f.Status != "" && !slices.Contains(statuses, f.Status) {
		c.fail(w, r, touba.Errorf(touba.EBadRequest, "status %q: want one of %v", f.Status, statuses))
		return
	}
	s := searchForm{Q: strings.TrimSpace(q.Get("q")), Body: strings.TrimSpace(q.Get("body")), Window: strings.TrimSpace(q.Get("window"))}
	data := map[string]any{"F": f, "S": s, "Statuses": statuses, "Bulk": slices.Contains(bulkStatuses, f.Status)}
	if s.Q != "" || s.Body != "" || s.Window != "" {
		req := admin.SearchRequest{Body: s.Body, TriggerRef: f.TriggerRef, Status: f.Status, Limit: c.pageSize}
		if admin.LooksLikeQueueID(s.Q) {
			req.QueueID = s.Q
		} else {
			req.EventID = s.Q
		}
		if s.Window != "" {
			d, err := time.ParseDuration(s.Window)
			if err != nil || d <= 0 {
				c.fail(w, r, touba.Errorf(touba.EBadRequest, "window %q: want a duration such as 1h or 30m", s.Window))
				return
			}
			req.Since = c.now().Add(-d)
		}
		rep, err := c.svc.Search(r.Context(), req)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		data["Entries"], data["Search"] = rep.Entries, rep
		c.render(w, r, http.StatusOK, "entries", data)
		return
	}
	list, err := c.svc.Entries(r.Context(), f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data["Entries"] = list
	if len(list) == c.pageSize {
		next := q
		if f.After != "" {
			next.Set("after", list[len(list)-1].QueueID)
		} else {
			next.Set("before", list[len(list)-1].QueueID)
		}
		data["Next"] = "/entries?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "entries", data)
}

// searchForm is what the operator typed into the entries page's search.
type searchForm struct{ Q, Body, Window string }

// bulkStatuses are the states a bulk replay takes entries from.
var bulkStatuses = []string{touba.StatusFailed, touba.StatusParked, touba.StatusCancelled}

// entry: GET /entries/{id}: the entry, its runs and step checkpoints in
// time order, its effects with their journal events, the deliveries and
// operator actions naming it, and what can be done now.
func (c *Console) entry(w http.ResponseWriter, r *http.Request) {
	c.entryPage(w, r, http.StatusOK, resumeForm{}, "")
}

// entryPage renders the entry page with status, the resume form filled
// with t, and refusal (if any) above it.
func (c *Console) entryPage(w http.ResponseWriter, r *http.Request, status int, t resumeForm, refusal string) {
	d, err := c.svc.Entry(r.Context(), r.PathValue("id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	comp := map[string]bool{}
	for _, e := range d.Effects {
		_, isComp := touba.IsCompensation(e.EffectID)
		comp[e.EffectID] = e.State == touba.EffectApplied && !isComp && c.svc.CanCompensate(e.ToolRef)
	}
	c.render(w, r, status, "entry", map[string]any{"E": d, "Compensable": comp, "Resume": t, "Refusal": refusal,
		"Replayable": d.Status == touba.StatusFailed || d.Status == touba.StatusParked || d.Status == touba.StatusCancelled})
}

// effect: GET /effects/{scope}/{effect}: one effect, what is known and
// unknown of it, and what each verdict will do, in plain words.
func (c *Console) effect(w http.ResponseWriter, r *http.Request) {
	c.effectPage(w, r, http.StatusOK, typed{}, "")
}

// typed is what the operator had typed into the resolve form, shown again
// when the verdict is refused.
type typed struct{ ReceiptRef, Result, Reason string }

// effectPage renders the effect page with status, the form filled with t,
// and refusal (if any) above it.
func (c *Console) effectPage(w http.ResponseWriter, r *http.Request, status int, t typed, refusal string) {
	scope, id := r.PathValue("scope"), r.PathValue("effect")
	d, err := c.svc.Entry(r.Context(), scope)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	var eff *admin.EffectDetail
	for i := range d.Effects {
		if d.Effects[i].EffectID == id {
			eff = &d.Effects[i]
		}
	}
	if eff == nil {
		c.fail(w, r, touba.Errorf(touba.ENotFound, "no effect %s/%s in the journal", scope, id))
		return
	}
	step := stepOf(scope, id)
	var before []touba.StepOutput
	for _, s := range d.Steps {
		if s.StepID != step {
			before = append(before, s)
		}
	}
	// The reason the journal gave with the last error: the code alone
	// ("HandlerFailed") does not say what failed.
	var lastDetail string
	for _, ev := range eff.Events {
		if why := errorReason(ev.Detail); why != "" {
			lastDetail = why
		}
	}
	data := map[string]any{"E": d, "Eff": eff, "Step": step, "Before": before, "LastDetail": lastDetail,
		"Typed": t, "Refusal": refusal}
	if input, err := c.svc.EffectInput(r.Context(), scope, id); err == nil {
		data["Input"] = input
	} else {
		_, data["InputWhy"] = errText(err)
	}
	unknown := eff.State == touba.EffectUnknown || eff.State == touba.EffectDispatched
	_, isComp := touba.IsCompensation(id)
	data["Unknown"] = unknown
	data["Compensable"] = eff.State == touba.EffectApplied && !isComp && c.svc.CanCompensate(eff.ToolRef)
	// Replaying while this effect is unknown would only park the entry
	// again: the verdict comes first.
	data["Replayable"] = !unknown && (d.Status == touba.StatusFailed || d.Status == touba.StatusParked)
	c.render(w, r, status, "effect", data)
}

// errorReason is the words an outcome event gives after its error code
// ("outcome unknown error_code=HandlerFailed; exit status 3"), or "".
func errorReason(detail string) string {
	head, reason, ok := strings.Cut(detail, "; ")
	if !ok || !strings.Contains(head, "error_code=") {
		return ""
	}
	return reason
}
