package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/touba/touba-trigger/internal/testkit"
)

// hostileNexts are "next" values that would leave the console if a login
// redirected to them as they are.
var hostileNexts = []string{"/\t/evil.example", "/\n/evil.example", "//evil.example", "/\\evil.example",
	"\\\\evil.example", "https://evil.example", "/%2f/evil.example", "/\r\n/evil.example/x"}

// browserResolve reads a Location the way a browser's URL parser does
// (WHATWG URL): tabs and newlines are dropped, and "\" is "/" in an
// http(s) URL.
func browserResolve(t *testing.T, base, loc string) *url.URL {
	t.Helper()
	loc = strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(loc)
	b, _ := url.Parse(base)
	u, err := b.Parse(loc)
	if err != nil {
		t.Fatalf("Location %q: %v", loc, err)
	}
	return u
}

// TestLoginWithHostileNextStays: a login posted with a hostile next (the
// hidden field is the attacker's to set, through a link to /login?next=)
// redirects to a page of the console, however a browser reads the
// Location.
func TestLoginWithHostileNextStays(t *testing.T) {
	f := newFixture(t, 50)
	base, _ := url.Parse(f.srv.URL)
	for _, next := range hostileNexts {
		b := f.login(t)
		_, page := b.get("/login?next=" + url.QueryEscape(next))
		if strings.Contains(page, "evil.example") {
			t.Errorf("the login form for next=%q carries it:\n%s", next, page)
		}
		form := formField.FindStringSubmatch(page)
		if form == nil {
			t.Fatalf("no login form:\n%s", page)
		}
		resp, _ := b.post("/login", url.Values{"form": {form[1]}, "token": {token}, "next": {next}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("login with next=%q: %d", next, resp.StatusCode)
		}
		loc := resp.Header.Get("Location")
		if u := browserResolve(t, f.srv.URL, loc); u.Host != base.Host || u.Path != "/" {
			t.Errorf("login with next=%q redirects to %q, which a browser reads as %s; want the overview", next, loc, u)
		}
	}
}

// TestBrowserLoginWithHostileNext: Chromium opens /login?next=/<TAB>/evil.example
// (the link an attacker sends), logs in, and lands on the console's
// overview.
func TestBrowserLoginWithHostileNext(t *testing.T) {
	ctx, _ := newBrowser(t)
	f := newFixture(t, 50)
	for _, next := range []string{"/\t/evil.example", "/\\evil.example", "//evil.example"} {
		do(t, ctx, "open the login link", chromedp.Navigate(f.srv.URL+"/login?next="+url.QueryEscape(next)),
			chromedp.WaitVisible(chromedp.ID("token")))
		// The hidden field as an attacker's page could post it.
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`document.querySelector('input[name=next]').value = `+jsString(next)+`; 1`)); err != nil {
			t.Fatal(err)
		}
		do(t, ctx, "log in", chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login")))
		// Wait for the browser to leave the login page, wherever it goes.
		var href string
		var err error
		testkit.WaitForReport(t, 20*time.Second, testkit.Every(50*time.Millisecond, func() bool {
			href, err = chromedp.Run(ctx, chromedp.Evaluate[string](`location.href`))
			return err == nil && !strings.HasPrefix(href, f.srv.URL+"/login")
		}), "the browser to leave the login page", func() { t.Logf("still at %s (%v)", href, err) })
		if href != f.srv.URL+"/" {
			t.Fatalf("after login with next=%q the browser is at %s, want %s/", next, href, f.srv.URL)
		}
		do(t, ctx, "see the overview", chromedp.WaitVisible(chromedp.ID("parked-count")))
		do(t, ctx, "log out", chromedp.Click(chromedp.CSS("form.logout button")), chromedp.WaitVisible(chromedp.ID("token")))
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s) + `"`
}
