package fairness_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/mattn/go-sqlite3"

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// hmacEnv is the secret the webhook bindings sign their requests with.
var hmacEnv = []string{"FAIR_HMAC=fairness-test-secret"}

// remote is the webhook target of the tests: an httptest server on
// loopback that answers every call with status after delay, once its gate
// (if any) is open, and counts the calls it answered per URL path. Its
// handlers return as soon as the test ends (done is closed), so the server
// shuts down promptly whatever the daemon still has in flight.
type remote struct {
	srv    *httptest.Server
	delay  atomic.Int64  // nanoseconds; setDelay changes it
	status atomic.Int64  // setStatus changes it
	gate   chan struct{} // nil: no gate
	done   chan struct{}

	mu        sync.Mutex
	calls     map[string]int // URL path -> calls answered
	byTrigger map[string]int // the request's context.trigger_ref -> calls answered

	conns atomic.Int64 // connections open: a killed daemon's are closed once their requests were served
}

// newRemote starts a remote answering status after delay. Its cleanup is
// registered before the daemon's, so it runs after the daemon is killed.
func newRemote(t *testing.T, delay time.Duration, status int, gated bool) *remote {
	t.Helper()
	r := &remote{done: make(chan struct{}), calls: map[string]int{}, byTrigger: map[string]int{}}
	r.status.Store(int64(status))
	r.delay.Store(int64(delay))
	if gated {
		r.gate = make(chan struct{})
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			r.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			r.conns.Add(-1)
		}
	}
	r.srv.Start()
	t.Cleanup(func() {
		close(r.done)
		r.srv.CloseClientConnections()
		r.srv.Close()
	})
	return r
}

func (r *remote) serve(w http.ResponseWriter, req *http.Request) {
	var body struct {
		Context struct {
			TriggerRef string `json:"trigger_ref"`
		} `json:"context"`
	}
	raw, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	json.Unmarshal(raw, &body)
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-r.done:
			return
		case <-req.Context().Done():
			return
		}
	}
	if delay := time.Duration(r.delay.Load()); delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.done:
			return
		case <-req.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(r.status.Load()))
	io.WriteString(w, `{"stored": true}`) // not a protocol response: applied, the body as output
	r.mu.Lock()
	r.calls[req.URL.Path]++
	r.byTrigger[body.Context.TriggerRef]++
	r.mu.Unlock()
}

// setDelay makes the remote answer after delay from now on.
func (r *remote) setDelay(delay time.Duration) { r.delay.Store(int64(delay)) }

// setStatus makes the remote answer status from now on.
func (r *remote) setStatus(status int) { r.status.Store(int64(status)) }

// countOf is how many calls of trigger ref the remote has answered.
func (r *remote) countOf(ref string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byTrigger[ref]
}

// open opens the remote's gate: the calls waiting at it go on.
func (r *remote) open() { close(r.gate) }

// count is how many calls to path the remote has answered.
func (r *remote) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[path]
}

// url is the remote's URL for path.
func (r *remote) url(path string) string { return r.srv.URL + path }

// backend is where the daemon keeps its queue: the SQLite files or one
// PostgreSQL database. statuses reads the states of entries by queue id.
type backend interface {
	name() string
	args(dir string) []string // the storage flags of serve
	statuses(ctx context.Context, ids []string) (map[string]string, error)
	// held counts trigger ref's runs handed back on a binding.
	held(ctx context.Context, ref string) (int, error)
}

type sqliteBackend struct {
	queue, state, journal string
	db                    *sql.DB
}

// newSQLite is the default SQLite backend, files in a fresh folder.
func newSQLite(t *testing.T) *sqliteBackend {
	t.Helper()
	dir := t.TempDir()
	b := &sqliteBackend{queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"),
		journal: filepath.Join(dir, "j.sqlite")}
	t.Cleanup(func() {
		if b.db != nil {
			b.db.Close()
		}
	})
	return b
}

func (b *sqliteBackend) name() string { return "sqlite" }

func (b *sqliteBackend) args(string) []string {
	return []string{"--queue", b.queue, "--state", b.state, "--effect-journal", b.journal}
}

func (b *sqliteBackend) statuses(ctx context.Context, ids []string) (map[string]string, error) {
	if b.db == nil {
		// Another process writes the file: read only, in WAL mode.
		db, err := sql.Open("sqlite3", "file:"+b.queue+"?mode=ro&_busy_timeout=10000")
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(1)
		b.db = db
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := b.db.QueryContext(ctx, `SELECT queue_id, status FROM entries WHERE queue_id IN (?`+
		strings.Repeat(",?", len(ids)-1)+`)`, args...)
	if err != nil {
		return nil, err
	}
	return scanStatuses(rows)
}

func (b *sqliteBackend) held(ctx context.Context, ref string) (int, error) {
	if _, err := b.statuses(ctx, []string{""}); err != nil { // opens b.db
		return 0, err
	}
	var n int
	err := b.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM entries WHERE trigger_ref = ? AND status = 'pending' AND hold_on IS NOT NULL`, ref).Scan(&n)
	return n, err
}

type pgBackend struct {
	dsn  string
	conn *pgx.Conn
}

// newPostgres is one PostgreSQL node's backend, on a fresh database of the
// test binary's throwaway cluster; it skips t when PostgreSQL 15 is not
// installed.
func newPostgres(t *testing.T) *pgBackend {
	t.Helper()
	b := &pgBackend{dsn: pgtest.New(t)}
	t.Cleanup(func() {
		if b.conn != nil {
			b.conn.Close(context.Background())
		}
	})
	return b
}

func (b *pgBackend) name() string { return "postgres" }

func (b *pgBackend) args(dir string) []string {
	return []string{"--database", b.dsn, "--node-id", "fair-1"}
}

func (b *pgBackend) statuses(ctx context.Context, ids []string) (map[string]string, error) {
	if b.conn == nil {
		conn, err := pgx.Connect(ctx, b.dsn)
		if err != nil {
			return nil, err
		}
		b.conn = conn
	}
	rows, err := b.conn.Query(ctx, `SELECT queue_id, status FROM touba.entries WHERE queue_id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

func (b *pgBackend) held(ctx context.Context, ref string) (int, error) {
	if _, err := b.statuses(ctx, []string{""}); err != nil { // opens b.conn
		return 0, err
	}
	var n int
	err := b.conn.QueryRow(ctx, `SELECT COUNT(*) FROM touba.entries WHERE trigger_ref = $1 AND status = 'pending' AND hold_on IS NOT NULL`, ref).Scan(&n)
	return n, err
}

func scanStatuses(rows *sql.Rows) (map[string]string, error) {
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, st string
		if err := rows.Scan(&id, &st); err != nil {
			return nil, err
		}
		out[id] = st
	}
	return out, rows.Err()
}

// world is one test's program, manifest and daemon on a backend.
type world struct {
	t                 *testing.T
	dir               string
	program, manifest string
	backend           backend
	daemon            *testkit.Daemon
	client            *http.Client
}

// newWorld writes program and manifest into a fresh folder.
func newWorld(t *testing.T, b backend, program, manifest string) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, program: filepath.Join(dir, "program.air.json"),
		manifest: filepath.Join(dir, "touba.manifest.json"), backend: b,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}}
	t.Cleanup(w.client.CloseIdleConnections)
	for path, content := range map[string]string{w.program: program, w.manifest: manifest} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// start runs `serve` on the world's backend with extra flags (the default
// --workers unless extra names it) and waits until it listens.
func (w *world) start(extra ...string) {
	w.t.Helper()
	args := append([]string{"serve", w.program, "--manifest", w.manifest}, w.backend.args(w.dir)...)
	args = append(args, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", filepath.Join(w.dir, "admin.sock"), "--log-level", "info")
	w.daemon = testkit.Start(w.t, hmacEnv, append(args, extra...)...)
}

// cli runs a touba-trigger command against the daemon's admin socket.
func (w *world) cli(args ...string) {
	w.t.Helper()
	out, err := exec.Command(testkit.Binary(w.t), append(args, "--admin-socket", filepath.Join(w.dir, "admin.sock"))...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// post sends one delivery to trigger (the part of its ref after
// "trigger:") and returns the queue id of its 202, or an error.
func (w *world) post(trigger, eventID, body string) (string, error) {
	req, err := http.NewRequest(http.MethodPost, w.daemon.URL()+"/triggers/"+trigger, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", eventID)
	resp, err := w.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
		Status  string `json:"status"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("%s %s: status %d: %s", trigger, eventID, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.QueueID == "" || a.Status != "enqueued" {
		return "", fmt.Errorf("%s %s: answer %s (%v)", trigger, eventID, raw, err)
	}
	return a.QueueID, nil
}

// batch is n deliveries to one trigger, event ids prefix-0 ... prefix-(n-1).
type batch struct {
	trigger, prefix string
	n               int
}

// postAll posts every delivery of the batches from clients goroutines at
// once (the batches interleaved), each answered 202 enqueued, and fails
// the test otherwise. It returns how long the posting took.
func (w *world) postAll(clients int, batches ...batch) time.Duration {
	w.t.Helper()
	type item struct {
		trigger, id string
		n           int
	}
	var items []item
	for i := 0; ; i++ {
		more := false
		for _, b := range batches {
			if i < b.n {
				items = append(items, item{b.trigger, fmt.Sprintf("%s-%05d", b.prefix, i), i})
				more = true
			}
		}
		if !more {
			break
		}
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return
				}
				it := items[i]
				if _, err := w.post(it.trigger, it.id, fmt.Sprintf(`{"n": %d}`, it.n)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					next.Store(int64(len(items))) // stop the others: the test fails
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if len(errs) > 0 {
		w.t.Fatalf("posting %d deliveries: %d refused, first: %v", len(items), len(errs), errs[0])
	}
	w.t.Logf("%s: posted %d deliveries from %d clients in %v (%.0f/s)", w.backend.name(), len(items), clients,
		took.Round(time.Millisecond), float64(len(items))/took.Seconds())
	return took
}

// Bounds of the latency measurements.
const (
	latencyBound = 2 * time.Second  // SPEC §2.1: another trigger's entry is not held behind a backlog
	giveUp       = 30 * time.Second // after the last ack: a failing run ends, with its numbers
	pollEvery    = 20 * time.Millisecond
)

// latency is what was seen of one entry: its 202's time and the time its
// state was first seen terminal.
type latency struct {
	id     string
	ack    time.Time
	state  string
	seenAt time.Time
}

func (l latency) took() time.Duration { return l.seenAt.Sub(l.ack) }

// measure posts n deliveries to trigger one after the other and, from a
// poller started before the first, reads their states every pollEvery
// until each is terminal or giveUp has passed since the last ack. It
// checks each entry is done within bound of its own 202 and logs every
// latency.
func (w *world) measure(trigger, prefix string, n int, bound time.Duration) {
	w.t.Helper()
	var mu sync.Mutex
	var entries []*latency
	postErr := make(chan error, 1)
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		for i := 0; i < n; i++ {
			id, err := w.post(trigger, fmt.Sprintf("%s-%02d", prefix, i), fmt.Sprintf(`{"n": %d}`, i))
			ack := time.Now()
			if err != nil {
				postErr <- err
				return
			}
			mu.Lock()
			entries = append(entries, &latency{id: id, ack: ack})
			mu.Unlock()
		}
	}()

	ctx := context.Background()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var lastAck time.Time
	postsDone := false
	for {
		if !postsDone {
			select {
			case <-posted:
				postsDone = true
				select {
				case err := <-postErr:
					w.t.Fatalf("posting %s: %v", trigger, err)
				default:
				}
			default:
			}
		}
		mu.Lock()
		var open []string
		byID := map[string]*latency{}
		for _, e := range entries {
			if e.seenAt.IsZero() {
				open = append(open, e.id)
				byID[e.id] = e
			}
			lastAck = e.ack
		}
		total := len(entries)
		mu.Unlock()
		if postsDone && total == n && len(open) == 0 {
			break
		}
		if len(open) > 0 {
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := w.backend.statuses(qctx, open)
			cancel()
			if err != nil {
				w.t.Fatalf("reading the entries' states: %v", err)
			}
			now := time.Now()
			for id, s := range st {
				if s == "done" || s == "failed" || s == "parked" || s == "cancelled" {
					byID[id].state, byID[id].seenAt = s, now
				}
			}
		}
		if postsDone && !lastAck.IsZero() && time.Since(lastAck) > giveUp {
			break
		}
		<-tick.C
	}

	mu.Lock()
	defer mu.Unlock()
	var lats []string
	var worst time.Duration
	late := 0
	for _, e := range entries {
		switch {
		case e.seenAt.IsZero():
			lats = append(lats, fmt.Sprintf(">%v (not done)", time.Since(e.ack).Round(time.Millisecond)))
			late++
			worst = max(worst, time.Since(e.ack))
		case e.state != "done":
			lats = append(lats, fmt.Sprintf("%v (%s)", e.took().Round(time.Millisecond), e.state))
			late++
		default:
			lats = append(lats, e.took().Round(time.Millisecond).String())
			worst = max(worst, e.took())
			if e.took() > bound {
				late++
			}
		}
	}
	w.t.Logf("%s: %s's %d entries, ack to done: %s; worst %v", w.backend.name(), trigger, n,
		strings.Join(lats, " "), worst.Round(time.Millisecond))
	if late > 0 {
		w.t.Errorf("%d of %s's %d entries not done within %v of their 202 (worst %v; gave up %v after the last ack)",
			late, trigger, n, bound, worst.Round(time.Millisecond), giveUp)
	}
}
