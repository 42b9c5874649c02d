package console

import (
	"net/http"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// deliveries: GET /deliveries?trigger=&code=&since=&rejected=&before=:
// the delivery log, newest first, keyset paged.
func (c *Console) deliveries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	// "rejected only" lists the deliveries refused (answered 400 and
	// above), as the overview counts them: a redelivery of a consumed
	// entry answered 200 is found by its code.
	f := admin.DeliveryFilter{TriggerRef: q.Get("trigger"), Code: q.Get("code"), Refused: q.Get("rejected") == "1",
		Before: q.Get("before"), Limit: c.pageSize}
	since := q.Get("since")
	if since != "" {
		t, err := parseSince(c.now(), since)
		if err != nil {
			c.fail(w, r, touba.Errorf(touba.EBadRequest, "since %q: give a duration (90m, 24h) or a time (2026-03-01T12:00:00Z)", since))
			return
		}
		f.Since = t
	}
	rows, err := c.svc.Deliveries(r.Context(), f)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := map[string]any{"Rows": rows, "F": f, "Since": since}
	if len(rows) == c.pageSize {
		next := q
		next.Set("before", rows[len(rows)-1].DeliveryID)
		data["Next"] = "/deliveries?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "deliveries", data)
}

// parseSince reads a duration back from now, or a time.
func parseSince(now time.Time, s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Parse(time.RFC3339, s)
}

// delivery: GET /deliveries/{id}: one row of the log with its headers
// (already filtered of secret values when stored), body and digest; for
// a conflict, the stored body of the entry that holds the identity beside
// it.
func (c *Console) delivery(w http.ResponseWriter, r *http.Request) {
	d, err := c.svc.Delivery(r.Context(), r.PathValue("id"))
	if err != nil {
		c.fail(w, r, err)
		return
	}
	data := map[string]any{"D": d}
	if d.QueueID != "" {
		if e, err := c.svc.Entry(r.Context(), d.QueueID); err == nil {
			data["Entry"] = e
		} else if touba.ErrorCode(err) != touba.ENotFound {
			c.fail(w, r, err)
			return
		}
	}
	data["Conflict"] = d.ErrorCode == touba.ETriggerEventPayloadConflict
	c.render(w, r, http.StatusOK, "delivery", data)
}
