package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/touba/touba-trigger/admin"
)

// The Triggers page (SPEC §6.1): each trigger paused or not, the circuits
// of its bindings that are not closed, its dispatch weight, its runnable
// and running entries, its held ones by reason in short (as triggers ls
// shows them: admin.Trigger.HeldSummary) and its waiting ones; and pause
// and resume, POSTs audited by the admin service like the CLI's.

// triggers: GET /triggers.
func (c *Console) triggers(w http.ResponseWriter, r *http.Request) {
	ts, err := c.svc.Triggers(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "triggers", map[string]any{"Triggers": ts})
}

// pauseTrigger: POST /triggers/pause with ref and reason.
func (c *Console) pauseTrigger(w http.ResponseWriter, r *http.Request) { c.changeTrigger(w, r, true) }

// resumeTrigger: POST /triggers/resume with ref and reason.
func (c *Console) resumeTrigger(w http.ResponseWriter, r *http.Request) { c.changeTrigger(w, r, false) }

func (c *Console) changeTrigger(w http.ResponseWriter, r *http.Request, pause bool) {
	req := admin.TriggerRequest{TriggerRef: r.PostFormValue("ref"), Reason: strings.TrimSpace(r.PostFormValue("reason"))}
	change := c.svc.ResumeTrigger
	if pause {
		change = c.svc.PauseTrigger
	}
	ch, err := change(r.Context(), req)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	res := result{Links: []link{{"/triggers", "the triggers"}, {"/entries?trigger=" + url.QueryEscape(ch.TriggerRef) + "&status=pending", "its pending entries"}}}
	switch {
	case pause && ch.Changed:
		res.Title = "Paused " + ch.TriggerRef
		res.Lines = []string{"paused: its entries wait pending and none starts until it is resumed; intake still accepts its deliveries (202)"}
	case pause:
		res.Title = ch.TriggerRef + " was already paused"
		res.Lines = []string{"nothing changed"}
	case ch.Changed:
		res.Title = "Resumed " + ch.TriggerRef
		res.Lines = []string{"resumed: its pending entries run again, oldest first"}
	default:
		res.Title = ch.TriggerRef + " was not paused"
		res.Lines = []string{"nothing changed"}
	}
	c.render(w, r, http.StatusOK, "result", res)
}
