package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/console"
)

// TestUnauthorized: without the token every page and every action answers
// 401 with the login page, and an action changes nothing.
func TestUnauthorized(t *testing.T) {
	f := newFixture(t, 50)
	f.withClock(t, leapingClock()) // many wrong tokens from one address, none throttled
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusParked)
	eff := f.effect(t, q, "charge", "tool:t", touba.RetryReconcile, touba.EffectUnknown)
	pages := []string{"/", "/parked", "/entries", "/entries/" + q, "/effects/" + q + "/" + eff, "/deliveries", "/deliveries/x"}
	for _, p := range pages {
		for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong-token"}, {"Cookie": "touba_console=forged"}} {
			resp, body := plain(t, http.MethodGet, f.srv.URL+p, hdr)
			if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) {
				t.Fatalf("GET %s with %v: %d, want 401 and the login form", p, hdr, resp.StatusCode)
			}
			checkHeaders(t, resp)
		}
	}
	for _, p := range []string{"/effects/" + q + "/" + eff + "/resolve", "/entries/" + q + "/replay", "/deliveries/x/replay"} {
		resp, _ := plain(t, http.MethodPost, f.srv.URL+p, nil)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("POST %s: %d, want 401", p, resp.StatusCode)
		}
	}
	if got := f.effectState(t, q, eff); got != touba.EffectUnknown {
		t.Fatalf("effect after refused posts: %s, want unknown", got)
	}
	// The right bearer token opens every page.
	for _, p := range pages[:6] {
		if resp, _ := plain(t, http.MethodGet, f.srv.URL+p, map[string]string{"Authorization": "Bearer " + token}); resp.StatusCode != 200 {
			t.Fatalf("GET %s with the token: %d", p, resp.StatusCode)
		}
	}
}

func checkHeaders(t *testing.T, resp *http.Response) {
	t.Helper()
	csp := resp.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	for k, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"} {
		if got := resp.Header.Get(k); got != want {
			t.Fatalf("%s=%q, want %q", k, got, want)
		}
	}
}

// TestLogin: the form sets an HttpOnly, SameSite=Strict session cookie
// (Secure over TLS), refuses a wrong token and a login without its form
// cookie, and logout ends the session.
func TestLogin(t *testing.T) {
	f := newFixture(t, 50)
	b := f.login(t)
	var sess *http.Cookie
	u, _ := url.Parse(f.srv.URL)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "touba_console" {
			sess = c
		}
	}
	if sess == nil {
		t.Fatal("no session cookie")
	}
	resp, _ := b.post("/logout", url.Values{"csrf": {b.csrf}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ := b.get("/"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("after logout: %d, want 401", resp.StatusCode)
	}
	// Wrong token, and a form without its cookie.
	b2 := f.login(t)
	_, p := b2.get("/login")
	form := formField.FindStringSubmatch(p)[1]
	if resp, body := b2.post("/login", url.Values{"form": {form}, "token": {"not-the-token-at-all"}}); resp.StatusCode != 401 ||
		!strings.Contains(body, touba.EConsoleUnauthorized) {
		t.Fatalf("wrong token: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/login", strings.NewReader(url.Values{"form": {form}, "token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("login without the form cookie: %d, want 403", resp.StatusCode)
	}
}

// TestCookieAttributes reads the Set-Cookie of a login over plain HTTP and
// over TLS.
func TestCookieAttributes(t *testing.T) {
	f := newFixture(t, 50)
	con, err := console.New(console.Config{Service: f.svc, Token: []byte(token), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	tls := httptest.NewTLSServer(con)
	defer tls.Close()
	for _, tc := range []struct {
		srv    *httptest.Server
		secure bool
	}{{f.srv, false}, {tls, true}} {
		c := tc.srv.Client()
		resp, err := c.Get(tc.srv.URL + "/login")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var form string
		for _, ck := range resp.Cookies() {
			if ck.Name == "touba_console_login" {
				form = ck.Value
			}
		}
		req, _ := http.NewRequest(http.MethodPost, tc.srv.URL+"/login", strings.NewReader(url.Values{"form": {form}, "token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "touba_console_login", Value: form})
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err = c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var sess *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "touba_console" {
				sess = ck
			}
		}
		if resp.StatusCode != http.StatusSeeOther || sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteStrictMode ||
			sess.Secure != tc.secure {
			t.Fatalf("login (tls %v): %d, cookie %+v", tc.secure, resp.StatusCode, sess)
		}
	}
}

// TestCSRF: a session's POST without its CSRF token, or with another,
// is refused 403 ConsoleCsrfInvalid and changes nothing.
func TestCSRF(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusParked)
	eff := f.effect(t, q, "charge", "tool:t", touba.RetryReconcile, touba.EffectUnknown)
	b := f.login(t)
	path := "/effects/" + q + "/" + eff + "/resolve"
	form := url.Values{"verdict": {"applied"}, "receipt_ref": {"r1"}}
	for _, csrf := range []string{"", strings.Repeat("0", 64), b.csrf[:10]} {
		form.Set("csrf", csrf)
		resp, body := b.post(path, form)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, touba.EConsoleCSRFInvalid) {
			t.Fatalf("csrf %q: %d %s", csrf, resp.StatusCode, body)
		}
	}
	if got := f.effectState(t, q, eff); got != touba.EffectUnknown {
		t.Fatalf("effect after refused posts: %s, want unknown", got)
	}
	// Another session's token is not this one's.
	other := f.login(t)
	form.Set("csrf", other.csrf)
	if resp, _ := b.post(path, form); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another session's csrf: %d, want 403", resp.StatusCode)
	}
	if resp, _ := b.action(path, url.Values{"verdict": {"applied"}, "receipt_ref": {"r1"}}); resp.StatusCode != 200 {
		t.Fatalf("with the session's csrf: %d", resp.StatusCode)
	}
}
