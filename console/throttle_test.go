package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/console"
)

// fakeClock is the console's clock in the throttling tests: time moves
// only when the test says so.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// withClock serves f's service through a new console whose clock is now,
// and returns that console for direct calls.
func (f *fixture) withClock(tb testing.TB, now func() time.Time) *console.Console {
	tb.Helper()
	con, err := console.New(console.Config{Service: f.svc, Token: []byte(token), Log: zerolog.Nop(), Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	f.srv.Config.Handler = con
	return con
}

// leapingClock moves an hour on every reading, so no two guesses share a
// throttling window: for tests about 401s, not about throttling.
func leapingClock() func() time.Time {
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return func() time.Time { c.Advance(time.Hour); return c.Now() }
}

// serve sends one request straight to con, from addr.
func serve(con http.Handler, r *http.Request, addr string) *httptest.ResponseRecorder {
	r.RemoteAddr = addr
	w := httptest.NewRecorder()
	con.ServeHTTP(w, r)
	return w
}

func bearer(con http.Handler, addr, tok string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/parked", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return serve(con, r, addr)
}

// retryAfter reads a 429's Retry-After, failing on anything else.
func retryAfter(t *testing.T, w *httptest.ResponseRecorder) time.Duration {
	t.Helper()
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	n, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
	if !strings.Contains(w.Body.String(), touba.EConsoleThrottled) || !strings.Contains(w.Body.String(), `name="token"`) {
		t.Fatalf("a 429 without %s and the login form:\n%s", touba.EConsoleThrottled, w.Body.String())
	}
	return time.Duration(n) * time.Second
}

// TestBearerThrottled: an address's first three wrong bearer tokens are
// refused 401; after the fourth the address waits, answered 429 with
// Retry-After even with the right token (it is not compared); another
// address is not affected; after the wait the right token opens the page
// and resets the count.
func TestBearerThrottled(t *testing.T) {
	f := newFixture(t, 50)
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	con := f.withClock(t, c.Now)
	const attacker, other = "198.51.100.7:40000", "203.0.113.9:40000"
	for i := 1; i <= 4; i++ {
		if w := bearer(con, attacker, "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, w.Code)
		}
	}
	if got := retryAfter(t, bearer(con, attacker, token)); got != time.Second {
		t.Fatalf("Retry-After %s after the 4th wrong token, want 1s", got)
	}
	// Another port of the same address is the same address.
	retryAfter(t, bearer(con, "198.51.100.7:40001", token))
	if w := bearer(con, other, token); w.Code != http.StatusOK {
		t.Fatalf("another address with the token: %d, want 200", w.Code)
	}
	c.Advance(time.Second)
	if w := bearer(con, attacker, token); w.Code != http.StatusOK {
		t.Fatalf("after Retry-After with the token: %d, want 200", w.Code)
	}
	for i := 1; i <= 3; i++ {
		if w := bearer(con, attacker, "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("after the reset, wrong token %d: %d, want 401", i, w.Code)
		}
	}
	// Not a bearer token at all is a wrong one too.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Basic "+token)
	if w := serve(con, r, attacker); w.Code != http.StatusUnauthorized {
		t.Fatalf("Basic: %d, want 401", w.Code)
	}
	retryAfter(t, bearer(con, attacker, token))
}

// TestGuessRate counts the tokens compared for one address over an hour
// of the console's clock: an attacker who sends guesses as fast as it can
// gets 4 compared and then nothing but 429s; one who waits exactly what
// Retry-After says gets the free 3, then 1s, 2s, 4s, ... up to one a
// minute: fewer than 70 an hour, against millions unthrottled.
func TestGuessRate(t *testing.T) {
	f := newFixture(t, 50)
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	con := f.withClock(t, c.Now)
	const addr = "198.51.100.7:40000"
	compared := 0
	for i := 0; i < 1000; i++ {
		switch w := bearer(con, addr, "guess"); w.Code {
		case http.StatusUnauthorized:
			compared++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	if compared != 4 {
		t.Fatalf("a burst of 1000 guesses had %d compared, want 4", compared)
	}

	c2 := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	con = f.withClock(t, c2.Now)
	start := c2.Now()
	compared = 0
	for c2.Now().Sub(start) < time.Hour {
		w := bearer(con, addr, "guess")
		if w.Code == http.StatusUnauthorized {
			compared++
			continue
		}
		c2.Advance(retryAfter(t, w))
	}
	// 3 free, then waits of 1s, 2s, ... 32s (63s in all, 7 guesses),
	// then one a minute for the rest of the hour: 68.
	if compared < 60 || compared > 70 {
		t.Fatalf("%d guesses compared in an hour, want 60-70", compared)
	}
	t.Logf("%d guesses compared in an hour of waiting out Retry-After", compared)
}

// TestLoginThrottled: the login form is throttled like the bearer token,
// by the same count: a throttled login with the right token answers 429
// with Retry-After and opens no session; after the wait it logs in.
func TestLoginThrottled(t *testing.T) {
	f := newFixture(t, 50)
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	con := f.withClock(t, c.Now)
	const addr = "198.51.100.7:40000"
	w := serve(con, httptest.NewRequest(http.MethodGet, "/login", nil), addr)
	form := formField.FindStringSubmatch(w.Body.String())
	if form == nil {
		t.Fatalf("no login form:\n%s", w.Body.String())
	}
	login := func(tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"form": {form[1]}, "token": {tok}, "next": {"/parked"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: "touba_console_login", Value: form[1]})
		return serve(con, r, addr)
	}
	for i := 1; i <= 2; i++ {
		if w := login("guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d, want 401", i, w.Code)
		}
	}
	// Guesses through the bearer header and the form add up.
	for i := 1; i <= 2; i++ {
		if w := bearer(con, addr, "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong bearer %d: %d, want 401", i, w.Code)
		}
	}
	w = login(token)
	wait := retryAfter(t, w)
	for _, ck := range w.Result().Cookies() {
		if ck.Name == "touba_console" && ck.MaxAge >= 0 {
			t.Fatal("a throttled login set a session cookie")
		}
	}
	c.Advance(wait)
	if w := login(token); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/parked" {
		t.Fatalf("login after the wait: %d %q, want 303 to /parked", w.Code, w.Header().Get("Location"))
	}
}
