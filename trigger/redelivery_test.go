package trigger_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// backend opens a queue and a delivery log on one storage.
type backend func(t *testing.T) (touba.QueueStore, touba.DeliveryLog)

func sqliteBackend(t *testing.T) (touba.QueueStore, touba.DeliveryLog) {
	dir := t.TempDir()
	q, err := queue.Open(context.Background(), filepath.Join(dir, "q.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(context.Background(), filepath.Join(dir, "s.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(); st.Close() })
	return q, st
}

func postgresBackend(t *testing.T) (touba.QueueStore, touba.DeliveryLog) {
	dsn := pgtest.New(t) // skips, saying why, without PostgreSQL 15
	st, err := postgres.Open(context.Background(), postgres.Config{URL: dsn, NodeID: "node-1", Secrets: &secret.Set{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.Queue, st.State
}

// TestRedeliveryAnswers: on both backends, the exact redelivery of a
// consumed entry is answered 200 {"status": "consumed", "code":
// "TriggerReplayRejected"} naming the entry, and logged with status 200
// and that code (listed by `deliveries ls --rejected`); with redelivery
// "reject", 409 TriggerReplayRejected; a required id that is missing is
// 400 TriggerEventIdMissing. None of them makes an entry.
func TestRedeliveryAnswers(t *testing.T) {
	for name, open := range map[string]backend{"sqlite": sqliteBackend, "postgres": postgresBackend} {
		t.Run(name, func(t *testing.T) {
			q, log := open(t)
			p, err := trigger.ParseProgram("program.air.json", []byte(testProgram))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			observed := map[string]int{}
			in := &trigger.Intake{Queue: q, Log: log, Observe: func(ref, code string, status int) {
				mu.Lock()
				defer mu.Unlock()
				observed[fmt.Sprintf("%s %s %d", ref, code, status)]++
			}}
			in.SetConfig(&trigger.Config{Program: p, Verifiers: map[string]trigger.Verifier{}})
			srv := httptest.NewServer(in.Router(nil))
			t.Cleanup(srv.Close)
			f := &fixture{t: t, srv: srv}
			hdr := map[string]string{"X-Touba-Event-Id": "e1"}

			first := f.send("POST", "t/plain", `{"a":1}`, hdr)
			reject := f.send("POST", "t/reject", `{"a":1}`, hdr)
			if first.Status != 202 || reject.Status != 202 {
				t.Fatalf("first deliveries: %+v %+v", first, reject)
			}
			if r := f.send("POST", "t/plain", `{"a":1}`, hdr); r.Status != 202 || r.Answer != touba.IntakeDuplicate || r.QueueID != first.QueueID {
				t.Fatalf("redelivery while pending: %+v, want 202 duplicate of %s", r, first.QueueID)
			}
			if got, err := q.Lease(context.Background(), 10); err != nil || len(got) != 2 {
				t.Fatalf("lease: %v, %d entries", err, len(got))
			}

			r := f.send("POST", "t/plain", `{"a":1}`, hdr)
			if r.Status != http.StatusOK || r.Answer != touba.IntakeConsumed || r.Code != touba.ETriggerReplayRejected || r.QueueID != first.QueueID {
				t.Fatalf("redelivery of a consumed entry: %+v, want 200 consumed TriggerReplayRejected naming %s", r, first.QueueID)
			}
			r = f.send("POST", "t/reject", `{"a":1}`, hdr)
			if r.Status != http.StatusConflict || r.Error.Code != touba.ETriggerReplayRejected || r.Error.QueueID != reject.QueueID {
				t.Fatalf("redelivery under reject: %+v, want 409 TriggerReplayRejected naming %s", r, reject.QueueID)
			}
			r = f.send("POST", "t/plain", `{"a":2}`, hdr)
			if r.Status != http.StatusConflict || r.Error.Code != touba.ETriggerEventPayloadConflict || r.Error.QueueID != first.QueueID {
				t.Fatalf("other body on a consumed entry: %+v, want 409 TriggerEventPayloadConflict", r)
			}
			// Stripe-shaped: the id is read from the body, so a body that is
			// not JSON is refused, however often it comes.
			for range 2 {
				if r := f.send("POST", "t/stripe", `not json`, nil); r.Status != 400 || r.Error.Code != touba.ETriggerEventIDMissing {
					t.Fatalf("stripe trigger, body not JSON: %+v, want 400 TriggerEventIdMissing", r)
				}
			}
			entries, err := q.List(context.Background(), touba.EntryFilter{Limit: 100})
			if err != nil || len(entries) != 2 {
				t.Fatalf("%d entries (%v), want the first two only", len(entries), err)
			}

			// The metrics see the code with the status each answer had.
			mu.Lock()
			for key, n := range map[string]int{
				"trigger:t/plain TriggerReplayRejected 200":       1,
				"trigger:t/reject TriggerReplayRejected 409":      1,
				"trigger:t/stripe TriggerEventIdMissing 400":      2,
				"trigger:t/plain TriggerEventPayloadConflict 409": 1,
			} {
				if observed[key] != n {
					t.Errorf("observed %q %d times, want %d (%v)", key, observed[key], n, observed)
				}
			}
			mu.Unlock()

			if err := log.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			rows, err := log.Deliveries(context.Background(), touba.LogFilter{Rejected: true, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, row := range rows {
				got = append(got, row.TriggerRef+" "+http.StatusText(row.StatusCode)+" "+row.ErrorCode)
			}
			want := []string{ // newest first
				"trigger:t/stripe Bad Request TriggerEventIdMissing",
				"trigger:t/stripe Bad Request TriggerEventIdMissing",
				"trigger:t/plain Conflict TriggerEventPayloadConflict",
				"trigger:t/reject Conflict TriggerReplayRejected",
				"trigger:t/plain OK TriggerReplayRejected",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("rejections logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, row := range rows {
				if row.ErrorCode == touba.ETriggerReplayRejected && (row.QueueID == "" || !row.BodyStored) {
					t.Fatalf("redelivery row %+v: want the entry's queue id and the body kept", row)
				}
			}
		})
	}
}
