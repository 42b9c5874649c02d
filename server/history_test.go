package server_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// quickstart is the example program: one step, an accounting_stub
// external write (so every run journals an effect).
func quickstart(t *testing.T) (program, manifest string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	return filepath.Join(ex, "program.air.json"), filepath.Join(ex, "touba.manifest.json")
}

const invoice = "/triggers/examples.billing/Invoice"

// TestHistoryOverHTTP runs the daemon with a short --history: an exact
// redelivery within the window is answered 200 consumed; once the loop
// forgot the entry (and its effect), the same delivery is a new 202
// entry. The metrics and the admin API report the storage.
func TestHistoryOverHTTP(t *testing.T) {
	dir := t.TempDir()
	prog, man := quickstart(t)
	window := 3 * time.Second
	s := testkit.StartServer(t, server.Config{Program: prog, Manifest: man, Workers: 2, History: window,
		Queue: filepath.Join(dir, "q.sqlite"), State: filepath.Join(dir, "s.sqlite"), Journal: filepath.Join(dir, "j.sqlite"),
		MetricsListen: "127.0.0.1:0", AdminSocket: filepath.Join(dir, "admin.sock")})
	url := s.URL() + invoice
	code, first := testkit.Post(t, url, "ev-1", `{"amount":1}`)
	if code != http.StatusAccepted {
		t.Fatalf("first delivery: %d", code)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		code, id := testkit.Post(t, url, "ev-1", `{"amount":1}`)
		return code == http.StatusOK && id == first
	}, "the entry to run, and its redelivery to be answered 200 consumed")
	var again string
	testkit.WaitFor(t, window+10*time.Second, func() bool {
		code, again = testkit.Post(t, url, "ev-1", `{"amount":1}`)
		return code == http.StatusAccepted
	}, "the entry to be forgotten, and the redelivery to be a new 202")
	if again == first {
		t.Fatalf("redelivery past --history answered 202 with the forgotten queue id %s", first)
	}
	s.WaitLog(`"message":"forgot what is past --history"`, 5*time.Second)

	c, err := admin.Dial(filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := c.Storage(context.Background(), admin.StorageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Backend != "sqlite" || len(rep.Sizes) != 3 || rep.History != window || rep.LastPass == nil {
		t.Fatalf("storage report: %+v", rep)
	}
	for _, f := range rep.Sizes {
		if f.Kind != "file" || f.Bytes <= 0 || f.Path == "" {
			t.Fatalf("file %+v: want a file with its size and path", f)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		resp, err := http.Get(s.MetricsURL() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := string(b)
		return strings.Contains(m, `touba_storage_bytes{file="queue"}`) && strings.Contains(m, `touba_storage_bytes{file="journal"}`) &&
			strings.Contains(m, "touba_oldest_entry_age_seconds ") && strings.Contains(m, "touba_history_seconds 3") &&
			strings.Contains(m, "touba_history_forgotten_entries_total 1")
	}, "the storage metrics")
}
