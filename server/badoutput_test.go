package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/protocol"
	"github.com/touba/touba-trigger/server"
)

// rawRemote answers protocol responses whose output strings hold a byte
// that is not UTF-8 (\xe9, as Latin-1 writes é) and whose receipt ref holds
// an escaped NUL: JSON that jsonx.Valid accepts and PostgreSQL text refuses
// once stored as it came.
type rawRemote struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int // by path: /read, /write
}

func newRawRemote(t *testing.T) *rawRemote {
	r := &rawRemote{calls: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rawRemote) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var c struct {
		Context struct {
			Effect *struct {
				EffectID    string `json:"effect_id"`
				Fingerprint string `json:"fingerprint"`
			} `json:"effect"`
		} `json:"context"`
	}
	json.Unmarshal(body, &c)
	r.mu.Lock()
	r.calls[req.URL.Path]++
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(protocol.Header, protocol.Name) // a protocol response (SPEC §4.2)
	if c.Context.Effect == nil {
		w.Write([]byte(`{"ok": true, "output": {"name": "caf` + "\xe9" + `", "nul": "a\u0000b"}}`))
		return
	}
	fmt.Fprintf(w, `{"ok": true, "output": {"order": "caf`+"\xe9\xff"+`"}, "effect_receipt": {"effect_id": %q,
		"fingerprint": %q, "outcome": "applied", "receipt_ref": "order:\u0000`+"\xe9"+`"}}`, c.Context.Effect.EffectID, c.Context.Effect.Fingerprint)
}

func (r *rawRemote) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[path]
}

// rawFiles has two triggers, each of one step bound to the remote: one
// that reads (effect kind none) and one that writes (external_write,
// retry_mode none: an unknown outcome parks).
func rawFiles(t *testing.T, url string) (program, manifest string) {
	dir := t.TempDir()
	program, manifest = filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	prog := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:raw/Read", "source": {"kind": "webhook"},
	   "steps": [{"id": "read", "tool": "tool:raw/Read", "input": {"id": {"$ref": "/event/body/id"}}}]},
	  {"ref": "trigger:raw/Write", "source": {"kind": "webhook"},
	   "steps": [{"id": "write", "tool": "tool:raw/Write", "input": {"id": {"$ref": "/event/body/id"}}}]}]}`
	bind := func(path, contract string) string {
		return fmt.Sprintf(`{"handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 2},
		  "credentials": {"hmac_secret": {"env": "RAW_HMAC"}}}, "timeout_ms": 2000, "effect_contract": %s}`, url+path, contract)
	}
	man := `{"manifest_version": "touba-manifest-v1", "bindings": {"tool:raw/Read": ` + bind("/read", `{"kind": "none"}`) +
		`, "tool:raw/Write": ` + bind("/write", `{"kind": "external_write", "retry_mode": "none"}`) + `}}`
	for path, content := range map[string]string{program: prog, manifest: man} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return program, manifest
}

// outcome is what the stores hold once the runs settled.
type outcome struct {
	read, write        string // the entries' status and error code
	effect, receiptRef string // the write's effect
	result, readOutput string // the write's stored result, the read step's checkpoint
}

func settled(status string) bool {
	return strings.HasPrefix(status, "done") || strings.HasPrefix(status, "failed") || strings.HasPrefix(status, "parked")
}

// TestHandlerOutputNotUTF8 runs, on each backend, a read step and an
// applied write whose answers hold bytes that are not UTF-8 and an escaped
// NUL: both entries end done, the write is recorded applied with its output
// repaired (\ufffd) and its receipt ref storable, each step was called
// once. Stored as they came, PostgreSQL refused them: the write parked
// EffectOutcomeUnknown although applied, the read was called again every
// second.
func TestHandlerOutputNotUTF8(t *testing.T) {
	t.Setenv("RAW_HMAC", "raw-test-secret")
	check := func(t *testing.T, r *rawRemote, read func() outcome) {
		t.Helper()
		var got outcome
		testkit.WaitForReport(t, pgWait, func() bool { got = read(); return settled(got.read) && settled(got.write) }, "both entries to end", func() {
			t.Logf("read entry %q, write entry %q, write effect %q; remote called %d times for read, %d for write",
				got.read, got.write, got.effect, r.count("/read"), r.count("/write"))
		})
		if got.read != "done " || got.write != "done " || got.effect != "applied" {
			t.Fatalf("read entry %q, write entry %q, write effect %q; want done, done, applied; remote called %d times for read, %d for write",
				got.read, got.write, got.effect, r.count("/read"), r.count("/write"))
		}
		for _, s := range []string{got.receiptRef, got.result, got.readOutput} {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("stored %q: not text", s)
			}
		}
		if got.receiptRef != "order:\uFFFD\uFFFD" || got.result != `{"order": "caf\ufffd\ufffd"}` {
			t.Fatalf("write stored receipt ref %q, result %s", got.receiptRef, got.result)
		}
		if !strings.Contains(got.readOutput, `caf\ufffd`) || !strings.Contains(got.readOutput, `a\u0000b`) {
			t.Fatalf("read step's checkpoint %s", got.readOutput)
		}
		if r.count("/read") != 1 || r.count("/write") != 1 {
			t.Fatalf("remote called %d times for read, %d for write; want once each", r.count("/read"), r.count("/write"))
		}
	}
	post := func(t *testing.T, base string) {
		for _, name := range []string{"raw/Read", "raw/Write"} {
			if code, body := testkit.Post(t, base+"/triggers/"+name, "raw-1", `{"id": 1}`); code != 202 {
				t.Fatalf("post %s: %d %s", name, code, body)
			}
		}
	}
	t.Run("SQLite", func(t *testing.T) {
		r := newRawRemote(t)
		program, manifest := rawFiles(t, r.srv.URL)
		dir := t.TempDir()
		path := func(n string) string { return filepath.Join(dir, n) }
		s := testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Queue: path("queue.sqlite"),
			State: path("state.sqlite"), Journal: path("journal.sqlite"), Workers: 1})
		post(t, s.URL())
		open := func(n string) *sql.DB {
			db, err := sql.Open("sqlite3", "file:"+path(n)+"?mode=ro")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		q, st, j := open("queue.sqlite"), open("state.sqlite"), open("journal.sqlite")
		check(t, r, func() (o outcome) {
			o.read, o.write = sqliteEntry(q, "trigger:raw/Read"), sqliteEntry(q, "trigger:raw/Write")
			var ref, result sql.NullString
			j.QueryRow(`SELECT state, receipt_ref, result FROM effects WHERE effect_id LIKE '%:write'`).Scan(&o.effect, &ref, &result)
			o.receiptRef, o.result = ref.String, result.String
			st.QueryRow(`SELECT output FROM run_steps WHERE step_id = 'read'`).Scan(&o.readOutput)
			return o
		})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		r := newRawRemote(t)
		program, manifest := rawFiles(t, r.srv.URL)
		dsn := pgtest.New(t)
		s := testkit.StartServer(t, server.Config{Program: program, Manifest: manifest, Database: dsn, NodeID: "node-raw",
			Workers: 1, LeaseTTL: 10 * time.Second})
		post(t, s.URL())
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		check(t, r, func() (o outcome) {
			var ref, result *string
			for _, e := range []struct {
				ref string
				dst *string
			}{{"trigger:raw/Read", &o.read}, {"trigger:raw/Write", &o.write}} {
				conn.QueryRow(ctx, `SELECT status || ' ' || coalesce(error_code, '') FROM touba.entries WHERE trigger_ref = $1`, e.ref).Scan(e.dst)
			}
			conn.QueryRow(ctx, `SELECT state, receipt_ref, result FROM touba.effects WHERE effect_id LIKE '%:write'`).Scan(&o.effect, &ref, &result)
			conn.QueryRow(ctx, `SELECT output FROM touba.run_steps WHERE step_id = 'read'`).Scan(&o.readOutput)
			for dst, src := range map[*string]*string{&o.receiptRef: ref, &o.result: result} {
				if src != nil {
					*dst = *src
				}
			}
			return o
		})
	})
}

// sqliteEntry is the status and error code of ref's entry in the queue file.
func sqliteEntry(q *sql.DB, ref string) string {
	var status string
	q.QueryRow(`SELECT status || ' ' || coalesce(error_code, '') FROM entries WHERE trigger_ref = ?`, ref).Scan(&status)
	return status
}
