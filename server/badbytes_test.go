package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
	"github.com/touba/touba-trigger/sqlite/state"
)

// badPaths name no trigger with bytes a PostgreSQL text column refuses
// once decoded: NUL, and bytes that are not UTF-8.
var badPaths = []string{"%00", "%ff", "x%c3%28", "%ed%a0%80", "a%00%ff%fe"}

// TestBadBytesCostNoLogRow sends, through the real HTTP intake of a daemon
// on each backend, requests whose path decodes to NUL or invalid UTF-8
// and a header value that is not UTF-8, in among 200 ordinary rejections
// that land in the same log batches: every one of them is in the delivery
// log afterwards, the bad ones with U+FFFD in place of the bytes.
func TestBadBytesCostNoLogRow(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	cfg := server.Config{Program: filepath.Join(ex, "program.air.json"), Manifest: filepath.Join(ex, "touba.manifest.json")}
	t.Run("SQLite", func(t *testing.T) {
		dir := t.TempDir()
		c := cfg
		c.Queue, c.State, c.Journal = filepath.Join(dir, "queue.sqlite"), filepath.Join(dir, "state.sqlite"), filepath.Join(dir, "journal.sqlite")
		s := testkit.StartServer(t, c)
		sendBadBytes(t, s.URL())
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		st, err := state.Open(context.Background(), c.State, state.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rows, err := st.Deliveries(context.Background(), touba.LogFilter{Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		var got []logRow
		for _, r := range rows {
			hdr := ""
			for k, v := range r.Headers {
				hdr += k + v
			}
			got = append(got, logRow{r.TriggerRef, r.ErrorCode, hdr})
		}
		checkBadBytesRows(t, got)
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		dsn := pgtest.New(t)
		c := cfg
		c.Database, c.NodeID = dsn, "node-bad-bytes"
		s := testkit.StartServer(t, c)
		sendBadBytes(t, s.URL())
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		rs, err := conn.Query(context.Background(), `SELECT trigger_ref, error_code, headers FROM touba.deliveries`)
		if err != nil {
			t.Fatal(err)
		}
		var got []logRow
		for rs.Next() {
			var r logRow
			var hdr string
			if err := rs.Scan(&r.ref, &r.code, &hdr); err != nil {
				t.Fatal(err)
			}
			var h map[string]string
			if err := json.Unmarshal([]byte(hdr), &h); err != nil {
				t.Fatalf("headers %q: %v", hdr, err)
			}
			for k, v := range h {
				r.headers += k + v
			}
			got = append(got, r)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		checkBadBytesRows(t, got)
	})
}

type logRow struct{ ref, code, headers string }

// sendBadBytes sends the bad paths and a duplicate with a header value
// that is not UTF-8, at once with 200 requests for unknown triggers.
func sendBadBytes(t *testing.T, base string) {
	t.Helper()
	if status, _ := testkit.Post(t, base+"/triggers/examples.billing/Invoice", "dup-1", `{"amount":1}`); status != 202 {
		t.Fatalf("first delivery: %d", status)
	}
	var wg sync.WaitGroup
	do := func(path string, hdr map[string]string) {
		defer wg.Done()
		req, err := http.NewRequest(http.MethodPost, base+"/triggers/"+path, strings.NewReader(`{"amount":1}`))
		if err != nil {
			t.Error(err)
			return
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	for i := range 200 {
		wg.Add(1)
		go do(fmt.Sprintf("nope-%03d", i), nil)
		if i%40 == 20 {
			for _, p := range badPaths {
				wg.Add(1)
				go do(p, nil)
			}
			wg.Add(1)
			go do("examples.billing/Invoice", map[string]string{"x-touba-event-id": "dup-1", "X-Note": "caf\xe9\xff"})
		}
	}
	wg.Wait()
}

func checkBadBytesRows(t *testing.T, rows []logRow) {
	t.Helper()
	nope, bad, dups := 0, 0, 0
	for _, r := range rows {
		if !utf8.ValidString(r.ref) || strings.ContainsRune(r.ref, 0) || !utf8.ValidString(r.headers) {
			t.Errorf("row %q stored bytes that are not text", r.ref)
		}
		switch {
		case strings.HasPrefix(r.ref, "trigger:nope-"):
			nope++
		case r.ref == "trigger:examples.billing/Invoice":
			dups++
			if !strings.Contains(r.headers, "caf\uFFFD") {
				t.Errorf("duplicate's headers %q: want the value with U+FFFD", r.headers)
			}
		case strings.ContainsRune(r.ref, utf8.RuneError):
			bad++
		}
	}
	wantBad := 5 * len(badPaths)
	if nope != 200 || bad != wantBad || dups != 5 {
		t.Fatalf("log holds %d of 200 ordinary rows, %d of %d with bad bytes, %d of 5 duplicates (%d rows in all)",
			nope, bad, wantBad, dups, len(rows))
	}
}
