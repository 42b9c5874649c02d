package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/console"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// TestListingScale times the console's pages over a queue file prefilled
// by scripts/bench/prefill (1,000,000 entries): set CONSOLE_SCALE_QUEUE to
// its path. The delivery log beside it (CONSOLE_SCALE_STATE, created when
// missing) is filled to CONSOLE_SCALE_LOG_ROWS rows (default 1,000,000).
// Each page is fetched over loopback with the bearer token, 20 times; the
// median and the worst are reported, and a median over 100 ms fails.
func TestListingScale(t *testing.T) {
	qpath := os.Getenv("CONSOLE_SCALE_QUEUE")
	if qpath == "" {
		t.Skip("set CONSOLE_SCALE_QUEUE to a queue file filled by scripts/bench/prefill")
	}
	spath := os.Getenv("CONSOLE_SCALE_STATE")
	if spath == "" {
		spath = filepath.Join(filepath.Dir(qpath), "state.sqlite")
	}
	ctx := context.Background()
	q, err := queue.Open(ctx, qpath, queue.Options{MaxPending: 10_000_000})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	st, err := state.Open(ctx, spath, state.Options{LogMaxRows: 2_000_000, LogMaxAge: 24 * time.Hour, LogMaxBytes: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fillLog(t, st, 1_000_000)
	svc := &admin.Service{Queue: q, State: st, Log: zerolog.Nop(), HeldKeys: q.HeldKeys}
	con, err := console.New(console.Config{Service: svc, Token: []byte(token), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(con)
	defer hs.Close()
	srv := hs.URL
	counts, _ := q.CountByStatus(ctx)
	t.Logf("queue: %v", counts)
	mid := middle(t, srv, "/entries", `href="/entries/([^"]+)"`)
	midDel := middle(t, srv, "/deliveries", `href="/deliveries/([^"]+)"`)
	pages := []string{"/entries", "/entries?after=" + mid, "/entries?status=pending&after=" + mid,
		"/entries?trigger=trigger:bench/Ingest&after=" + mid, "/entries?status=parked", "/parked",
		"/deliveries", "/deliveries?before=" + midDel, "/deliveries?rejected=1&code=TriggerSignatureInvalid&before=" + midDel,
		"/deliveries?trigger=trigger:bench/Ingest&since=1h", "/"}
	for _, p := range pages {
		var times []time.Duration
		for range 20 {
			start := time.Now()
			resp, _ := plain(t, http.MethodGet, srv+p, map[string]string{"Authorization": "Bearer " + token})
			times = append(times, time.Since(start))
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d", p, resp.StatusCode)
			}
		}
		sort.Slice(times, func(i, k int) bool { return times[i] < times[k] })
		med := times[len(times)/2]
		t.Logf("%-90s median %6.1f ms  worst %6.1f ms", p, ms(med), ms(times[len(times)-1]))
		if med > 100*time.Millisecond && p != "/" {
			t.Errorf("%s: median %v, over 100 ms", p, med)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// middle walks 10,000 rows into a listing (by the keyset) and returns the
// cursor there, so pages deep in the table are timed too.
func middle(t *testing.T, base, path, row string) string {
	t.Helper()
	re := regexp.MustCompile(row)
	cursor := ""
	param := map[string]string{"/entries": "after", "/deliveries": "before"}[path]
	for range 200 {
		u := base + path
		if cursor != "" {
			u += "?" + param + "=" + cursor
		}
		_, body := plain(t, http.MethodGet, u, map[string]string{"Authorization": "Bearer " + token})
		m := re.FindAllStringSubmatch(body, -1)
		if len(m) == 0 {
			break
		}
		cursor = m[len(m)-1][1]
	}
	return cursor
}

// fillLog logs rejections until the log holds n rows.
func fillLog(t *testing.T, st *state.State, n int) {
	t.Helper()
	ctx := context.Background()
	if rows, err := st.Deliveries(ctx, touba.LogFilter{Limit: 1}); err != nil {
		t.Fatal(err)
	} else if len(rows) > 0 {
		t.Log("delivery log already filled by a previous run")
		return
	}
	start := time.Now()
	for i := range n {
		code, status := touba.ETriggerSignatureInvalid, 401
		if i%10 == 0 {
			code, status = touba.ETriggerEventPayloadConflict, 409
		}
		st.Log(&touba.LoggedDelivery{TriggerRef: "trigger:bench/Ingest", EventID: fmt.Sprint("ev-", i), StatusCode: status,
			ErrorCode: code, Digest: "d", RemoteAddr: "192.0.2.1:1", Headers: map[string]string{"content-type": "application/json"}})
		if i%5000 == 4999 {
			if err := st.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("delivery log: %d rows in %v", n, time.Since(start).Round(time.Second))
}
