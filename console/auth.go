package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/forwarded"
)

// Cookie names: the session, and the login form's double-submit token
// (the login POST has no session yet to hold a CSRF token).
const (
	sessionCookie = "touba_console"
	loginCookie   = "touba_console_login"
	sessionTTL    = 12 * time.Hour
	maxSessions   = 256
)

var errCSRF = touba.Errorf(touba.EConsoleCSRFInvalid, "the form's CSRF token is missing or not this session's; reload the page and try again")

// auth checks the token and keeps the login sessions. Secrets are kept
// and looked up as SHA-256 digests: comparing digests of equal length
// in constant time leaks neither the token's content nor its length, and
// a session is found by the digest of its cookie, never by the cookie.
type auth struct {
	token    [32]byte
	guesses  *throttle // wrong tokens per client address
	trusted  []netip.Prefix
	mu       sync.Mutex
	sessions map[[32]byte]*loginSession
}

// loginSession is one browser logged in with the token.
type loginSession struct {
	csrf    string
	expires time.Time
}

// csrfOK compares a form's CSRF token with the session's, in constant
// time.
func (s *loginSession) csrfOK(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) == 1 && got != ""
}

func newAuth(token []byte, now func() time.Time, trusted []netip.Prefix) (*auth, error) {
	if len(token) == 0 {
		return nil, touba.Errorf(touba.EConsoleTokenRequired, "the console needs a token")
	}
	return &auth{token: sha256.Sum256(token), guesses: newThrottle(now, throttleEntries), trusted: trusted,
		sessions: map[[32]byte]*loginSession{}}, nil
}

// guess compares a presented token, unless its client address is
// throttled: then wait says for how long, and the token is not compared.
// failures counts the address's wrong tokens so far. The client address is
// the one a trusted proxy forwards (forwarded.ClientAddr), so behind a
// proxy one guesser is throttled, not everyone the proxy serves.
func (a *auth) guess(r *http.Request, tok string, isToken bool) (ok bool, wait time.Duration, failures int) {
	key := throttleKey(forwarded.ClientAddr(r, a.trusted))
	return a.guesses.Attempt(key, func() bool { return isToken && a.tokenOK(tok) })
}

// tokenOK compares a presented token with the console's, in constant time.
func (a *auth) tokenOK(got string) bool {
	d := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(d[:], a.token[:]) == 1
}

// check names who asks ("bearer token" or "session"), or "" when the
// request proves nothing; the session is nil under a bearer token. An
// Authorization header is a guess at the token, throttled by address: wait
// is how long the address is refused, and failures its wrong tokens. A
// session cookie is not throttled: it is 256 random bits, and an
// operator's session must keep working behind a proxy that someone else
// guesses through.
func (a *auth) check(r *http.Request) (who string, sess *loginSession, wait time.Duration, failures int) {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, isBearer := strings.CutPrefix(h, "Bearer ")
		ok, wait, failures := a.guess(r, tok, isBearer)
		if ok {
			return "bearer token", nil, 0, 0
		}
		return "", nil, wait, failures
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", nil, 0, 0
	}
	key := sha256.Sum256([]byte(ck.Value))
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[key]
	if s == nil {
		return "", nil, 0, 0
	}
	if time.Now().After(s.expires) {
		delete(a.sessions, key)
		return "", nil, 0, 0
	}
	return "session", s, 0, 0
}

// start opens a session and returns its cookie value.
func (a *auth) start() string {
	id := randomHex()
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for k, s := range a.sessions {
		if now.After(s.expires) {
			delete(a.sessions, k)
		}
	}
	if len(a.sessions) >= maxSessions {
		// Bounded: drop the session closest to expiry, the oldest.
		var oldest [32]byte
		var at time.Time
		for k, s := range a.sessions {
			if at.IsZero() || s.expires.Before(at) {
				oldest, at = k, s.expires
			}
		}
		delete(a.sessions, oldest)
	}
	a.sessions[sha256.Sum256([]byte(id))] = &loginSession{csrf: randomHex(), expires: now.Add(sessionTTL)}
	return id
}

func (a *auth) end(r *http.Request) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		a.mu.Lock()
		delete(a.sessions, sha256.Sum256([]byte(ck.Value)))
		a.mu.Unlock()
	}
}

func randomHex() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

// cookie is one of the console's cookies: Secure when the browser reached
// the console over HTTPS, the daemon's own TLS or a trusted proxy's
// (X-Forwarded-Proto: https from a peer of --trusted-proxies).
func (c *Console) cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: forwarded.HTTPS(r, c.auth.trusted)}
}

// loginPage shows the login form (GET /login).
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.showLogin(w, r, http.StatusOK, r.URL.Query().Get("next"), "")
}

// unauthorized answers 401 with the login page, to come back to this page.
func (c *Console) unauthorized(w http.ResponseWriter, r *http.Request, msg string) {
	next := "/"
	if r.Method == http.MethodGet {
		next = r.URL.RequestURI()
	}
	c.showLogin(w, r, http.StatusUnauthorized, next, msg)
}

func (c *Console) showLogin(w http.ResponseWriter, r *http.Request, status int, next, msg string) {
	// One form token per browser while it logs in: a page loaded in
	// another tab (or a stray request) must not invalidate the form shown.
	form := ""
	if ck, err := r.Cookie(loginCookie); err == nil && len(ck.Value) == 64 {
		form = ck.Value
	} else {
		form = randomHex()
	}
	http.SetCookie(w, c.cookie(r, loginCookie, form, 600))
	w.Header().Set("WWW-Authenticate", `Bearer realm="touba-trigger console"`)
	c.render(w, r, status, "login", map[string]any{"Next": safeNext(next), "Form": form, "Message": msg})
}

// login checks the token of the login form and opens a session (POST
// /login).
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(loginCookie)
	form := r.PostFormValue("form")
	if err != nil || form == "" || subtle.ConstantTimeCompare([]byte(ck.Value), []byte(form)) != 1 {
		_, text := errText(errCSRF)
		c.showLogin(w, r, http.StatusForbidden, r.PostFormValue("next"), text)
		return
	}
	ok, wait, failures := c.auth.guess(r, r.PostFormValue("token"), true)
	if wait > 0 {
		c.throttled(w, r, r.PostFormValue("next"), wait)
		return
	}
	if !ok {
		c.wrongToken(r, "login", failures)
		c.showLogin(w, r, http.StatusUnauthorized, r.PostFormValue("next"), touba.EConsoleUnauthorized+": wrong token")
		return
	}
	http.SetCookie(w, c.cookie(r, loginCookie, "", -1))
	http.SetCookie(w, c.cookie(r, sessionCookie, c.auth.start(), int(sessionTTL/time.Second)))
	c.log.Info().Str("remote_addr", r.RemoteAddr).Str("client_addr", forwarded.ClientAddr(r, c.auth.trusted).String()).Msg("console login")
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// logout ends the session (POST /logout, CSRF checked by ServeHTTP).
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	c.auth.end(r)
	http.SetCookie(w, c.cookie(r, sessionCookie, "", -1))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// throttled answers a request from an address refused for wait: 429,
// Retry-After, and the login page saying so (to come back to next).
func (c *Console) throttled(w http.ResponseWriter, r *http.Request, next string, wait time.Duration) {
	secs := int64((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	c.showLogin(w, r, http.StatusTooManyRequests, next, fmt.Sprintf(
		"%s: too many wrong tokens from this address; try again in %d s", touba.EConsoleThrottled, max(secs, 1)))
}

// wrongToken logs a refused token; from the first failure that blocks the
// address on, it says so.
func (c *Console) wrongToken(r *http.Request, via string, failures int) {
	ev := c.log.Warn().Str("remote_addr", r.RemoteAddr).Str("client_addr", forwarded.ClientAddr(r, c.auth.trusted).String()).Str("via", via).Int("failures", failures)
	if failures > freeFailures {
		ev.Msg("console token refused: wrong token; address throttled")
		return
	}
	ev.Msg("console token refused: wrong token")
}

// safeNext keeps a redirect on this console: a path that starts with a
// single "/", with no scheme or host however a browser reads it, or else
// the overview. Browsers drop tabs and newlines from a URL and read "\" as
// "/", so "/\t/evil.example" and "/\\evil.example" would go to
// evil.example: any control byte or backslash is refused, as is a path
// whose decoded form starts with "//" ("/%2f/x"), in case a proxy or a
// later redirect decodes it.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || hostileByte(next) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") || hostileByte(u.Path) {
		return "/"
	}
	return next
}

// hostileByte tells whether s holds a control byte (< 0x20, or 0x7f) or a
// backslash.
func hostileByte(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b == 0x7f || b == '\\' {
			return true
		}
	}
	return false
}

// errText is err's public code and message, "Code: message".
func errText(err error) (code, text string) {
	var te *touba.Error
	if errors.As(err, &te) {
		return te.Code, te.Code + ": " + te.Message
	}
	return touba.EINTERNAL, touba.EINTERNAL + ": " + err.Error()
}
