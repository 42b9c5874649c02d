package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/touba/touba-trigger/internal/testkit"
)

const chromium = "/usr/bin/chromium"

// problems collects what the browser reports as wrong on any page: an
// uncaught exception, a console error (CSP violations are reported there
// and in the log domain), a log entry of level error.
type problems struct {
	mu   sync.Mutex
	list []string
}

func (p *problems) add(s string) { p.mu.Lock(); p.list = append(p.list, s); p.mu.Unlock() }
func (p *problems) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.list
	p.list = nil
	return out
}

func newBrowser(t *testing.T) (context.Context, *problems) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skipped: %s is not installed (apt-get install chromium); the real-browser tests need it", chromium)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-first-run", true), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	p := &problems{}
	// Every console message of level warning or error, every uncaught
	// exception and every browser log entry of those levels (a CSP
	// violation is one, source "security" or "other") is a problem.
	messages := chromedp.Console(ctx)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			// The 401 of the login page is by design.
			if m.Source == "network" && strings.Contains(m.Text, "status of 401") {
				continue
			}
			if m.IsException() || m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning {
				p.add(fmt.Sprintf("%s [%s] %s %s", m.Type, m.Source, m.Text, m.URL))
			}
		}
	}()
	t.Cleanup(func() { cancelT(); cancelB(); cancelA(); <-readDone })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, p
}

// shot saves a screenshot of the viewport under $CONSOLE_SCREENSHOTS (the
// README's images come from there) or the test's temporary folder.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func text(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
	if err != nil {
		t.Fatalf("text of #%s: %v", id, err)
	}
	return s
}

// waitText reloads the page until the element #id holds want.
func waitText(t *testing.T, ctx context.Context, id, want string) {
	t.Helper()
	var got string
	testkit.WaitForReport(t, 30*time.Second, testkit.Every(100*time.Millisecond, func() bool {
		do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID(id)))
		got = text(t, ctx, id)
		return strings.Contains(got, want)
	}), fmt.Sprintf("#%s to show %q", id, want), func() { t.Logf("#%s shows %q", id, got) })
}

// TestBrowser drives Debian's Chromium through the console of a real
// daemon: log in, find the run parked by a write whose outcome is
// unknown, resolve it applied and see the entry finish done; replay a
// rejected delivery and see it enqueued; and no page logs a JavaScript
// error or a CSP violation.
func TestBrowser(t *testing.T) {
	ctx, probs := newBrowser(t)
	d := startDaemon(t)
	if got := d.send(t, "ord-1", `{"order":1,"total":"12.50"}`); got != http.StatusAccepted {
		t.Fatalf("intake: %d", got)
	}
	body := d.waitPage(t, "/parked", "tool:shop/Charge")
	if m := regexp.MustCompile(`href="/effects/([^/"]+)/`).FindStringSubmatch(body); m != nil {
		d.waitParked(t, m[1])
	}
	// A conflicting redelivery: rejected 409, its body kept for replay.
	if got := d.send(t, "ord-1", `{"order":1,"total":"99.00"}`); got != http.StatusConflict {
		t.Fatalf("conflicting redelivery: %d, want 409", got)
	}
	d.waitPage(t, "/deliveries", "TriggerEventPayloadConflict")

	// Any page asks for the token first, then shows itself.
	do(t, ctx, "open the console", chromedp.Navigate(d.console+"/parked"))
	do(t, ctx, "see the login", chromedp.WaitVisible(chromedp.ID("token")))
	do(t, ctx, "log in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login")))
	do(t, ctx, "after login", chromedp.WaitVisible(chromedp.ID("unknown-effects")),
		// The login's redirect may still be replacing the document the
		// first wait saw (once under load: "could not find node").
		chromedp.Poll[chromedp.Void](`location.pathname === "/parked" && document.readyState === "complete"`))
	do(t, ctx, "open the effect", chromedp.Click(chromedp.CSS("#unknown-effects a")), chromedp.WaitVisible(chromedp.ID("apply")))
	if got := text(t, ctx, "effect-state"); got != "unknown" {
		t.Fatalf("effect state %q, want unknown", got)
	}
	do(t, ctx, "fill the verdict", chromedp.SendKeys(chromedp.ID("receipt_ref"), "ch_42"),
		chromedp.SendKeys(chromedp.ID("result"), `{"charge":"ch_42","amount":"12.50"}`),
		chromedp.WaitVisible(chromedp.CSS("#result-check.good")))
	shot(t, ctx, "console-parked.png")
	if bad := layoutProblems(t, ctx); len(bad) > 0 {
		t.Errorf("the effect page's layout:\n%s", strings.Join(bad, "\n"))
	}
	do(t, ctx, "resolve", chromedp.Click(chromedp.ID("apply")), chromedp.WaitVisible(chromedp.CSS("h1#result")))
	if got := text(t, ctx, "result"); !strings.Contains(got, "resolved applied") {
		t.Fatalf("after resolve: %q", got)
	}
	do(t, ctx, "open the entry", chromedp.Click(chromedp.CSS(`main a[href^="/entries/"]`)), chromedp.WaitVisible(chromedp.ID("entry-status")))
	waitText(t, ctx, "entry-status", "done")
	if got := d.calls.Load(); got != 1 {
		t.Fatalf("remote called %d times, want 1", got)
	}
	doneURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}

	// Replay the rejected delivery under a new event id.
	do(t, ctx, "open the delivery", chromedp.Navigate(d.console+"/deliveries?rejected=1"), chromedp.WaitVisible(chromedp.ID("deliveries")),
		chromedp.Click(chromedp.CSS("#deliveries td a")), chromedp.WaitVisible(chromedp.ID("replay-delivery-new")))
	shot(t, ctx, "console-deliveries.png")
	do(t, ctx, "replay", chromedp.Click(chromedp.ID("replay-delivery-new")), chromedp.WaitVisible(chromedp.CSS("h1#result")))
	if got := text(t, ctx, "result"); !strings.Contains(got, "replayed: enqueued") {
		t.Fatalf("after replay: %q", got)
	}
	do(t, ctx, "open the new entry", chromedp.Click(chromedp.CSS(`main a[href^="/entries/"]`)), chromedp.WaitVisible(chromedp.ID("entry-status")))
	entryURL, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	// Every other page, for errors, and on each no word of a table broken
	// in the middle, at a laptop's width and a narrow one.
	pages := []string{"/", "/parked", "/entries", "/deliveries?rejected=1", "/triggers", "/login", strings.TrimPrefix(entryURL, d.console)}
	for _, width := range []int64{1280, 900} {
		do(t, ctx, "resize", chromedp.EmulateViewport(width, 900))
		for _, p := range pages {
			do(t, ctx, p, chromedp.Navigate(d.console+p), chromedp.WaitReady(chromedp.CSS("body")))
			if broken := brokenWords(t, ctx); len(broken) > 0 {
				t.Errorf("at %d px, %s breaks words in the middle:\n%s", width, p, strings.Join(broken, "\n"))
			}
			if bad := layoutProblems(t, ctx); len(bad) > 0 {
				t.Errorf("at %d px, %s's layout:\n%s", width, p, strings.Join(bad, "\n"))
			}
		}
	}
	// The operator's time zone, from the header's form: the entries in
	// Paris time (screenshot for the README: the search form and the list).
	do(t, ctx, "laptop width", chromedp.EmulateViewport(1280, 900))
	do(t, ctx, "choose a time zone", chromedp.Navigate(d.console+"/entries"), chromedp.WaitVisible(chromedp.CSS(`input[name="tz"]`)),
		chromedp.SetValue(chromedp.CSS(`input[name="tz"]`), "Europe/Paris"), chromedp.Submit(chromedp.CSS(`form.tz`)),
		chromedp.WaitVisible(chromedp.ID("entries")))
	if got := text(t, ctx, "entries"); !strings.Contains(got, "CET (+01:00)") {
		t.Fatalf("entries after choosing Europe/Paris: %q", got)
	}
	shot(t, ctx, "console-entries.png")
	// Pause a trigger from its page, and resume it: each a POST with the
	// session's CSRF token.
	do(t, ctx, "pause a trigger", chromedp.Navigate(d.console+"/triggers"), chromedp.WaitVisible(chromedp.ID("triggers")),
		chromedp.SendKeys(chromedp.CSS(`#triggers input[name="reason"]`), "browser test"), chromedp.Click(chromedp.CSS(`#triggers button`)),
		chromedp.WaitVisible(chromedp.Search(`//h1[starts-with(., "Paused trigger:")]`)))
	do(t, ctx, "see it paused", chromedp.Navigate(d.console+"/triggers"), chromedp.WaitVisible(chromedp.Search(`//td/b[.="paused"]`)))
	shot(t, ctx, "console-triggers.png")
	do(t, ctx, "resume it", chromedp.Navigate(d.console+"/triggers"), chromedp.WaitVisible(chromedp.Search(`//td/b[.="paused"]`)),
		chromedp.Click(chromedp.CSS(`#triggers button`)), chromedp.WaitVisible(chromedp.Search(`//h1[starts-with(., "Resumed trigger:")]`)))
	// Resume the done entry from a step with new effects: the form, then
	// the page that says the writes happen again, then the result.
	do(t, ctx, "open the done entry", chromedp.Navigate(doneURL), chromedp.WaitVisible(chromedp.ID("resume-form")),
		chromedp.Click(chromedp.ID("resume-new-effects")), chromedp.Click(chromedp.ID("resume-entry")),
		chromedp.WaitVisible(chromedp.ID("confirm-title")))
	if got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("section.explain"))); err != nil || !strings.Contains(got, "writes happen again") {
		t.Fatalf("resume confirmation: %q %v", got, err)
	}
	do(t, ctx, "confirm the resume", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.CSS("h1#result")))
	if got := text(t, ctx, "result"); !strings.Contains(got, "resumed from") {
		t.Fatalf("after resume: %q", got)
	}
	flush(t, ctx)
	if got := probs.take(); len(got) > 0 {
		t.Fatalf("the browser reported problems:\n%s", strings.Join(got, "\n"))
	}
	// The check sees a violation: an inline style is refused and reported.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`document.body.setAttribute("style", "color: red"); 1`)); err != nil {
		t.Fatal(err)
	}
	var got []string
	testkit.WaitForReport(t, 10*time.Second, testkit.Every(50*time.Millisecond, func() bool {
		flush(t, ctx)
		got = probs.take()
		return strings.Contains(fmt.Sprint(got), "Content Security Policy")
	}), "the report of a deliberate CSP violation (without it the check above proves nothing)", func() { t.Logf("reported: %v", got) })
}

// flush makes a round trip to the page, so the events it sent before have
// reached the reader.
func flush(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("1")); err != nil {
		t.Fatal(err)
	}
}

// brokenWordsJS lists every run of letters and digits in a table cell or
// header that the layout put on more than one line: read from the computed
// layout (a Range's client rectangles), as the reader sees it.
const brokenWordsJS = `(() => {
  const out = [];
  for (const cell of document.querySelectorAll("th, td")) {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const re = /[A-Za-z0-9]{2,}/g;
      let m;
      while ((m = re.exec(n.data))) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
        if (tops.size > 1) out.push(m[0] + " in " + JSON.stringify(cell.textContent.trim().slice(0, 80)));
      }
    }
  }
  return out;
})()`

func brokenWords(t *testing.T, ctx context.Context) []string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](brokenWordsJS))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// layoutProblemsJS lists what the layout puts out of place, read from the
// computed boxes: a form's reason field above its heading, a checkbox not
// on the first line of its label's text (or after it), an id in a table
// over more than one line.
const layoutProblemsJS = `(() => {
  const out = [];
  for (const f of document.querySelectorAll("form.action")) {
    const h = f.querySelector("h3"), r = f.querySelector("label.reason");
    if (h && r && r.getBoundingClientRect().top < h.getBoundingClientRect().bottom) {
      out.push("the reason field is above the heading " + JSON.stringify(h.textContent));
    }
    for (const c of f.querySelectorAll("input[type=checkbox]")) {
      let t = c.nextSibling;
      while (t && !(t.nodeType === 3 && t.textContent.trim())) t = t.nextSibling;
      if (!t) continue;
      const range = document.createRange();
      range.selectNodeContents(t);
      const first = range.getClientRects()[0], cb = c.getBoundingClientRect();
      const mid = (cb.top + cb.bottom) / 2;
      if (!first || mid < first.top || mid > first.bottom || cb.right > first.left + 1) {
        out.push("checkbox #" + c.id + " is not at the start of its label's first line");
      }
    }
  }
  for (const e of document.querySelectorAll("td.id a, td.id code")) {
    const n = e.getClientRects().length;
    if (n > 1) out.push("id " + e.textContent + " wraps over " + n + " lines");
  }
  return out;
})()`

func layoutProblems(t *testing.T, ctx context.Context) []string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](layoutProblemsJS))
	if err != nil {
		t.Fatalf("layout check: %v", err)
	}
	return out
}
