package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite"
)

// TestOverviewShowsStorage (SPEC §8.1): the overview shows the window,
// the size of each file and the age of the oldest finished entry from the
// daemon's last measure.
func TestOverviewShowsStorage(t *testing.T) {
	f := newFixture(t, 50)
	f.entry(t, "trigger:t", "e1", `{}`, touba.StatusDone)
	h := &sqlite.History{Queue: f.q, State: f.st, Journal: f.j}
	rep, err := h.Storage(context.Background(), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.svc.HistoryWindow = 90 * 24 * time.Hour
	f.svc.StorageCache = func() *touba.StorageReport { return rep }
	b := f.login(t)
	_, body := b.get("/")
	for _, want := range []string{`id="storage"`, "90d (2160h0m0s)", `id="oldest-finished"`, "<td>queue", "<td>journal", "KiB", "The next pass forgets 0 entries"} {
		if !strings.Contains(body, want) {
			t.Fatalf("overview lacks %q:\n%s", want, body)
		}
	}
}
