package dispatcher_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/gobuild"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

// handlerBin is the process handler of testdata/handler, built by TestMain.
var handlerBin string

func TestMain(m *testing.M) {
	gobuild.Main(m, map[string]*string{"./testdata/handler": &handlerBin})
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

	in  *trigger.Intake                       // the HTTP intake, once a test posts (durable_helpers_test.go)
	srv *httptest.Server                      // serving in
	dp  atomic.Pointer[dispatcher.Dispatcher] // d, for the intake's goroutines
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
	c, err := dispatcher.NewConfig(p, m, res, true, w.stubs, dispatcher.Outbound{}, zerolog.Nop())
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
}

// start runs a dispatcher with three workers on the open files.
func (w *world) start() {
	w.tb.Helper()
	w.d = dispatcher.New(w.q, w.st, w.j, w.config(), dispatcher.Options{Workers: 3,
		PollInterval: 10 * time.Millisecond, Log: zerolog.Nop(), Waits: w.waits()})
	if err := w.d.Start(context.Background()); err != nil {
		w.tb.Fatal(err)
	}
	w.dp.Store(w.d)
}

// stop closes the dispatcher, giving running handlers grace.
func (w *world) stop(grace time.Duration) {
	if w.d != nil {
		w.dp.Store(nil)
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
	if w.in != nil {
		w.in.SetConfig(w.intakeConfig())
	}
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
