package dispatcher_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/journal"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/queue"
	"github.com/touba/touba-trigger/state"
	"github.com/touba/touba-trigger/trigger"
)

// handlerBin is the process handler of testdata/handler, built by TestMain.
var handlerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "touba-dispatcher-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		handlerBin = filepath.Join(dir, "handler")
		cmd := exec.Command(gobin, "build", "-o", handlerBin, "./testdata/handler")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build test handler:", err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// waitFor bounds every wait on a condition; generous, since -race and a
// loaded machine slow child processes down.
const waitFor = 30 * time.Second

// world is what serve runs, on real files in a temporary folder: the
// journal lock, the effect journal (recovered), the queue, the state file
// and a dispatcher. It can be stopped and opened again on the same files,
// as a restart of the daemon would.
type world struct {
	tb    testing.TB
	dir   string
	env   map[string]string // what the manifest's secret references read
	stubs *dispatcher.Stubs // kept across restarts and reloads, so tests can count calls

	lock *journal.Lock
	j    *journal.Journal
	q    *queue.Queue
	st   *state.State
	d    *dispatcher.Dispatcher
}

// newWorld writes the program and manifest, opens the files and, unless
// start is false, starts a dispatcher. Everything closes at cleanup.
func newWorld(tb testing.TB, program, manifestJSON string, env map[string]string, start bool) *world {
	tb.Helper()
	w := &world{tb: tb, dir: tb.TempDir(), env: env, stubs: &dispatcher.Stubs{}}
	w.write("program.air.json", program)
	w.write("touba.manifest.json", manifestJSON)
	w.open()
	tb.Cleanup(w.close)
	if start {
		w.start()
	}
	return w
}

func (w *world) write(name, data string) {
	w.tb.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, name), []byte(data), 0o600); err != nil {
		w.tb.Fatal(err)
	}
}

func (w *world) path(name string) string { return filepath.Join(w.dir, name) }

// config loads the program and manifest as serve does: strictly, tools
// checked both ways, secrets resolved.
func (w *world) config() *dispatcher.Config {
	w.tb.Helper()
	p, err := trigger.LoadProgram(w.path("program.air.json"))
	if err != nil {
		w.tb.Fatalf("program: %v", err)
	}
	m, err := manifest.Load(w.path("touba.manifest.json"))
	if err != nil {
		w.tb.Fatalf("manifest: %v", err)
	}
	if err := p.CheckTools(func(ref string) bool { return m.Bindings[ref] != nil }); err != nil {
		w.tb.Fatal(err)
	}
	if err := m.CheckUsage(p.ToolRefs()); err != nil {
		w.tb.Fatal(err)
	}
	res, err := m.Resolve(func(name string) (string, bool) { v, ok := w.env[name]; return v, ok })
	if err != nil {
		w.tb.Fatalf("resolve secrets: %v", err)
	}
	c, err := dispatcher.NewConfig(p, m, res, true, w.stubs, zerolog.Nop())
	if err != nil {
		w.tb.Fatal(err)
	}
	return c
}

// open takes the lock and opens the three files, recovering the journal
// and interrupted runs first, in serve's order.
func (w *world) open() {
	w.tb.Helper()
	ctx := context.Background()
	jpath := w.path("journal.sqlite")
	lock, err := journal.AcquireLock(jpath, journal.LockOptions{})
	if err != nil {
		w.tb.Fatal(err)
	}
	w.lock = lock
	cfg := w.config()
	if w.j, err = journal.Open(ctx, jpath, journal.Options{Secrets: cfg.Secrets}); err != nil {
		w.tb.Fatal(err)
	}
	if _, err := w.j.Recover(ctx); err != nil {
		w.tb.Fatal(err)
	}
	if w.q, err = queue.Open(ctx, w.path("queue.sqlite"), queue.Options{}); err != nil {
		w.tb.Fatal(err)
	}
	if w.st, err = state.Open(ctx, w.path("state.sqlite"), state.Options{}); err != nil {
		w.tb.Fatal(err)
	}
	if _, err := w.st.InterruptRuns(ctx); err != nil {
		w.tb.Fatal(err)
	}
}

// start runs a dispatcher with three workers on the open files.
func (w *world) start() {
	w.tb.Helper()
	w.d = dispatcher.New(w.q, w.st, w.j, w.config(), dispatcher.Options{Workers: 3,
		PollInterval: 10 * time.Millisecond, Log: zerolog.Nop()})
	if err := w.d.Start(context.Background()); err != nil {
		w.tb.Fatal(err)
	}
}

// stop closes the dispatcher, giving running handlers grace.
func (w *world) stop(grace time.Duration) {
	if w.d != nil {
		w.d.Close(grace)
		w.d = nil
	}
}

// close stops everything and releases the lock, as a clean exit does.
func (w *world) close() {
	w.stop(waitFor)
	if w.j == nil {
		return
	}
	for _, err := range []error{w.j.Close(), w.q.Close(), w.st.Close(), w.lock.Release()} {
		if err != nil {
			w.tb.Errorf("close: %v", err)
		}
	}
	w.j, w.q, w.st, w.lock = nil, nil, nil, nil
}

// restart closes the files and opens them again with a new dispatcher.
func (w *world) restart() {
	w.tb.Helper()
	w.close()
	w.open()
	w.start()
}

// reload rewrites the program and hands the dispatcher the new
// configuration, as SIGHUP does.
func (w *world) reload(program string) {
	w.tb.Helper()
	w.write("program.air.json", program)
	w.d.SetConfig(w.config())
}

// enqueue stores a delivery of trigger:name and wakes the dispatcher.
func (w *world) enqueue(name, body string, headers map[string]string) string {
	w.tb.Helper()
	res, err := w.q.Enqueue(context.Background(), &touba.Delivery{TriggerRef: "trigger:" + name,
		EventID: "ev-" + uuidv7.New(), Digest: dedupe.Digest([]byte(body)), Body: []byte(body), Headers: headers})
	if err != nil {
		w.tb.Fatal(err)
	}
	if w.d != nil {
		w.d.Notify()
	}
	return res.QueueID
}

// entry returns the queue entry qid.
func (w *world) entry(qid string) *touba.Delivery {
	w.tb.Helper()
	e, err := w.q.Get(context.Background(), qid)
	if err != nil || e == nil {
		w.tb.Fatalf("entry %s: %v, %v", qid, e, err)
	}
	return e
}

// wait returns entry qid once it is in status, or fails the test at the
// deadline with what the entry and its runs looked like.
func (w *world) wait(qid, status string) *touba.Delivery {
	w.tb.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		e := w.entry(qid)
		if e.Status == status {
			return e
		}
		if time.Now().After(deadline) {
			runs, _ := w.st.Runs(context.Background(), qid)
			w.tb.Fatalf("entry %s is %s (attempts %d, code %q), want %s; runs so far: %+v", qid, e.Status, e.Attempts, e.ErrorCode, status, runs)
		}
		<-tick.C
	}
}

// until waits for cond, failing the test at the deadline.
func (w *world) until(what string, cond func() bool) {
	w.tb.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			w.tb.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// replay puts a failed or parked entry back to pending, as an operator's
// `queue replay` does.
func (w *world) replay(qid string) {
	w.tb.Helper()
	res, err := w.q.Replay(context.Background(), []string{qid})
	if err != nil {
		w.tb.Fatal(err)
	}
	if len(res) != 1 || res[0].From == "" {
		w.tb.Fatalf("replay %s: %+v", qid, res)
	}
	if w.d != nil {
		w.d.Notify()
	}
}

// effect returns the journaled effect of step stepID of entry qid, or nil.
func (w *world) effect(qid, stepID string) *journal.Effect {
	w.tb.Helper()
	e, err := w.j.Get(context.Background(), qid, qid+":"+stepID)
	if err != nil {
		w.tb.Fatal(err)
	}
	return e
}

// effects returns every journaled effect of entry qid.
func (w *world) effects(qid string) []journal.Effect {
	w.tb.Helper()
	es, err := w.j.List(context.Background(), journal.Filter{Scope: qid})
	if err != nil {
		w.tb.Fatal(err)
	}
	return es
}

// steps returns the checkpointed step outputs of entry qid.
func (w *world) steps(qid string) map[string]state.StepOutput {
	w.tb.Helper()
	s, err := w.st.Steps(context.Background(), qid)
	if err != nil {
		w.tb.Fatal(err)
	}
	return s
}

// forgetCheckpoint deletes the checkpoint of one step, as if the process
// had died after the journal recorded the outcome and before the state
// file recorded the step: the next run must ask the journal.
func (w *world) forgetCheckpoint(qid, stepID string) {
	w.tb.Helper()
	res, err := w.st.DB().Write.Exec(`DELETE FROM run_steps WHERE queue_id = ? AND step_id = ?`, qid, stepID)
	if err != nil {
		w.tb.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		w.tb.Fatalf("checkpoint %s/%s: %d rows deleted, want 1", qid, stepID, n)
	}
}

// journalSQL runs one statement on the journal file through a connection
// of its own, for rows the journal's API refuses to write.
func (w *world) journalSQL(query string, args ...any) {
	w.tb.Helper()
	db, err := sql.Open("sqlite3", "file:"+w.path("journal.sqlite")+"?_busy_timeout=10000")
	if err != nil {
		w.tb.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(query, args...); err != nil {
		w.tb.Fatalf("journal SQL: %v", err)
	}
}

// waitRuns waits until the run history of entry qid holds n runs (it is
// written after the entry's state, without waiting for its commit) and
// returns them, oldest first.
func (w *world) waitRuns(qid string, n int) []state.Run {
	w.tb.Helper()
	var rs []state.Run
	w.until(fmt.Sprintf("%d runs of %s", n, qid), func() bool {
		var err error
		if rs, err = w.st.Runs(context.Background(), qid); err != nil {
			w.tb.Fatal(err)
		}
		return len(rs) >= n
	})
	if len(rs) != n {
		w.tb.Fatalf("entry %s has %d runs, want %d: %+v", qid, len(rs), n, rs)
	}
	return rs
}
