package state_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/state"
)

func headerBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	return n
}

// TestLogCutsSenderFields: a row built from a 64 KiB path, a 60 KB header
// and 64 KiB of small headers is cut to the caps before it is buffered,
// and every cut is marked; a small row is kept as it came.
func TestLogCutsSenderFields(t *testing.T) {
	s := openState(t, state.Options{})
	ctx := context.Background()
	big := strings.Repeat("p", 64<<10)
	hdr := map[string]string{"x-big": strings.Repeat("v", 60_000), "content-type": "application/json"}
	for i := 0; i < 500; i++ {
		hdr[fmt.Sprintf("x-h%03d", i)] = strings.Repeat("w", 120)
	}
	hdr[strings.Repeat("n", 1000)] = "long name"
	s.Log(&touba.LoggedDelivery{DeliveryID: "big", TriggerRef: "trigger:" + big, EventID: big, RemoteAddr: big,
		Headers: hdr, StatusCode: 404, ErrorCode: "TriggerNotFound"})
	small := map[string]string{"content-type": "application/json", "x-a": "b"}
	s.Log(&touba.LoggedDelivery{DeliveryID: "small", TriggerRef: "trigger:t", EventID: "e1", RemoteAddr: "127.0.0.1:1",
		Headers: small, StatusCode: 401, ErrorCode: "TriggerSignatureInvalid"})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := s.Delivery(ctx, "big")
	if err != nil || d == nil {
		t.Fatalf("row: %v %v", d, err)
	}
	for name, c := range map[string]struct {
		v   string
		max int
	}{"trigger_ref": {d.TriggerRef, touba.MaxRefBytes}, "event_id": {d.EventID, touba.MaxEventIDBytes},
		"remote_addr": {d.RemoteAddr, touba.MaxRemoteAddrBytes}} {
		if len(c.v) > c.max || !strings.HasSuffix(c.v, touba.TruncatedMark) {
			t.Errorf("%s: %d bytes (cap %d), marked=%v", name, len(c.v), c.max, strings.HasSuffix(c.v, touba.TruncatedMark))
		}
	}
	if !strings.HasPrefix(d.TriggerRef, "trigger:ppp") {
		t.Errorf("trigger_ref %q: want the start of the path kept", d.TriggerRef[:20])
	}
	if n := headerBytes(d.Headers); n > touba.MaxHeaderBytes {
		t.Errorf("headers hold %d bytes, cap %d", n, touba.MaxHeaderBytes)
	}
	note, ok := d.Headers[touba.TruncatedHeader]
	if !ok || !strings.Contains(note, "dropped") {
		t.Errorf("no truncation note in the headers: %q", note)
	}
	if d.Headers["content-type"] != "application/json" {
		t.Errorf("content-type %q: a short header before the budget is spent is kept whole", d.Headers["content-type"])
	}
	for k, v := range d.Headers {
		if len(k) > 128 {
			t.Errorf("header name of %d bytes kept", len(k))
		}
		if k == "x-big" && !strings.HasSuffix(v, touba.TruncatedMark) {
			t.Errorf("x-big cut without its mark")
		}
	}
	d, err = s.Delivery(ctx, "small")
	if err != nil || d == nil {
		t.Fatalf("row: %v %v", d, err)
	}
	if d.TriggerRef != "trigger:t" || d.EventID != "e1" || d.RemoteAddr != "127.0.0.1:1" || len(d.Headers) != 2 || d.Headers["x-a"] != "b" {
		t.Fatalf("small row changed: %+v", d)
	}
}

// TestLogCutKeepsUTF8: a cut never splits a multi-byte character.
func TestLogCutKeepsUTF8(t *testing.T) {
	s := openState(t, state.Options{})
	s.Log(&touba.LoggedDelivery{DeliveryID: "u", TriggerRef: "trigger:" + strings.Repeat("é", 1000), StatusCode: 404})
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	d, _ := s.Delivery(context.Background(), "u")
	if d == nil || !strings.HasSuffix(d.TriggerRef, "é"+touba.TruncatedMark) {
		t.Fatalf("trigger_ref cut inside a character: %+v", d)
	}
}

// sizeSQL is every column's byte length plus the per-row overhead: what a
// row must count against LogMaxBytes (it matches migration 0004).
const sizeSQL = `160 + length(CAST(delivery_id AS BLOB)) + length(CAST(at AS BLOB)) + length(CAST(trigger_ref AS BLOB))
	+ length(CAST(event_id AS BLOB)) + length(CAST(digest AS BLOB)) + length(CAST(error_code AS BLOB))
	+ length(CAST(queue_id AS BLOB)) + length(CAST(remote_addr AS BLOB)) + length(CAST(headers AS BLOB))
	+ coalesce(length(body), 0)`

// TestLogBoundedInBytes: with every column counted, the table stays within
// LogMaxBytes as rows are written (no explicit prune: the writer prunes in
// step with its inserts), the newest rows are the ones kept, each row's
// size column is its real byte count, and the running totals match.
func TestLogBoundedInBytes(t *testing.T) {
	const max = 1 << 20
	s := openState(t, state.Options{LogMaxBytes: max, LogMaxBodyBytes: 256 << 10})
	ctx := context.Background()
	hdr := map[string]string{"x-pad": strings.Repeat("h", 4000)}
	for i := 0; i < 2000; i++ {
		d := &touba.LoggedDelivery{TriggerRef: "trigger:" + strings.Repeat("r", 200), EventID: fmt.Sprintf("e%05d", i),
			StatusCode: 409, ErrorCode: "TriggerEventPayloadConflict", Headers: hdr, RemoteAddr: "127.0.0.1:9"}
		if i%2 == 0 {
			d.Body, d.BodyStored = make([]byte, 2000), true
		}
		s.Log(d)
		if i%100 == 99 {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			checkBytes(t, s, max, 256<<10)
		}
	}
	rows, err := s.Deliveries(ctx, touba.LogFilter{Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 || len(rows) > 250 || rows[0].EventID != "e01999" {
		t.Fatalf("%d rows kept, newest %v: want the newest (each row is about 4.5 KB)", len(rows), rows[0].EventID)
	}
	if written, dropped := s.LogStats(); written != 2000 || dropped != 0 {
		t.Fatalf("written=%d dropped=%d", written, dropped)
	}
}

func checkBytes(t *testing.T, s *state.State, max, maxBody int64) {
	t.Helper()
	db := s.DB().Read
	var n, sum, body, bad int64
	if err := db.QueryRow(`SELECT COUNT(*), coalesce(SUM(size), 0), coalesce(SUM(length(body)), 0),
		coalesce(SUM(size != `+sizeSQL+`), 0) FROM deliveries`).Scan(&n, &sum, &body, &bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d rows whose size is not the bytes of their columns", bad)
	}
	if sum > max || body > maxBody {
		t.Fatalf("table holds %d bytes (cap %d), bodies %d (cap %d)", sum, max, body, maxBody)
	}
	var mRows, mBytes, mBody int64
	if err := db.QueryRow(`SELECT (SELECT value FROM log_meta WHERE key='rows'), (SELECT value FROM log_meta WHERE key='row_bytes'),
		(SELECT value FROM log_meta WHERE key='body_bytes')`).Scan(&mRows, &mBytes, &mBody); err != nil {
		t.Fatal(err)
	}
	if mRows != n || mBytes != sum || mBody != body {
		t.Fatalf("totals %d rows %d bytes %d body, table %d rows %d bytes %d body", mRows, mBytes, mBody, n, sum, body)
	}
}

// TestBufferBoundedInBytes: while the writer cannot write (another
// connection holds the write lock), rows with 8 KiB of headers fill the
// buffer's byte cap long before its row cap; the rest are dropped and
// counted, and Log never waits.
func TestBufferBoundedInBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s, err := state.Open(context.Background(), path, state.Options{LogBufferBytes: 1 << 20})
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
	hdr := map[string]string{"x-pad": strings.Repeat("h", 60_000)}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		s.Log(&touba.LoggedDelivery{TriggerRef: "trigger:" + strings.Repeat("r", 60_000), StatusCode: 401,
			ErrorCode: "TriggerSignatureInvalid", Headers: hdr})
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("1000 Log calls took %v", time.Since(start))
	}
	tx.Rollback()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	written, dropped := s.LogStats()
	// A cut row holds about 8.6 KB: 1 MiB takes about 120 of them.
	if written+dropped != 1000 || written > 130 || written < 100 {
		t.Fatalf("written=%d dropped=%d, want about 120 written (1 MiB of 8.6 KB rows)", written, dropped)
	}
}

// TestPruneOfManyRowsInSteps: an age check over more rows than one step
// takes removes them all, and rows logged meanwhile are written.
func TestPruneOfManyRowsInSteps(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := openState(t, state.Options{LogMaxAge: time.Hour, Now: func() time.Time { return now }})
	ctx := context.Background()
	for i := 0; i < 3000; i++ {
		s.Log(&touba.LoggedDelivery{At: now.Add(-2 * time.Hour), TriggerRef: "trigger:t", StatusCode: 401})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s.Log(&touba.LoggedDelivery{DeliveryID: "fresh", TriggerRef: "trigger:t", StatusCode: 401})
	if err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Deliveries(ctx, touba.LogFilter{Limit: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].DeliveryID != "fresh" {
		t.Fatalf("%d rows left, want only the fresh one", len(rows))
	}
	checkBytes(t, s, 1<<30, 1<<30)
}

// TestMigrationCountsExistingRows: rows written before the byte bound
// existed get their size, and the totals are computed, when the file is
// opened by this version (migration 0004).
func TestMigrationCountsExistingRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	ctx := context.Background()
	s, err := state.Open(ctx, path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		d := &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprint(i), StatusCode: 409, ErrorCode: "X",
			Headers: map[string]string{"a": strings.Repeat("b", i)}}
		if i%3 == 0 {
			d.Body, d.BodyStored = make([]byte, i*10), true
		}
		s.Log(d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Make the file what the version before 0004 left.
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`ALTER TABLE deliveries DROP COLUMN size`, `DELETE FROM log_meta WHERE key != 'body_bytes'`,
		`DELETE FROM schema_migrations WHERE name = '0004_log_bytes.sql'`} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()
	s = openStateAt(t, path)
	checkBytes(t, s, 1<<30, 1<<30)
	var rows int64
	s.DB().Read.QueryRow(`SELECT value FROM log_meta WHERE key = 'rows'`).Scan(&rows)
	if rows != 50 {
		t.Fatalf("rows total %d, want 50", rows)
	}
}

func openStateAt(t *testing.T, path string) *state.State {
	t.Helper()
	s, err := state.Open(context.Background(), path, state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
