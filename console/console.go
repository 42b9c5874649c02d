// Package console is the operator console of SPEC §6.1: server-rendered
// HTML pages (html/template, CSS and a few lines of JavaScript embedded in
// the binary, no build step, no CDN) over the same admin service as the
// CLI. It lists and shows entries, parked runs, unknown effects and the
// delivery log, and settles them: resolve an effect applied or not
// applied, replay entries and deliveries, resume an entry from a step,
// compensate.
//
// Every request needs the console's token, as "Authorization: Bearer
// TOKEN" or as a session cookie set by the login form; every other request
// gets 401 and the login page; wrong tokens are throttled per client
// address (429 with Retry-After, see throttle.go): the TCP peer's, or
// behind a proxy of --trusted-proxies the one it forwards. Every POST of a session
// carries the session's CSRF token. Every action goes through admin.Service, which
// records it in the audit trail with the operator "console: ...", and is
// refused with the same public codes as the CLI. Everything a sender
// controlled is escaped by html/template, and control and bidi characters
// are shown as \uXXXX so a body cannot spoof the page.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"html/template"
	"io/fs"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/admin"
)

// Service is what the console asks of the daemon: the admin API the CLI
// uses, plus the overview's counts. *admin.Service implements it.
type Service interface {
	admin.API
	Overview(ctx context.Context) (*admin.Overview, error)
	CanCompensate(toolRef string) bool
	EffectInput(ctx context.Context, scope, effectID string) (json.RawMessage, error)
}

var _ Service = (*admin.Service)(nil)

// Config is what New needs.
type Config struct {
	Service Service
	// Token is the secret every request must prove (SPEC §6.1).
	Token []byte
	Log   zerolog.Logger
	// PageSize is the rows of a listing page; default 50.
	PageSize int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// TrustedProxies are the peers (--trusted-proxies) whose
	// X-Forwarded-For names the client a wrong token is throttled by, and
	// whose X-Forwarded-Proto: https makes the cookies Secure.
	TrustedProxies []netip.Prefix
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Console is the console's HTTP handler.
type Console struct {
	svc      Service
	auth     *auth
	log      zerolog.Logger
	pageSize int
	now      func() time.Time
	pages    map[string]*template.Template
	mux      *http.ServeMux
}

// New builds the console. It refuses an empty token.
func New(c Config) (*Console, error) {
	if c.PageSize <= 0 {
		c.PageSize = 50
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	a, err := newAuth(c.Token, c.Now, c.TrustedProxies)
	if err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	con := &Console{svc: c.Service, auth: a, log: c.Log, pageSize: c.PageSize, now: c.Now, pages: pages,
		mux: http.NewServeMux()}
	con.routes()
	return con, nil
}

func (c *Console) routes() {
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /login", c.loginPage)
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.logout)
	c.mux.HandleFunc("GET /{$}", c.overview)
	c.mux.HandleFunc("GET /prefs", c.prefs)
	c.mux.HandleFunc("GET /parked", c.parked)
	c.mux.HandleFunc("GET /entries", c.entries)
	c.mux.HandleFunc("GET /entries/{id}", c.entry)
	c.mux.HandleFunc("POST /entries/{id}/replay", c.replayEntry)
	c.mux.HandleFunc("POST /entries/{id}/resume", c.resumeEntry)
	c.mux.HandleFunc("POST /entries/replay", c.replayBulk)
	c.mux.HandleFunc("GET /effects/{scope}/{effect}", c.effect)
	c.mux.HandleFunc("POST /effects/{scope}/{effect}/resolve", c.resolve)
	c.mux.HandleFunc("POST /effects/{scope}/{effect}/compensate", c.compensate)
	c.mux.HandleFunc("GET /deliveries", c.deliveries)
	c.mux.HandleFunc("GET /deliveries/{id}", c.delivery)
	c.mux.HandleFunc("POST /deliveries/{id}/replay", c.replayDelivery)
	c.mux.HandleFunc("GET /triggers", c.triggers)
	c.mux.HandleFunc("POST /triggers/pause", c.pauseTrigger)
	c.mux.HandleFunc("POST /triggers/resume", c.resumeTrigger)
	c.mux.HandleFunc("GET /triggers/test", c.triggerTest)
	c.mux.HandleFunc("POST /triggers/test", c.triggerTest)
	// A GET of an action's address (a result page reloaded, or the zone
	// form coming back to it) goes to the page the action belongs to,
	// not to a plain-text 405.
	for _, action := range []string{"/entries/{id}/replay", "/entries/{id}/resume", "/entries/replay",
		"/effects/{scope}/{effect}/resolve", "/effects/{scope}/{effect}/compensate", "/deliveries/{id}/replay",
		"/triggers/pause", "/triggers/resume", "/logout"} {
		c.mux.HandleFunc("GET "+action, pageOfAction)
	}
}

// pageOfAction redirects to the page of the action at r's path: the path
// without its last segment (the action's verb).
func pageOfAction(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, pageOf(r.URL.EscapedPath()), http.StatusSeeOther)
}

// pageOf is the page an action's path belongs to ("/" for a top one).
func pageOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// ServeHTTP sets the security headers on every answer, lets the login
// page and the static files through, and sends everything else through
// authentication (and CSRF for a session's POSTs) first.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No inline script or style anywhere: the pages load console.css and
	// console.js from /static, so 'self' is all they need.
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if r.URL.Path == "/favicon.ico" {
		// Browsers ask for it on every page; answered without a login
		// page, whose new form cookie would replace the one being used.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
		c.mux.ServeHTTP(w, r)
		return
	}
	who, sess, wait, failures := c.auth.check(r)
	if wait > 0 {
		next := "/"
		if r.Method == http.MethodGet {
			next = r.URL.RequestURI()
		}
		c.throttled(w, r, next, wait)
		return
	}
	if who == "" {
		if failures > 0 {
			c.wrongToken(r, "bearer", failures)
		}
		c.unauthorized(w, r, "")
		return
	}
	if r.Method == http.MethodPost && sess != nil && !sess.csrfOK(r.PostFormValue("csrf")) {
		c.fail(w, r, errCSRF)
		return
	}
	ctx := admin.WithOperator(r.Context(), "console: "+who+" from "+r.RemoteAddr)
	ctx = context.WithValue(ctx, sessionKey{}, sess)
	c.mux.ServeHTTP(w, r.WithContext(ctx))
}

type sessionKey struct{}

// sessionOf is the request's login session; nil under a bearer token.
func sessionOf(r *http.Request) *loginSession {
	s, _ := r.Context().Value(sessionKey{}).(*loginSession)
	return s
}
