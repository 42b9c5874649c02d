package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestTimeZoneChoice: times are UTC until the operator picks a zone; then
// every page shows them in it, with its abbreviation and offset; a name
// that is not a zone (or a path) is refused and changes nothing.
func TestTimeZoneChoice(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusFailed)
	b := f.login(t)
	_, body := b.get("/entries/" + q)
	if !strings.Contains(body, "Z from 192.0.2.7") || !strings.Contains(body, `name="tz" value="UTC"`) {
		t.Fatalf("default: times not in UTC:\n%s", body)
	}
	resp, _ := b.get("/prefs?tz=" + url.QueryEscape("Asia/Tokyo") + "&back=" + url.QueryEscape("/entries/"+q))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/entries/"+q {
		t.Fatalf("set the zone: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body = b.get("/entries/" + q)
	if !strings.Contains(body, "JST (&#43;09:00) from 192.0.2.7") || strings.Contains(body, "Z from") || !strings.Contains(body, `value="Asia/Tokyo"`) {
		t.Fatalf("after choosing Asia/Tokyo:\n%s", body)
	}
	for _, bad := range []string{"Not/AZone", "../../etc/passwd", "/etc/localtime"} {
		resp, body := b.get("/prefs?tz=" + url.QueryEscape(bad))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "BadRequest: time zone") {
			t.Fatalf("tz %q: %d\n%s", bad, resp.StatusCode, body)
		}
	}
	if _, body := b.get("/entries/" + q); !strings.Contains(body, "JST (&#43;09:00)") {
		t.Fatal("a refused zone changed the one in force")
	}
	// A hostile back is not followed off the console.
	if resp, _ := b.get("/prefs?tz=UTC&back=" + url.QueryEscape("//evil.example/")); resp.Header.Get("Location") != "/" {
		t.Fatalf("back to %q", resp.Header.Get("Location"))
	}
}

// TestOverviewRefreshes: the overview reloads itself (no JavaScript
// needed); the pages with forms do not, so nothing typed is lost.
func TestOverviewRefreshes(t *testing.T) {
	f := newFixture(t, 50)
	b := f.login(t)
	if _, body := b.get("/"); !strings.Contains(body, `<meta http-equiv="refresh" content="15">`) {
		t.Fatalf("the overview does not refresh:\n%s", body)
	}
	for _, p := range []string{"/parked", "/entries", "/deliveries", "/triggers"} {
		if _, body := b.get(p); strings.Contains(body, `http-equiv="refresh"`) {
			t.Errorf("%s refreshes itself", p)
		}
	}
}

// TestZoneFromAResultPage (issue 37): the zone form of a POST's result
// page comes back to the action's page, and a GET of an action's address
// (that way back, or a reload) is sent to that page instead of a 405.
func TestZoneFromAResultPage(t *testing.T) {
	f := newFixture(t, 50)
	q := f.entry(t, "trigger:t", "e1", `{}`, touba.StatusFailed)
	b := f.login(t)
	resp, body := b.action("/entries/"+q+"/replay", url.Values{"reason": {"zone test"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="back" value="/entries/`+q+`"`) {
		t.Fatalf("replay result page: %d, its zone form does not come back to the entry:\n%s", resp.StatusCode, body)
	}
	for action, page := range map[string]string{
		"/entries/" + q + "/replay":              "/entries/" + q,
		"/effects/" + q + "/" + q + ":s/resolve": "/effects/" + q + "/" + q + ":s",
		"/triggers/pause":                        "/triggers",
		"/entries/replay":                        "/entries",
	} {
		resp, body := b.get(action)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != page {
			t.Errorf("GET %s: %d to %q, want 303 to %s\n%s", action, resp.StatusCode, resp.Header.Get("Location"), page, body)
		}
	}
}
