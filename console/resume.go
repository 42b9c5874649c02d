package console

import (
	"fmt"
	"net/http"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// Resume from a step (SPEC §6.1 "one queue entry: ... resume from a
// step"): the entry page's form posts the step, the new-effects box and a
// reason. Without new effects the resume is done at once: effects
// journaled applied are read back, so no write happens twice. With new
// effects the writes of those steps do happen again, so, as for "resolve
// not applied", a second page says so and the resume is done only with
// confirm=yes. A refused resume shows the entry page again with what the
// operator chose.

// resumeForm is what the operator chose in the resume form.
type resumeForm struct {
	From         string
	NewEffects   bool
	Repin        bool
	IgnoreCancel bool
	Reason       string
}

// resumeEntry: POST /entries/{id}/resume with from, new_effects=1,
// reason and, after the confirmation page, confirm=yes.
func (c *Console) resumeEntry(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t := resumeForm{From: strings.TrimSpace(r.PostFormValue("from")), NewEffects: r.PostFormValue("new_effects") == "1",
		Repin: r.PostFormValue("repin") == "1", IgnoreCancel: r.PostFormValue("ignore_cancel") == "1", Reason: reasonOf(r)}
	req := admin.ResumeRequest{QueueID: id, From: t.From, NewEffects: t.NewEffects, Repin: t.Repin, IgnoreCancel: t.IgnoreCancel,
		Reason: t.Reason}
	refuse := func(err error) {
		code, text := errText(err)
		if code == touba.EINTERNAL {
			c.fail(w, r, err)
			return
		}
		c.entryPage(w, r, touba.HTTPStatus(code), t, text)
	}
	if (t.NewEffects || t.Repin) && r.PostFormValue("confirm") != "yes" {
		// Checked first, so a resume the service refuses is refused at
		// once, and the page names the steps and identities for real.
		dry := req
		dry.DryRun = true
		rep, err := c.svc.Resume(r.Context(), dry)
		if err != nil {
			refuse(err)
			return
		}
		conf := confirmation{Title: "Resume " + id + " from " + t.From + "?", Action: r.URL.Path,
			Fields: map[string]string{"from": t.From, "reason": t.Reason}, Button: "Yes, resume", Back: "/entries/" + id}
		if t.NewEffects {
			conf.Title, conf.Button, conf.Fields["new_effects"] = "Resume "+id+" from "+t.From+" with new effects?", "Yes, resume with new effects", "1"
			conf.Lines = append(conf.Lines,
				fmt.Sprintf("Steps %s run again under new effect identities (%s): their writes happen again, even those the journal holds applied.",
					strings.Join(rep.Steps, ", "), strings.Join(rep.StepEffectIDs(), ", ")),
				"If a write of these steps must not happen twice, go back and resume without new effects: an effect journaled applied is then read back, not repeated.")
		}
		if t.Repin {
			conf.Fields["repin"] = "1"
			conf.Lines = append(conf.Lines, repinLines(rep.Repin)...)
		}
		if t.IgnoreCancel {
			conf.Fields["ignore_cancel"] = "1"
		}
		conf.Lines = append(conf.Lines, "The entry leaves "+rep.Left+" and goes back to pending with the same queue id; the steps before "+t.From+
			" are read from their checkpoints and the journal and are not run again.")
		c.render(w, r, http.StatusOK, "confirm", conf)
		return
	}
	rep, err := c.svc.Resume(r.Context(), req)
	if err != nil {
		refuse(err)
		return
	}
	if rep.Status == touba.StatusCancelled {
		c.render(w, r, http.StatusOK, "result", result{Title: "Entry " + id + " cancelled",
			Lines: []string{"a cancel was requested while its step ran: the entry left " + rep.Left + " and ended cancelled; nothing ran again",
				"to run it anyway, resume it again with \"ignore a cancel requested while its step ran\""},
			Links: []link{{"/entries/" + id, "the entry"}}})
		return
	}
	res := result{Title: "Entry " + id + " resumed from " + rep.From,
		Lines: []string{
			"the entry left " + rep.Left + " and is " + rep.Status + " again, with the same queue id; the dispatcher picks it up",
			"steps run again: " + strings.Join(rep.Steps, ", "),
		},
		Links: []link{{"/entries/" + id, "the entry"}}}
	if rep.NewEffects {
		res.Lines = append(res.Lines, "new effect identities: "+strings.Join(rep.StepEffectIDs(), ", ")+": their writes happen again")
	} else {
		res.Lines = append(res.Lines, "same effect identities: an effect journaled applied is read back, not repeated")
	}
	c.render(w, r, http.StatusOK, "result", res)
}

// repinLines say what --repin keeps and runs again (the confirmation
// pages of a replay and a resume with repin).
func repinLines(p *admin.RepinPlan) []string {
	if p == nil {
		return []string{"Repin: the entry is already pinned to the running definition of its trigger; nothing changes in what it runs."}
	}
	none := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return strings.Join(l, ", ")
	}
	lines := []string{
		"Repin: the entry, accepted under definition " + p.From + " of its trigger, runs under the running definition " + p.To + ".",
		"Kept (completed, read back, not run again): " + none(p.Kept) + ".",
		"Run again: " + none(p.Again) + ".",
	}
	if len(p.Dropped) > 0 {
		lines = append(lines, "Dropped (completed under the old definition, not in the running one): "+none(p.Dropped)+".")
	}
	return lines
}
