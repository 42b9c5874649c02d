package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/server"
)

// pgWait bounds every wait here: generous, for -race on a loaded machine.
const pgWait = 60 * time.Second

// startPG runs one in-process node of the quickstart example on dsn.
func startPG(t *testing.T, dsn, node string, workers int) *testkit.Server {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	return testkit.StartServer(t, server.Config{Program: filepath.Join(ex, "program.air.json"),
		Manifest: filepath.Join(ex, "touba.manifest.json"), Database: dsn, NodeID: node, Workers: workers,
		MetricsListen: "127.0.0.1:0"})
}

// post sends one delivery and returns the status, its Retry-After and the
// queue id named; a transport error fails the test.
func post(t *testing.T, base, eventID string) (int, string, string) {
	req, _ := http.NewRequest(http.MethodPost, base+"/triggers/examples.billing/Invoice", strings.NewReader(`{"amount":1}`))
	req.Header.Set("x-touba-event-id", eventID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("post %s: %v", eventID, err)
		return 0, "", ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	qid := ""
	if i := strings.Index(string(b), `"queue_id":"`); i >= 0 {
		qid = string(b[i+len(`"queue_id":"`):])
		qid = qid[:strings.IndexByte(qid, '"')]
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), qid
}

func readyz(base string) int {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// statuses reads every entry's status by queue id (and its event id).
func statuses(t *testing.T, dsn string) map[string][2]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT queue_id, event_id, status FROM touba.entries`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for rows.Next() {
		var q, ev, st string
		if err := rows.Scan(&q, &ev, &st); err != nil {
			t.Fatal(err)
		}
		out[q] = [2]string{ev, st}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// SPEC §8: while the database is down, intake answers 503 with
// Retry-After and never 202, /readyz fails and the dispatcher pauses;
// after PostgreSQL comes back, all of it resumes without anyone's help,
// and the entry acknowledged before the outage is run.
func TestDatabaseDownThenBack(t *testing.T) {
	c := pgtest.Own(t)
	dsn := c.NewDB(t)
	s := startPG(t, dsn, "node-a", 2)
	if st, _, _ := post(t, s.URL(), "before"); st != http.StatusAccepted {
		t.Fatalf("post before the outage: %d", st)
	}
	testkit.WaitFor(t, pgWait, func() bool { return readyz(s.URL()) == http.StatusOK }, "/readyz to pass")

	c.Stop()
	testkit.WaitFor(t, pgWait, func() bool { return readyz(s.URL()) == http.StatusServiceUnavailable }, "/readyz to fail with the database down")
	for i := range 20 {
		st, after, _ := post(t, s.URL(), fmt.Sprintf("down-%d", i))
		if st != http.StatusServiceUnavailable || after == "" {
			t.Fatalf("post with the database down: status %d, Retry-After %q; want 503 with Retry-After", st, after)
		}
	}

	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, pgWait, func() bool { return readyz(s.URL()) == http.StatusOK }, "/readyz to pass again")
	var after string
	testkit.WaitFor(t, pgWait, func() bool {
		st, _, q := post(t, s.URL(), "after")
		after = q
		return st == http.StatusAccepted
	}, "intake to answer 202 again")
	testkit.WaitFor(t, pgWait, func() bool {
		all := statuses(t, dsn)
		return len(all) == 2 && all[after][1] == "done" && countStatus(all, "done") == 2
	}, "both entries run to done by the resumed dispatcher")
	for _, e := range statuses(t, dsn) {
		if strings.HasPrefix(e[0], "down-") {
			t.Fatalf("an entry %s refused with 503 is in the database", e[0])
		}
	}
}

func countStatus(all map[string][2]string, status string) int {
	n := 0
	for _, e := range all {
		if e[1] == status {
			n++
		}
	}
	return n
}

// SPEC §8 and §3.1: PostgreSQL restarted (fast shutdown: every session cut)
// while eight senders post to two nodes: every delivery answered 202 is in
// the database afterwards under the queue id it was given, and every other
// answer was 503 with Retry-After.
func TestPostgresRestartUnderLoad(t *testing.T) {
	c := pgtest.Own(t)
	dsn := c.NewDB(t)
	nodes := []*testkit.Server{startPG(t, dsn, "node-a", 0), startPG(t, dsn, "node-b", 0)}

	type result struct{ eventID, queueID string }
	var (
		mu       sync.Mutex
		accepted []result
		refused  atomic.Int64
		okAfter  atomic.Int64 // 202s after the restart
		restart  atomic.Bool
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				ev := fmt.Sprintf("s%d-%d", g, i)
				st, after, q := post(t, nodes[i%2].URL(), ev)
				switch {
				case st == http.StatusAccepted && q != "":
					mu.Lock()
					accepted = append(accepted, result{ev, q})
					mu.Unlock()
					if restart.Load() {
						okAfter.Add(1)
					}
				case st == http.StatusServiceUnavailable && after != "":
					refused.Add(1)
				default:
					t.Errorf("post %s: status %d (Retry-After %q, queue id %q); want 202 or 503 with Retry-After", ev, st, after, q)
					return
				}
			}
		}()
	}
	acceptedN := func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) }
	testkit.WaitFor(t, pgWait, func() bool { return acceptedN() >= 100 }, "100 deliveries accepted before the restart")
	c.Stop()
	testkit.WaitFor(t, pgWait, func() bool { return refused.Load() >= 20 }, "20 deliveries refused while the database is down")
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	restart.Store(true)
	testkit.WaitFor(t, pgWait, func() bool { return okAfter.Load() >= 100 }, "100 deliveries accepted after the restart")
	stop.Store(true)
	wg.Wait()

	all := statuses(t, dsn)
	mu.Lock()
	defer mu.Unlock()
	for _, a := range accepted {
		if e, ok := all[a.queueID]; !ok || e[0] != a.eventID {
			t.Errorf("%s answered 202 with queue id %s, which the database holds as %v", a.eventID, a.queueID, e)
		}
	}
	t.Logf("%d accepted (all in the database), %d refused with 503, %d rows", len(accepted), refused.Load(), len(all))
}

// SPEC §8: each node's metrics carry its --node-id, so the series of
// several nodes never merge.
func TestMetricsCarryNodeID(t *testing.T) {
	s := startPG(t, pgtest.New(t), "node-metrics", 0)
	if st, _, _ := post(t, s.URL(), "m-1"); st != http.StatusAccepted {
		t.Fatalf("post: %d", st)
	}
	resp, err := http.Get(s.MetricsURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "touba_") {
			continue
		}
		n++
		if !strings.Contains(line, `node_id="node-metrics"`) {
			t.Errorf("metric without node_id=\"node-metrics\": %s", line)
		}
	}
	if n == 0 || !strings.Contains(string(b), "touba_") {
		t.Fatalf("no touba_ metric exposed:\n%s", b)
	}
}
