package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/trigger"
)

// /readyz answers from the last background check: it takes no file
// connection (this daemon has no queue at all: a probe that pinged it
// would panic) and tells a failing probe "not ready", never why (a path,
// free bytes).
func TestReadyzAnswersFromTheCachedCheck(t *testing.T) {
	d := &Server{}
	srv := httptest.NewServer((&trigger.Intake{}).Router(d.readyz))
	defer srv.Close()
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	d.health.Store(&admin.Health{Ready: false, Reason: "disk of /srv/touba/q.sqlite: 1048576 bytes free, under 16777216"})
	code, body := get()
	if code != http.StatusServiceUnavailable || strings.Contains(body, "/srv") || strings.Contains(body, "1048576") ||
		!strings.Contains(body, "not ready") {
		t.Fatalf("not ready: %d %s", code, body)
	}
	d.health.Store(&admin.Health{Ready: true})
	if code, body := get(); code != http.StatusOK || strings.TrimSpace(body) != `{"status":"ready"}` {
		t.Fatalf("ready: %d %s", code, body)
	}
}
