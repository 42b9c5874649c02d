package history_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// hmacEnv is the secret the webhook bindings sign their requests with.
var hmacEnv = []string{"HIST_HMAC=history-test-secret"}

// program has a trigger per fate: Ok's runs end done, Fail's failed (the
// remote refuses the write with a 422), Park's parked (the remote answers
// 500 to a write that may not be repeated: its outcome is unknown), and
// Held's wait pending behind the trigger's pause. One attempt each.
const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:hist/Ok", "source": {"kind": "webhook"}, "retry": {"max_attempts": 1, "initial_interval_ms": 10, "max_interval_ms": 10},
   "steps": [{"id": "call", "tool": "tool:hist/Ok", "input": {"n": {"$ref": "/event/body/n"}}}]},
  {"ref": "trigger:hist/Fail", "source": {"kind": "webhook"}, "retry": {"max_attempts": 1, "initial_interval_ms": 10, "max_interval_ms": 10},
   "steps": [{"id": "call", "tool": "tool:hist/Fail", "input": {"n": {"$ref": "/event/body/n"}}}]},
  {"ref": "trigger:hist/Park", "source": {"kind": "webhook"}, "retry": {"max_attempts": 1, "initial_interval_ms": 10, "max_interval_ms": 10},
   "steps": [{"id": "call", "tool": "tool:hist/Park", "input": {"n": {"$ref": "/event/body/n"}}}]},
  {"ref": "trigger:hist/Held", "source": {"kind": "webhook"}, "retry": {"max_attempts": 1, "initial_interval_ms": 10, "max_interval_ms": 10},
   "steps": [{"id": "call", "tool": "tool:hist/Ok", "input": {"n": {"$ref": "/event/body/n"}}}]}]}`

// manifest binds each tool to its path at the remote: an external write
// whose unknown outcome is never repeated (retry_mode none), so a 500
// parks its entry. The remote defaults are off: /park answers 500 to
// every call, and the default circuit would hold its runs pending
// instead of parking them.
func manifest(url string) string {
	binding := func(path string) string {
		return fmt.Sprintf(`{"handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10},
      "credentials": {"hmac_secret": {"env": "HIST_HMAC"}}},
    "max_concurrency": 0, "circuit": null,
    "effect_contract": {"kind": "external_write", "retry_mode": "none"}}`, url+path)
	}
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:hist/Ok": %s, "tool:hist/Fail": %s, "tool:hist/Park": %s}}`, binding("/ok"), binding("/fail"), binding("/park"))
}

// newRemote is the webhook remote: /ok applies (200), /fail refuses (422),
// /park answers 500. Its cleanup is registered before the daemons', so it
// closes after they are killed.
func newRemote(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"error": "refused by the test's remote"}`)
		case "/park":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error": "outcome unknown"}`)
		default:
			io.WriteString(w, `{"stored": true}`)
		}
	}))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// world is one test's program, manifest, database and nodes.
type world struct {
	t                 *testing.T
	dir               string
	program, manifest string
	dsn               string
	bin               string // the touba-trigger the nodes and the CLI run
	client            *http.Client
}

// newWorld writes the program and manifest for a fresh remote, on a fresh
// database of the binary's cluster (skipping t without PostgreSQL 15).
func newWorld(t *testing.T) *world {
	t.Helper()
	dsn := pgtest.New(t)
	srv := newRemote(t)
	dir := t.TempDir()
	w := &world{t: t, dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		dsn: dsn, bin: os.Getenv("TOUBA_HISTORY_BIN"),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}}
	if w.bin == "" {
		w.bin = testkit.Binary(t)
	} else {
		t.Logf("nodes run %s (TOUBA_HISTORY_BIN)", w.bin)
	}
	t.Cleanup(w.client.CloseIdleConnections)
	for path, content := range map[string]string{w.program: program, w.manifest: manifest(srv.URL)} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// sock is node id's admin socket.
func (w *world) sock(id string) string { return filepath.Join(w.dir, id+".sock") }

// node starts `serve` as node id on the world's database with extra flags
// and waits until it listens.
func (w *world) node(id string, extra ...string) *testkit.Daemon {
	w.t.Helper()
	args := append([]string{"serve", w.program, "--manifest", w.manifest, "--database", w.dsn, "--node-id", id,
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", w.sock(id), "--log-level", "info"}, extra...)
	return testkit.StartCmd(w.t, exec.Command(w.bin, args...), hmacEnv)
}

// cli runs an operator command on node id's socket, which must succeed,
// and decodes its JSON answer into out (unless nil).
func (w *world) cli(out any, id string, args ...string) {
	w.t.Helper()
	cmd := exec.Command(w.bin, append(args, "--admin-socket", w.sock(id), "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	if out != nil {
		if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
			w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stdout.String())
		}
	}
}

// listed is the queue ids `queue ls` lists with status (of trigger, unless
// empty), through node id.
func (w *world) listed(id, status, trigger string) map[string]bool {
	w.t.Helper()
	args := []string{"queue", "ls", "--status", status, "--limit", "100000"}
	if trigger != "" {
		args = append(args, "--trigger", trigger)
	}
	var entries []struct {
		QueueID string `json:"queue_id"`
	}
	w.cli(&entries, id, args...)
	out := map[string]bool{}
	for _, e := range entries {
		out[e.QueueID] = true
	}
	return out
}

// post sends one delivery to trigger at d and returns the status of the
// answer and the queue id of a 202.
func (w *world) post(d *testkit.Daemon, trigger, eventID string, n int) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, d.URL()+"/triggers/"+trigger, strings.NewReader(fmt.Sprintf(`{"n": %d}`, n)))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode == http.StatusAccepted {
		if err := json.Unmarshal(raw, &a); err != nil || a.QueueID == "" {
			return resp.StatusCode, "", fmt.Errorf("202 without a queue id: %s (%v)", raw, err)
		}
	}
	return resp.StatusCode, a.QueueID, nil
}

// conn is a connection of the test's own to the world's database.
func (w *world) conn() *pgx.Conn {
	w.t.Helper()
	c, err := pgx.Connect(context.Background(), w.dsn)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// forgettingMark is the comment a freeze puts on the partitions it froze
// (postgres.forgettingMark): a detached table without it is one no freeze
// marked, whose rows nothing reads.
const forgettingMark = "touba: being forgotten (--history)"

// detached lists the tables of schema touba named like a time partition
// (or a table before the partitioning) that are not partitions, with
// whether a freeze marked each.
func detached(ctx context.Context, c *pgx.Conn) (map[string]bool, error) {
	rows, err := c.Query(ctx, `SELECT c.relname, COALESCE(obj_description(c.oid, 'pg_class'), '') = $1
		FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = 'touba' AND c.relkind = 'r' AND NOT c.relispartition AND c.relname ~ '_(p[0-9]|old)'`, forgettingMark)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		var marked bool
		if err := rows.Scan(&name, &marked); err != nil {
			return nil, err
		}
		out[name] = marked
	}
	return out, rows.Err()
}

// timePartitions is the most time partitions any table has.
func timePartitions(ctx context.Context, c *pgx.Conn) (int, error) {
	var n int
	err := c.QueryRow(ctx, `SELECT COALESCE(MAX(n), 0) FROM (SELECT count(*) AS n FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = 'touba' AND c.relname ~ '_p[0-9]' GROUP BY i.inhparent) x`).Scan(&n)
	return n, err
}

// acked is what intake acknowledged, by trigger, with each ack's time.
type acked struct {
	mu  sync.Mutex
	ids map[string][]ack
}

type ack struct {
	id string
	at time.Time
}

func (a *acked) add(trigger, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string][]ack{}
	}
	a.ids[trigger] = append(a.ids[trigger], ack{id, time.Now()})
}

// of is trigger's acks.
func (a *acked) of(trigger string) []ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ack(nil), a.ids[trigger]...)
}
