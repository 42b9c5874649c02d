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

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/server"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startNodes runs n in-process daemons on one database, intake only (so
// entries stay pending and a repeat is a duplicate, not a replay).
func startNodes(t *testing.T, dsn string, n int) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	ex := filepath.Join(filepath.Dir(file), "..", "examples", "quickstart")
	var addrs []string
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := server.Open(ctx, server.Config{Program: filepath.Join(ex, "program.air.json"),
			Manifest: filepath.Join(ex, "touba.manifest.json"), Database: dsn, NodeID: fmt.Sprintf("node-%d", i),
			Listen: "127.0.0.1:0", MaxPending: 1_000_000, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; s.Close() })
		select {
		case <-s.Ready():
		case err := <-done:
			t.Fatalf("node %d: %v", i, err)
		}
		addrs = append(addrs, "http://"+s.Addr().String())
	}
	return addrs
}

type answer struct {
	status  int
	queueID string
	result  string // status or error code
}

// send posts body under eventID to node addrs[i%len], 200 at once.
func sendAll(t *testing.T, addrs []string, eventID string, body func(i int) string) []answer {
	t.Helper()
	out := make([]answer, 200)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, addrs[i%len(addrs)]+"/triggers/examples.billing/Invoice", strings.NewReader(body(i)))
			req.Header.Set("x-touba-event-id", eventID)
			req.Header.Set("content-type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var a struct {
				QueueID string `json:"queue_id"`
				Status  string `json:"status"`
				Error   struct {
					Code    string `json:"code"`
					QueueID string `json:"queue_id"`
				} `json:"error"`
			}
			json.NewDecoder(resp.Body).Decode(&a)
			out[i] = answer{status: resp.StatusCode, queueID: a.QueueID + a.Error.QueueID, result: a.Status + a.Error.Code}
		}()
	}
	wg.Wait()
	return out
}

func countEntries(t *testing.T, dsn, eventID string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT COUNT(*) FROM touba.entries WHERE event_id = $1`, eventID).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestThreeNodesOneIdentity: every §3.1 identity row holds across nodes.
// 200 identical deliveries spread over three nodes make one entry (one
// 202 enqueued, 199 202 duplicate of it); 200 different bodies under one
// id make one entry and 199 TriggerEventPayloadConflict naming it.
func TestThreeNodesOneIdentity(t *testing.T) {
	dsn := pgtest.New(t)
	addrs := startNodes(t, dsn, 3)

	same := sendAll(t, addrs, "evt-same", func(int) string { return `{"amount":42}` })
	count := map[string]int{}
	for _, a := range same {
		if a.status != http.StatusAccepted || a.queueID != same[0].queueID || a.queueID == "" {
			t.Fatalf("identical delivery answered %+v, want 202 with queue id %s", a, same[0].queueID)
		}
		count[a.result]++
	}
	if count["enqueued"] != 1 || count["duplicate"] != 199 {
		t.Fatalf("identical deliveries: %v, want 1 enqueued and 199 duplicate", count)
	}
	if n := countEntries(t, dsn, "evt-same"); n != 1 {
		t.Fatalf("%d entries for evt-same, want 1", n)
	}

	diff := sendAll(t, addrs, "evt-diff", func(i int) string { return fmt.Sprintf(`{"amount":%d}`, i) })
	var winner string
	count = map[string]int{}
	for _, a := range diff {
		count[fmt.Sprint(a.status, " ", a.result)]++
		if a.status == http.StatusAccepted {
			winner = a.queueID
		}
	}
	if count["202 enqueued"] != 1 || count["409 TriggerEventPayloadConflict"] != 199 {
		t.Fatalf("different bodies: %v, want 1 enqueued and 199 TriggerEventPayloadConflict", count)
	}
	for _, a := range diff {
		if a.queueID != winner {
			t.Fatalf("answer %+v does not name the entry %s", a, winner)
		}
	}
	if n := countEntries(t, dsn, "evt-diff"); n != 1 {
		t.Fatalf("%d entries for evt-diff, want 1", n)
	}
}
