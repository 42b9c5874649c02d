package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestTriggersPage: the page lists each trigger of the program, paused or
// not, with its weight, its runnable, running, held and waiting counts and
// the open circuits of its bindings; Pause and Resume are CSRF-checked POSTs, audited as the
// console's with the reason typed, and the lease then skips the paused
// trigger's entries.
func TestTriggersPage(t *testing.T) {
	f := newFixture(t, 50)
	f.svc.ProgramTriggers = func() []admin.ProgramTrigger {
		return []admin.ProgramTrigger{{Ref: "trigger:a", Tools: []string{"tool:remote"}, Weight: 40},
			{Ref: "trigger:b", Tools: []string{"tool:other"}, Weight: 10}}
	}
	f.svc.Circuits = func(ctx context.Context) ([]touba.CircuitState, error) {
		return []touba.CircuitState{{ToolRef: "tool:remote", State: touba.CircuitOpen}}, nil
	}
	for _, ev := range []string{"e1", "e2"} {
		f.entry(t, "trigger:a", ev, `{}`, touba.StatusPending)
	}
	b := f.login(t)
	resp, body := b.get("/triggers")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /triggers: %d\n%s", resp.StatusCode, body)
	}
	row := func(body, ref string) string {
		i := strings.Index(body, ">"+ref+"</a>")
		if i < 0 {
			t.Fatalf("no row of %s:\n%s", ref, body)
		}
		end := strings.Index(body[i:], "</tr>")
		return body[i : i+end]
	}
	// weight, runnable, running, held
	if r := row(body, "trigger:a"); !strings.Contains(r, "active") ||
		!strings.Contains(r, `<td class="num">40</td><td class="num">2</td><td class="num">0</td><td class="num">-</td>`) ||
		!strings.Contains(r, "tool:remote: <b>open</b>") || !strings.Contains(r, "Pause") {
		t.Fatalf("row of trigger:a:\n%s", r)
	}
	if r := row(body, "trigger:b"); !strings.Contains(r, "none") || strings.Contains(r, "tool:remote") {
		t.Fatalf("row of trigger:b shows another binding's circuit:\n%s", r)
	}

	// Without the CSRF token the pause is refused and nothing changes.
	if resp, _ := b.post("/triggers/pause", url.Values{"ref": {"trigger:a"}}); resp.StatusCode != 403 {
		t.Fatalf("pause without CSRF: %d, want 403", resp.StatusCode)
	}
	if ps, _ := f.q.PausedTriggers(context.Background()); len(ps) != 0 {
		t.Fatalf("paused without CSRF: %+v", ps)
	}
	resp, body = b.action("/triggers/pause", url.Values{"ref": {"trigger:a"}, "reason": {"remote down"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "Paused trigger:a") || !strings.Contains(body, "202") {
		t.Fatalf("pause: %d\n%s", resp.StatusCode, body)
	}
	wantTriggerAudit(t, f, "trigger.pause", "paused", "remote down")
	if got, err := f.q.Lease(context.Background(), 10); err != nil || len(got) != 0 {
		t.Fatalf("lease while paused: %d entries, %v; want none", len(got), err)
	}
	_, body = b.get("/triggers")
	if r := row(body, "trigger:a"); !strings.Contains(r, "<b>paused</b>") || !strings.Contains(r, "remote down") || !strings.Contains(r, "Resume") ||
		!strings.Contains(r, `<td class="num">40</td><td class="num">0</td><td class="num">0</td><td class="num">2 (paused 2)</td>`) {
		t.Fatalf("row of the paused trigger:\n%s", r)
	}
	resp, body = b.action("/triggers/resume", url.Values{"ref": {"trigger:a"}})
	if resp.StatusCode != 200 || !strings.Contains(body, "Resumed trigger:a") {
		t.Fatalf("resume: %d\n%s", resp.StatusCode, body)
	}
	wantTriggerAudit(t, f, "trigger.resume", "resumed", "")
	if got, err := f.q.Lease(context.Background(), 10); err != nil || len(got) != 2 {
		t.Fatalf("lease after resume: %d entries, %v; want 2", len(got), err)
	}
	resp, body = b.action("/triggers/pause", url.Values{"ref": {"trigger:nope"}})
	if resp.StatusCode != 404 || !strings.Contains(body, "not a trigger of the running program") {
		t.Fatalf("pause of an unknown trigger: %d\n%s", resp.StatusCode, body)
	}
}

func wantTriggerAudit(t *testing.T, f *fixture, action, outcome, detail string) {
	t.Helper()
	ev, err := f.st.OperatorEvents(context.Background(), "", 0)
	if err != nil || len(ev) == 0 {
		t.Fatalf("operator events: %v %v", ev, err)
	}
	last := ev[len(ev)-1]
	wantConsoleAudit(t, last, action, outcome)
	if last.Target != "trigger:a" || last.Detail != detail {
		t.Fatalf("audit %+v, want target trigger:a, detail %q", last, detail)
	}
}

// countsQueue is the real queue with CountByTrigger answering known counts.
type countsQueue struct {
	*queue.Queue
	counts map[string]map[string]int64
}

func (q countsQueue) CountByTrigger(context.Context) (map[string]map[string]int64, error) {
	return q.counts, nil
}

// The page shows the entries held back with their reasons in short, as
// triggers ls does, and the running ones.
func TestTriggersPageHeldByReason(t *testing.T) {
	f := newFixture(t, 50)
	f.svc.Queue = countsQueue{Queue: f.q, counts: map[string]map[string]int64{
		"trigger:a": {touba.StatusPending: 17, "held": 2, touba.HeldSlot: 10, touba.StatusRunning: 4, touba.StatusWaiting: 1},
	}}
	_, body := f.login(t).get("/triggers")
	i := strings.Index(body, ">trigger:a</a>")
	if i < 0 {
		t.Fatalf("no row of trigger:a:\n%s", body)
	}
	r := body[i : i+strings.Index(body[i:], "</tr>")]
	// weight (none: no program), runnable, running, held, waiting (its
	// link escaped once: the trigger filter reads trigger:a)
	if want := `<td class="num">-</td><td class="num">5</td><td class="num">4</td><td class="num">12 (slot 10, key 2)</td>` +
		`<td class="num"><a href="/entries?trigger=trigger%3aa&amp;status=waiting">1</a></td>`; !strings.Contains(r, want) {
		t.Fatalf("row of trigger:a:\n%s\nwant it to contain\n%s", r, want)
	}
}
