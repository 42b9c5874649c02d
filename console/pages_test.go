package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
)

// TestPages: every page answers 200 with what it is for.
func TestPages(t *testing.T) {
	f := newFixture(t, 50)
	parked := f.entry(t, "trigger:orders", "ord-1", `{"order":1}`, touba.StatusParked)
	eff := f.effect(t, parked, "charge", "tool:pay", touba.RetryReconcile, touba.EffectUnknown)
	done := f.entry(t, "trigger:orders", "ord-2", `{"order":2}`, touba.StatusDone)
	applied := f.effect(t, done, "ship", "tool:undoable", touba.RetryIdempotencyKey, touba.EffectApplied)
	f.entry(t, "trigger:orders", "ord-3", `{}`, touba.StatusFailed)
	conflict := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:orders", EventID: "ord-1", Digest: dedupe.Digest([]byte(`{"order":99}`)),
		StatusCode: 409, ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: parked, Body: []byte(`{"order":99}`), BodyStored: true,
		Headers: map[string]string{"x-signature": "[secret]"}})
	b := f.login(t)
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{`id="parked-count">1<`, `id="unknown-count">1<`, touba.ETriggerEventPayloadConflict, "oldest pending"}},
		{"/parked", []string{parked, eff, "tool:pay", "reconcile"}},
		{"/entries", []string{parked, done, "ord-3"}},
		{"/entries?status=done", []string{done}},
		{"/entries/" + parked, []string{`id="entry-status" class="st-parked">parked<`, eff, "Replay this entry", `{&#34;order&#34;:1}`}},
		{"/entries/" + done, []string{applied, "Compensate ship", "r-ship"}},
		{"/effects/" + parked + "/" + eff, []string{"reconcile", "not called again", "calls tool:pay again", "Resolve applied",
			"Resolve not applied", "/steps/charge/output", "sha256:charge", "dispatched", touba.EHandlerTimeout}},
		{"/deliveries", []string{conflict, "ord-1"}},
		{"/deliveries?rejected=1&code=" + touba.ETriggerEventPayloadConflict + "&trigger=trigger:orders&since=1h", []string{conflict}},
		{"/deliveries/" + conflict, []string{"the stored body beside the new one", `{&#34;order&#34;:99}`, `{&#34;order&#34;:1}`,
			dedupe.Digest([]byte(`{"order":99}`)), "[secret]", "Replay with a new event id"}},
	} {
		resp, body := b.get(tc.path)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d\n%s", tc.path, resp.StatusCode, body)
		}
		checkHeaders(t, resp)
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q", tc.path, w)
			}
		}
	}
	// Filters exclude: the done filter lists no parked entry, the code
	// filter no other code; an unknown id is 404 NotFound.
	if _, body := b.get("/entries?status=done"); strings.Contains(body, parked) {
		t.Error("status=done lists the parked entry")
	}
	if _, body := b.get("/deliveries?code=TriggerSignatureInvalid"); strings.Contains(body, conflict) {
		t.Error("code filter lists another code")
	}
	if resp, body := b.get("/entries/no-such-entry"); resp.StatusCode != 404 || !strings.Contains(body, touba.ENotFound) {
		t.Errorf("unknown entry: %d", resp.StatusCode)
	}
	if resp, _ := b.get("/deliveries?since=yesterday"); resp.StatusCode != 400 {
		t.Errorf("bad since: %d, want 400", resp.StatusCode)
	}
	// The compensate button only where the binding supports it.
	if _, body := b.get("/effects/" + parked + "/" + eff); strings.Contains(body, "/compensate") {
		t.Error("compensate offered for an unknown effect of a binding without support")
	}
	// The static files are served, the CSS as CSS.
	for _, p := range []string{"/static/console.css", "/static/console.js"} {
		if resp, _ := b.get(p); resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

// TestEscaping: a body holding <script>, an event id and a header with
// bidi and control characters are shown escaped: no markup of theirs
// reaches the page, and every bidi or control character is shown as
// \uXXXX.
func TestEscaping(t *testing.T) {
	f := newFixture(t, 50)
	evil := "<script>alert(1)</script>"
	eventID := "inv\u202eoice-\u2066x\u2069\x1b[31m"
	q := f.entry(t, "trigger:t", eventID, evil+"\u202e", touba.StatusFailed)
	d := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: eventID, StatusCode: 400,
		ErrorCode: touba.ETriggerEventIDInvalid, Body: []byte(evil), BodyStored: true,
		Headers: map[string]string{"x-note": "a\u202eb", "x-<b>": `"><script>alert(2)</script>`}})
	b := f.login(t)
	for _, p := range []string{"/entries", "/entries/" + q, "/deliveries", "/deliveries/" + d} {
		_, body := b.get(p)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "x-<b>") {
			t.Fatalf("%s: sender markup reached the page", p)
		}
		if strings.ContainsAny(body, "\u202e\u2066\u2069\x1b") {
			t.Fatalf("%s: a raw bidi or control character reached the page", p)
		}
		if !strings.Contains(body, `inv\u202eoice-\u2066x\u2069\u001b[31m`) {
			t.Fatalf("%s: the event id is not shown with its characters visible", p)
		}
	}
	if _, body := b.get("/entries/" + q); !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e") {
		t.Fatal("the body is not shown escaped")
	}
	if _, body := b.get("/deliveries/" + d); !strings.Contains(body, `a\u202eb`) || !strings.Contains(body, "x-&lt;b&gt;") {
		t.Fatal("headers are not shown escaped")
	}
}

// TestPagination: following each page's Next link walks every entry and
// every delivery once, with a keyset cursor.
func TestPagination(t *testing.T) {
	f := newFixture(t, 3)
	want := map[string]bool{}
	for i := range 8 {
		want[f.entry(t, "trigger:t", "p"+string(rune('a'+i)), `{}`, touba.StatusPending)] = true
		f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "d" + string(rune('a'+i)), StatusCode: 401,
			ErrorCode: touba.ETriggerSignatureInvalid})
	}
	b := f.login(t)
	link := regexp.MustCompile(`href="(/[a-z]+\?[^"]+)" rel="next"`)
	row := map[string]*regexp.Regexp{"/entries": regexp.MustCompile(`<td class="id"><a href="/entries/([^"]+)">`),
		"/deliveries": regexp.MustCompile(`<td class="id"><a href="/deliveries/([^"]+)">`)}
	for start, re := range row {
		seen := map[string]bool{}
		pages := 0
		for next := start; next != ""; pages++ {
			if pages > 10 {
				t.Fatalf("%s: paging does not end", start)
			}
			resp, body := b.get(next)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d", next, resp.StatusCode)
			}
			for _, m := range re.FindAllStringSubmatch(body, -1) {
				if seen[m[1]] {
					t.Fatalf("%s: %s shown twice", start, m[1])
				}
				seen[m[1]] = true
			}
			next = ""
			if m := link.FindStringSubmatch(body); m != nil {
				next = strings.ReplaceAll(m[1], "&amp;", "&")
			}
		}
		if len(seen) != 8 || pages != 3 {
			t.Fatalf("%s: %d rows over %d pages, want 8 over 3", start, len(seen), pages)
		}
		if start == "/entries" {
			for id := range want {
				if !seen[id] {
					t.Fatalf("entry %s never listed", id)
				}
			}
		}
	}
}

// TestOverviewFailedCard: failed entries have a card of their own on the
// overview, linking to them and marked as an alert while there is any, as
// parked ones are; none is a plain card.
func TestOverviewFailedCard(t *testing.T) {
	f := newFixture(t, 50)
	f.entry(t, "trigger:orders", "ord-1", `{}`, touba.StatusDone)
	b := f.login(t)
	if _, body := b.get("/"); !strings.Contains(body, `<div class="card"><a href="/entries?status=failed"><b id="failed-count">0</b> failed entries</a>`) {
		t.Errorf("no plain failed card with none failed:\n%s", body)
	}
	f.entry(t, "trigger:orders", "ord-2", `{}`, touba.StatusFailed)
	if _, body := b.get("/"); !strings.Contains(body, `<div class="card alert"><a href="/entries?status=failed"><b id="failed-count">1</b> failed entry</a>`) {
		t.Errorf("no failed card marked as an alert with one failed:\n%s", body)
	}
}

// TestRedeliveriesAreNotRejections: a sender's redelivery of a consumed
// entry is answered 200 (logged TriggerReplayRejected, SPEC §3.1): the
// overview's rejections of the last hour and the Deliveries page's
// "rejected only" count the real refusal (a 409) and not the redeliveries;
// the code filter alone still finds them.
func TestRedeliveriesAreNotRejections(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:orders", "ord-1", `{"order":1}`, touba.StatusDone)
	var redeliveries []string
	for range 3 {
		redeliveries = append(redeliveries, f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:orders", EventID: "ord-1",
			Digest: dedupe.Digest([]byte(`{"order":1}`)), StatusCode: 200, ErrorCode: touba.ETriggerReplayRejected, QueueID: q}))
	}
	conflict := f.logRow(t, &touba.LoggedDelivery{TriggerRef: "trigger:orders", EventID: "ord-1", Digest: dedupe.Digest([]byte(`{"order":2}`)),
		StatusCode: 409, ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: q})
	b := f.login(t)
	_, body := b.get("/")
	if !strings.Contains(body, touba.ETriggerEventPayloadConflict) {
		t.Errorf("the overview does not count the 409")
	}
	if strings.Contains(body, touba.ETriggerReplayRejected) {
		t.Errorf("the overview counts redeliveries answered 200 as rejections")
	}
	_, body = b.get("/deliveries?rejected=1")
	if !strings.Contains(body, conflict) {
		t.Errorf("rejected only does not list the 409")
	}
	for _, id := range redeliveries {
		if strings.Contains(body, id) {
			t.Errorf("rejected only lists the redelivery %s answered 200", id)
		}
	}
	_, body = b.get("/deliveries?code=" + touba.ETriggerReplayRejected)
	for _, id := range redeliveries {
		if !strings.Contains(body, id) {
			t.Errorf("the code filter does not find the redelivery %s", id)
		}
	}
}
