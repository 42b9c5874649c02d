package console

import (
	"net/http"
	"strings"
	"time"
)

// The operator's time zone: times are stored and shown in UTC unless the
// operator picks another zone (GET /prefs?tz=Europe/Paris), kept in a
// cookie of its own for a year. It is a display preference, not a secret,
// so it is not tied to the session; the zone is looked up in the Go
// standard library's database (tzdata is embedded in the binary).

const tzCookie = "touba_console_tz"

// zoneOf is the zone the request's pages show times in; UTC by default,
// and when the cookie names no zone the library knows.
func zoneOf(r *http.Request) *time.Location {
	if c, err := r.Cookie(tzCookie); err == nil {
		if loc, err := loadZone(c.Value); err == nil {
			return loc
		}
	}
	return time.UTC
}

// loadZone is time.LoadLocation for IANA names only: never a file path.
func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if strings.ContainsAny(name, `\.`) && !strings.HasPrefix(name, "Etc/") || strings.HasPrefix(name, "/") || len(name) > 64 {
		return nil, errZone
	}
	return time.LoadLocation(name)
}

var errZone = &zoneError{}

type zoneError struct{}

func (*zoneError) Error() string { return "not a time zone name" }

// prefs: GET /prefs?tz=NAME&back=PATH sets the zone and goes back.
func (c *Console) prefs(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.URL.Query().Get("tz"))
	loc, err := loadZone(name)
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "error", map[string]any{
			"Text": "BadRequest: time zone " + oneline(name) + ": want an IANA name such as Europe/Paris, or UTC",
			"Back": "/"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tzCookie, Value: loc.String(), Path: "/", MaxAge: 365 * 24 * 3600,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, safeNext(r.URL.Query().Get("back")), http.StatusSeeOther)
}

// formatAt shows t in loc: "Z" for UTC, as stored; the zone's
// abbreviation and offset otherwise, so a reader never guesses.
func formatAt(t time.Time, loc *time.Location) string {
	if loc == time.UTC {
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	}
	return t.In(loc).Format("2006-01-02 15:04:05.000 MST (-07:00)")
}
