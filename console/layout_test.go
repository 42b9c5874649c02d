package console_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
)

// tableFitJS lists what overflows in the page's tables: a table wider than
// main (which then scrolls sideways), and a UUID (a queue, delivery or
// event id) in a cell over more than one line.
const tableFitJS = `(() => {
  const out = [], main = document.querySelector("main");
  if (main.scrollWidth > main.clientWidth + 1) {
    out.push("main scrolls sideways: its content is " + main.scrollWidth + " px wide in " + main.clientWidth + " px");
  }
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  const walk = document.createTreeWalker(document.querySelector("main table") || main, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const s = n.textContent.trim();
    if (!uuid.test(s)) continue;
    const r = document.createRange();
    r.selectNodeContents(n);
    const lines = new Set([...r.getClientRects()].map(b => Math.round(b.top))).size;
    if (lines > 1) out.push(s + " over " + lines + " lines");
  }
  return out;
})()`

// TestTablesFitALaptop: at 1280 px, the Entries and Deliveries listings of
// realistic rows (UUID queue and event ids, a long trigger ref and code, a
// node name) fit the page without scrolling sideways, each UUID on one line.
func TestTablesFitALaptop(t *testing.T) {
	ctx, _ := newBrowser(t)
	f := newFixture(t, 50)
	const trigger = "trigger:examples.github/PullRequestReviewComments"
	const event = "72d3162e-cc78-11e3-81ab-4c9367dc0958" // a GitHub delivery id
	q := f.entry(t, trigger, event, `{"order":1}`, touba.StatusParked)
	f.entry(t, trigger, "f2a4c7e0-1b2d-4e5f-8a9b-0c1d2e3f4a5b", `{"order":2}`, touba.StatusFailed)
	f.entry(t, trigger, "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d", `{"order":3}`, touba.StatusDone)
	for _, code := range []string{touba.ETriggerEventPayloadConflict, touba.ETriggerReplayRejected} {
		f.logRow(t, &touba.LoggedDelivery{TriggerRef: trigger, EventID: event, Digest: dedupe.Digest([]byte(`{"order":9}`)),
			StatusCode: 409, ErrorCode: code, QueueID: q, Body: []byte(`{"order":9}`), BodyStored: true})
	}
	do(t, ctx, "open the login", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(f.srv.URL+"/login"),
		chromedp.WaitVisible(chromedp.ID("token")))
	do(t, ctx, "log in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login")))
	do(t, ctx, "see the overview", chromedp.WaitVisible(chromedp.ID("parked-count")))
	for _, p := range []string{"/entries", "/deliveries", "/deliveries?rejected=1", "/parked"} {
		do(t, ctx, p, chromedp.Navigate(f.srv.URL+p), chromedp.WaitReady(chromedp.CSS("main table")))
		bad, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](tableFitJS))
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 || os.Getenv("CONSOLE_SCREENSHOTS") != "" {
			shot(t, ctx, "layout"+strings.ReplaceAll(strings.ReplaceAll(p, "/", "-"), "?", "-")+".png")
		}
		if len(bad) > 0 {
			t.Errorf("at 1280 px, %s:\n%s", p, strings.Join(bad, "\n"))
		}
	}
}

// TestCarrierWakeShown: a debounce carrier waits for its gathering, not
// for an event: the Entries listing says when it starts instead of "no
// timeout", as the entry's page does.
func TestCarrierWakeShown(t *testing.T) {
	f := newFixture(t, 50)
	body := `{"id":"d1"}`
	r, err := f.q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:t", EventID: "d1", Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), Gather: &touba.GatherSpec{Kind: touba.GatherDebounce,
			Key: touba.GatherKeyOf(touba.GatherDebounce, "/event/body/k"), Value: `"k"`, Window: time.Minute, MaxWait: time.Hour}})
	if err != nil || !r.Created {
		t.Fatalf("enqueue: %v %+v", err, r)
	}
	b := f.login(t)
	if _, page := b.get("/entries?status=waiting"); !strings.Contains(page, "(debounce)") || strings.Contains(page, "no timeout") {
		t.Errorf("the listing does not show the carrier's gathering start:\n%s", page)
	}
	if _, page := b.get("/entries/" + r.QueueID); !strings.Contains(page, `id="entry-gather-start"`) || strings.Contains(page, "no timeout") {
		t.Errorf("the entry page does not show the carrier's gathering start:\n%s", page)
	}
}
