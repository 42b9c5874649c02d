package console

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/touba/touba-trigger/admin"
)

// The trigger test page (SPEC §2.4, §6.1): a trigger of the running
// program, or of a candidate program pasted into the form, tried on its
// source's last deliveries through the admin service, as `triggers test`
// does. Nothing is enqueued and no tool is called: the POST of a
// candidate changes nothing, and is a POST only for the size of the
// program it carries.

// testForm is what the page's form holds, kept on the page it renders.
type testForm struct {
	Ref, Last, Program string
}

// triggerTest: GET /triggers/test?ref=REF&last=N (the running program),
// POST /triggers/test with ref, last and program (a candidate's text).
func (c *Console) triggerTest(w http.ResponseWriter, r *http.Request) {
	f := testForm{Ref: strings.TrimSpace(r.FormValue("ref")), Last: strings.TrimSpace(r.FormValue("last"))}
	if r.Method == http.MethodPost {
		f.Program = r.PostFormValue("program")
	}
	data := map[string]any{"Form": f, "Max": admin.MaxTestLast}
	if f.Ref == "" {
		c.render(w, r, http.StatusOK, "triggertest", data)
		return
	}
	req := admin.TriggerTestRequest{TriggerRef: f.Ref}
	if f.Last != "" {
		n, err := strconv.Atoi(f.Last)
		if err != nil {
			data["Refusal"] = "last must be a number of deliveries"
			c.render(w, r, http.StatusBadRequest, "triggertest", data)
			return
		}
		req.Last = n
	}
	if strings.TrimSpace(f.Program) != "" {
		req.Program, req.ProgramPath = []byte(f.Program), "the candidate program"
	}
	res, err := c.svc.TestTrigger(r.Context(), req)
	if err != nil {
		// The form stays as typed, with the refusal above it.
		_, text := errText(err)
		data["Refusal"] = text
		c.render(w, r, http.StatusOK, "triggertest", data)
		return
	}
	data["Test"] = res
	c.render(w, r, http.StatusOK, "triggertest", data)
}
