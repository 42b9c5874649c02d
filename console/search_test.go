package console_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestSearchAndBulkReplay: the entries page lists newest first; its
// search box takes a queue id or an event id, and a body field within a
// window, and says how much it searched; the bulk replay form of a
// status's listing asks to confirm on a page that says how many, changes
// nothing until then, and records the reason typed.
func TestSearchAndBulkReplay(t *testing.T) {
	f := newFixture(t, 50)
	a := f.entry(t, "trigger:t", "ev-a", `{"customer": {"id": "cus_1"}}`, touba.StatusFailed)
	b := f.entry(t, "trigger:t", "ev-b", `{"customer": {"id": "cus_2"}}`, touba.StatusFailed)
	c := f.entry(t, "trigger:t", "ev-c", `{"customer": {"id": "cus_1"}}`, touba.StatusDone)
	br := f.login(t)
	_, body := br.get("/entries")
	if ic, ib, ia := strings.Index(body, c), strings.Index(body, b), strings.Index(body, a); !(ic >= 0 && ic < ib && ib < ia) {
		t.Fatalf("entries not newest first (%d %d %d):\n%s", ic, ib, ia, body)
	}
	for _, s := range []struct {
		query      string
		want, not  []string
		searchLine string
	}{
		{"q=" + b, []string{b}, []string{a, c}, "Searched 1 entry"},
		{"q=ev-a", []string{a}, []string{b, c}, "Searched 1 entry"},
		{"body=" + url.QueryEscape("/customer/id=cus_1") + "&window=1h", []string{a, c}, []string{b}, "Searched 3 entries"},
		{"body=" + url.QueryEscape("/customer/id=cus_1") + "&status=failed", []string{a}, []string{b, c}, "1 found"},
	} {
		resp, body := br.get("/entries?" + s.query)
		if resp.StatusCode != 200 || !strings.Contains(body, s.searchLine) {
			t.Fatalf("search %s: %d, want %q\n%s", s.query, resp.StatusCode, s.searchLine, body)
		}
		for _, id := range s.want {
			if !strings.Contains(body, `href="/entries/`+id+`"`) {
				t.Errorf("search %s: %s not found", s.query, id)
			}
		}
		for _, id := range s.not {
			if strings.Contains(body, `href="/entries/`+id+`"`) {
				t.Errorf("search %s: %s listed", s.query, id)
			}
		}
	}
	if resp, _ := br.get("/entries?window=soon"); resp.StatusCode != 400 {
		t.Fatalf("window soon: %d, want 400", resp.StatusCode)
	}

	_, body = br.get("/entries?status=failed")
	if !strings.Contains(body, `id="bulk-replay"`) {
		t.Fatalf("no bulk replay form on the failed listing:\n%s", body)
	}
	form := url.Values{"status": {"failed"}, "trigger": {"trigger:t"}, "reason": {"INC-5 fixed"}}
	resp, body := br.action("/entries/replay", form)
	if resp.StatusCode != 200 || !strings.Contains(body, "Replay 2 failed entries?") || !strings.Contains(body, `id="confirm"`) ||
		f.status(t, a) != touba.StatusFailed {
		t.Fatalf("bulk replay, unconfirmed: %d, %s\n%s", resp.StatusCode, f.status(t, a), body)
	}
	form.Set("confirm", "yes")
	resp, body = br.action("/entries/replay", form)
	if resp.StatusCode != 200 || !strings.Contains(body, "Replayed 2 of 2 failed entries") || f.status(t, a) != touba.StatusPending ||
		f.status(t, b) != touba.StatusPending {
		t.Fatalf("bulk replay: %d, %s %s\n%s", resp.StatusCode, f.status(t, a), f.status(t, b), body)
	}
	ev, err := f.st.OperatorEvents(context.Background(), a, 10)
	if err != nil || len(ev) != 1 || ev[0].Reason != "INC-5 fixed" || !strings.HasPrefix(ev[0].Operator, "console: ") {
		t.Fatalf("audit of the bulk replay: %+v %v", ev, err)
	}
	if resp, body := br.action("/entries/replay", url.Values{"status": {"failed"}}); resp.StatusCode != touba.HTTPStatus(touba.ENothingReplayed) ||
		!strings.Contains(body, touba.ENothingReplayed) || !strings.Contains(body, `<a href="/entries">Back</a>`) {
		t.Fatalf("bulk replay with nothing failed: %d\n%s", resp.StatusCode, body)
	}
}
