package state_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/state"
)

func openState(t *testing.T, opts state.Options) *state.State {
	t.Helper()
	s, err := state.Open(context.Background(), filepath.Join(t.TempDir(), "s.sqlite"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDeliveryLogBounds(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := openState(t, state.Options{LogMaxRows: 50, LogMaxAge: time.Hour, LogMaxBodyBytes: 1000,
		Now: func() time.Time { return now }})
	ctx := context.Background()
	// 10 rows two hours old, then 100 fresh ones with 100-byte bodies.
	for i := 0; i < 10; i++ {
		s.Log(&touba.LoggedDelivery{At: now.Add(-2 * time.Hour), TriggerRef: "trigger:t", EventID: fmt.Sprintf("old-%d", i),
			StatusCode: 409, ErrorCode: "TriggerEventPayloadConflict"})
	}
	for i := 0; i < 100; i++ {
		s.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("new-%03d", i), StatusCode: 409,
			ErrorCode: "TriggerEventPayloadConflict", Body: make([]byte, 100), BodyStored: true})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Deliveries(ctx, touba.LogFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 50 {
		t.Fatalf("rows=%d after prune, want 50 (max rows)", len(rows))
	}
	if rows[0].EventID != "new-099" || rows[49].EventID != "new-050" {
		t.Fatalf("kept %s..%s, want the newest 50", rows[49].EventID, rows[0].EventID)
	}
	stored := 0
	for _, r := range rows {
		if r.BodyStored {
			stored++
		}
	}
	if stored != 10 {
		t.Fatalf("%d bodies kept, want 10 (1000 bytes of 100-byte bodies)", stored)
	}
	if !rows[0].BodyStored || rows[49].BodyStored {
		t.Fatal("the oldest bodies must go first")
	}
}

// TestLogNeverBlocks: a full buffer drops and counts rows instead of
// making the caller wait.
func TestLogNeverBlocks(t *testing.T) {
	s := openState(t, state.Options{LogBuffer: 1})
	done := make(chan struct{})
	go func() {
		for i := 0; i < 20000; i++ {
			s.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t", StatusCode: 401, ErrorCode: "TriggerSignatureInvalid"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Log blocked")
	}
	s.Flush(context.Background())
	written, dropped := s.LogStats()
	if written+dropped != 20000 || written == 0 {
		t.Fatalf("written=%d dropped=%d, want a total of 20000 with some written", written, dropped)
	}
}

// TestBufferedBodiesAreBounded: rows waiting for the writer hold at most
// 64 MiB (bodies and every other field); past that a row is logged
// without its body. Another
// connection holds the file's write lock, so nothing drains meanwhile.
func TestBufferedBodiesAreBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s, err := state.Open(context.Background(), path, state.Options{LogMaxBodyBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	blocker, err := sql.Open("sqlite3", "file:"+path+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	tx, err := blocker.Begin()
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1<<20)
	for i := 0; i < 100; i++ {
		s.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprint(i), StatusCode: 409,
			ErrorCode: "TriggerEventPayloadConflict", Body: body, BodyStored: true})
	}
	tx.Rollback()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := s.Deliveries(context.Background(), touba.LogFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, r := range got {
		if r.BodyStored {
			stored++
		}
	}
	if len(got) != 100 || stored != 63 {
		t.Fatalf("%d rows, %d with their body; want 100 rows, 63 bodies (64 MiB of 1 MiB bodies and their rows)", len(got), stored)
	}
}
