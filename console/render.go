package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
)

// The pages, each parsed with the layout.
var pageNames = []string{"login", "overview", "parked", "entries", "entry", "effect", "deliveries", "delivery", "result", "error", "confirm", "triggers", "triggertest"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ago":         ago,
		"at":          func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
		"oneline":     oneline,
		"json":        prettyJSON,
		"path":        url.PathEscape,
		"query":       url.QueryEscape,
		"stepOf":      stepOf,
		"shortDigest": admin.ShortDigest,
		"count":       count,
		// gatherPlace is a merged delivery's place in its gathering: 2 for the
		// first merged (index 0), the carrier being 1.
		"gatherPlace": func(i int) int { return i + 2 },
		"bytes":       admin.HumanBytes,
		"window":      window,
		"ref":         breakableRef,
		"routeWhyNot": admin.RouteWhyNot,
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// view is what every page's layout reads.
type view struct {
	Title string
	CSRF  string // "" under a bearer token: no form needs one
	Now   time.Time
	Data  any
	// Zone is the time zone the page shows times in (prefs.go); Path the
	// page's own path, where the zone form comes back to.
	Zone, Path string
	zone       *time.Location
	// Refresh, when positive, reloads the page every that many seconds
	// (the overview: without a line of JavaScript).
	Refresh int
}

// At shows t in the page's time zone: {{$.At .ReceivedAt}}.
func (v view) At(t time.Time) string { return formatAt(t, v.zone) }

// overviewRefresh is how often the overview reloads itself, in seconds.
const overviewRefresh = 15

// render runs a page into a buffer, makes every control and bidi
// character in it visible, and only then writes it: a template error
// never leaves half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	zone := zoneOf(r)
	v := view{Title: page, Now: c.now(), Data: data, zone: zone, Zone: zone.String(), Path: r.URL.Path}
	if r.Method != http.MethodGet {
		// A POST's result: the zone form comes back to the action's page.
		v.Path = pageOf(r.URL.Path)
	}
	if page == "overview" {
		v.Refresh = overviewRefresh
	}
	if s := sessionOf(r); s != nil {
		v.CSRF = s.csrf
	}
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, v); err != nil {
		c.log.Error().Err(err).Str("page", page).Msg("console page failed")
		http.Error(w, touba.EINTERNAL+": the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(visible(buf.Bytes(), false))
}

// fail shows a refusal or an error with its public code, with the HTTP
// status of the one code table.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, err error) {
	code, text := errText(err)
	if code == touba.EINTERNAL {
		c.log.Error().Err(err).Str("path", r.URL.Path).Msg("console request failed")
	}
	back := r.URL.Path
	if r.Method == http.MethodPost {
		// An action's path is its page's plus a verb (/entries/ID/replay,
		// /entries/replay): Back goes to the page, which a GET can show.
		back = path.Dir(back)
	}
	c.render(w, r, touba.HTTPStatus(code), "error", map[string]any{"Code": code, "Text": text, "Back": back,
		"Post": r.Method == http.MethodPost})
}

// visible replaces every control character (but tab and newline, and CR
// unless oneLine), every Unicode format character (bidi overrides and
// isolates, zero-width marks, BOM), line and paragraph separators and
// every invalid UTF-8 byte with an ASCII escape, so text a sender chose
// cannot reorder, hide or break what the page shows around it. It runs on
// the whole rendered page: the templates hold no such character, and the
// escape is plain ASCII, harmless in text and in attributes alike.
func visible(b []byte, oneLine bool) []byte {
	clean := true
	for _, c := range b {
		if c < 0x20 && c != '\n' && c != '\t' || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean && !oneLine {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n == 1:
			out = fmt.Appendf(out, `\x%02x`, b[0])
		case oneLine && (r == '\n' || r == '\t'):
			out = fmt.Appendf(out, `\u%04x`, r)
		case r == '\n' || r == '\t':
			out = append(out, b[:n]...)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// oneline shows a one-line value (a header, an event id) with its line
// breaks and tabs visible too.
func oneline(s string) string { return string(visible([]byte(s), true)) }

// prettyJSON indents stored JSON for reading; text that is not JSON is
// shown as it is.
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// ago says how long ago t was, for a human.
func ago(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

// window shows --history: in days when whole days, else as Go prints it.
func window(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 (keeps everything)"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd (%s)", d/(24*time.Hour), d)
	}
	return d.String()
}

// stepOf is the step id an effect id names ("<queue_id>:<step>", or
// "<queue_id>:<step>#<n>" after a resume with new effects).
func stepOf(scope, effectID string) string {
	if s, ok := touba.StepOfEffect(scope, effectID); ok {
		return s
	}
	return effectID
}

// count is n with the noun that agrees with it: "1 entry", "2 entries".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// breakableRef shows a trigger or tool ref that may wrap after each "/"
// (never inside a name), so a listing's long refs take less width.
func breakableRef(s string) template.HTML {
	parts := strings.Split(s, "/")
	for i, p := range parts {
		parts[i] = template.HTMLEscapeString(string(visible([]byte(p), true)))
	}
	return template.HTML(strings.Join(parts, "/<wbr>"))
}
