package console_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/console"
)

// The proxy of these tests, and a peer that is not trusted.
const (
	proxyPeer     = "10.0.0.2:51000"
	untrustedPeer = "192.0.2.50:51000"
)

// behindProxy is a console whose only trusted proxy is 10.0.0.2
// (--trusted-proxies 10.0.0.2/32), on f's service, with clock now.
func (f *fixture) behindProxy(tb testing.TB, now func() time.Time) *console.Console {
	tb.Helper()
	con, err := console.New(console.Config{Service: f.svc, Token: []byte(token), Log: zerolog.Nop(), Now: now,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.2/32")}})
	if err != nil {
		tb.Fatal(err)
	}
	return con
}

// bearerVia is a bearer request from peer carrying X-Forwarded-For xff.
func bearerVia(con http.Handler, peer, xff, tok string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/parked", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	return serve(con, r, peer)
}

// TestThrottleByForwardedClient: behind a trusted proxy, wrong tokens are
// throttled by the client address the proxy forwards, so one guesser
// behind it does not lock out an operator behind the same proxy; an
// untrusted peer's X-Forwarded-For is not believed (a guesser cannot
// escape the throttle by making up a new address each time).
func TestThrottleByForwardedClient(t *testing.T) {
	f := newFixture(t, 50)
	c := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	con := f.behindProxy(t, c.Now)
	const guesser, operator = "198.51.100.7", "203.0.113.9"
	for i := 1; i <= 4; i++ {
		if w := bearerVia(con, proxyPeer, guesser, "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d through the proxy: %d, want 401", i, w.Code)
		}
	}
	retryAfter(t, bearerVia(con, proxyPeer, guesser, token))
	// The operator's client address, forwarded by the same proxy, is not
	// the guesser's; a hop the client made up before the proxy's does not
	// change whose it is (the right-most untrusted one counts).
	if w := bearerVia(con, proxyPeer, operator, token); w.Code != http.StatusOK {
		t.Fatalf("another client behind the proxy with the token: %d, want 200", w.Code)
	}
	retryAfter(t, bearerVia(con, proxyPeer, "203.0.113.200, "+guesser, token))

	// An untrusted peer's X-Forwarded-For is ignored: its guesses are
	// counted by the peer, whatever address each one claims.
	for i := 1; i <= 4; i++ {
		if w := bearerVia(con, untrustedPeer, "198.51.100."+string(rune('0'+i)), "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d from the untrusted peer: %d, want 401", i, w.Code)
		}
	}
	retryAfter(t, bearerVia(con, untrustedPeer, "198.51.100.99", token))
}

// TestSecureCookieBehindTLSProxy: the login's cookies are Secure when a
// trusted proxy says the browser spoke HTTPS to it (X-Forwarded-Proto),
// not when an untrusted peer says so, and not over plain HTTP.
func TestSecureCookieBehindTLSProxy(t *testing.T) {
	f := newFixture(t, 50)
	con := f.behindProxy(t, leapingClock())
	for _, tt := range []struct {
		name, peer, proto string
		secure            bool
	}{
		{"trusted proxy, https", proxyPeer, "https", true},
		{"trusted proxy, HTTPS, http appended by the next proxy", proxyPeer, "HTTPS, http", true},
		{"trusted proxy, http", proxyPeer, "http", false},
		{"trusted proxy, no header", proxyPeer, "", false},
		{"untrusted peer, https", untrustedPeer, "https", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			get := httptest.NewRequest(http.MethodGet, "/login", nil)
			if tt.proto != "" {
				get.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			w := serve(con, get, tt.peer)
			form := formField.FindStringSubmatch(w.Body.String())
			if form == nil {
				t.Fatalf("no login form:\n%s", w.Body.String())
			}
			post := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"form": {form[1]}, "token": {token}}.Encode()))
			post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			post.AddCookie(&http.Cookie{Name: "touba_console_login", Value: form[1]})
			if tt.proto != "" {
				post.Header.Set("X-Forwarded-Proto", tt.proto)
			}
			w2 := serve(con, post, tt.peer)
			if w2.Code != http.StatusSeeOther {
				t.Fatalf("login: %d, want 303", w2.Code)
			}
			cookies := append(w.Result().Cookies(), w2.Result().Cookies()...)
			var session bool
			for _, ck := range cookies {
				session = session || ck.Name == "touba_console" && ck.MaxAge > 0
				if ck.Secure != tt.secure {
					t.Errorf("cookie %s Secure=%v, want %v", ck.Name, ck.Secure, tt.secure)
				}
			}
			if !session {
				t.Fatalf("no session cookie set: %v", cookies)
			}
		})
	}
}
