// Package storetest is the conformance suite of the storage interfaces of
// package touba (QueueStore, RunStore, DeliveryLog, AuditLog, EffectJournal):
// every behaviour the intake, the dispatcher and the operators' commands rely
// on, written against the interfaces only, so that every backend (the SQLite
// files today, PostgreSQL later) runs the same tests unchanged:
//
//	func TestConformance(t *testing.T) { storetest.Run(t, myFactory{}) }
//
// The suite imports nothing but package touba and the standard library. It
// drives time through Options.Now, so due times, retention cutoffs and
// timestamps are checked exactly and no test sleeps.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Options are what a test asks of the stores it opens. A factory passes
// each one to its backend; zero values ask for the backend's defaults.
type Options struct {
	// Now is the clock of every stored timestamp and every due-time or
	// cutoff comparison the stores make. Always set by the suite.
	Now func() time.Time
	// MaxPending is the queue's --max-pending; 0 for the default.
	MaxPending int64
	// Secrets are resolved secret values the journal must refuse to store.
	Secrets []string
	// LogMaxRows and LogMaxAge bound the delivery log (SPEC §6); 0 for the
	// defaults. Only the bound test sets them, with Stores.PruneLog.
	LogMaxRows int64
	LogMaxAge  time.Duration
	// LeaseTTL is how long a lease lasts unrenewed, for backends whose
	// leases expire (Stores.LeasesExpire); 0 for the default.
	LeaseTTL time.Duration
}

// Stores is one open set of stores on one storage.
type Stores struct {
	Queue   touba.QueueStore
	State   touba.StateStore
	Journal touba.EffectJournal
	// PruneLog applies the delivery log's bounds now, as the backend does
	// on its own from time to time. Nil when the backend cannot be asked
	// to: the bound test is then skipped.
	PruneLog func(ctx context.Context) error
	// History forgets past --history (SPEC §8.1); nil when the backend
	// does not: the history tests are then skipped.
	History touba.HistoryStore
	// LeasesExpire says that a lease ends Options.LeaseTTL after it was
	// taken or renewed, on the Options.Now clock, and that stores opened
	// with OpenAgain are another node that may then take the entry over
	// (SPEC §8). The take-over tests are skipped without it.
	LeasesExpire bool
	// Private is the factory's own record of what it opened (paths,
	// options, handles), for Reopen and OpenAgain. The suite never reads it.
	Private any
}

// Factory opens stores for the suite. Every method registers with
// t.Cleanup whatever it must close; the suite closes nothing itself.
type Factory interface {
	// Open opens stores on fresh, empty storage.
	Open(t *testing.T, o Options) Stores
	// Reopen is a clean restart: it closes old's stores and opens the same
	// storage again, with the same options.
	Reopen(t *testing.T, old Stores) Stores
	// OpenAgain opens a second, independent set of stores on the same
	// storage while old stays open, as a new process after a crash (old
	// then plays the dead one) or another node would. Old is closed only
	// at the end of the test.
	OpenAgain(t *testing.T, old Stores) Stores
}

// Run runs the whole suite against f, each behaviour as its own sub-test.
func Run(t *testing.T, f Factory) {
	t.Run("Queue", func(t *testing.T) { runQueue(t, f) })
	t.Run("Lease", func(t *testing.T) { runLease(t, f) })
	t.Run("QueueReads", func(t *testing.T) { runQueueReads(t, f) })
	t.Run("Runs", func(t *testing.T) { runRuns(t, f) })
	t.Run("DeliveryLog", func(t *testing.T) { runDeliveryLog(t, f) })
	t.Run("Keyset", func(t *testing.T) { runKeyset(t, f) })
	t.Run("Search", func(t *testing.T) { runSearch(t, f) })
	t.Run("Audit", func(t *testing.T) { runAudit(t, f) })
	t.Run("Journal", func(t *testing.T) { runJournal(t, f) })
	t.Run("JournalTransitions", func(t *testing.T) { runTransitions(t, f) })
	t.Run("JournalRecovery", func(t *testing.T) { runRecovery(t, f) })
	t.Run("JournalOperators", func(t *testing.T) { runJournalOperators(t, f) })
	t.Run("Fencing", func(t *testing.T) { runFencing(t, f) })
	t.Run("Holds", func(t *testing.T) { runHolds(t, f) })
	t.Run("Ticks", func(t *testing.T) { runTicks(t, f) })
	t.Run("Waits", func(t *testing.T) { runWaits(t, f) })
	t.Run("Fair", func(t *testing.T) { runFair(t, f) })
	t.Run("Gather", func(t *testing.T) { runGather(t, f) })
	t.Run("Routes", func(t *testing.T) { runRoutes(t, f) })
	t.Run("History", func(t *testing.T) { runHistory(t, f) })
}

// Epoch is where every test's clock starts: a whole second, so stored
// millisecond timestamps compare equal to the clock's.
var Epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// clock is the settable time of one test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is one test's stores and clock.
type env struct {
	Stores
	clock *clock
	f     Factory
	ctx   context.Context
}

// open opens fresh stores with o, on a clock starting at Epoch.
func open(t *testing.T, f Factory, o Options) *env {
	t.Helper()
	c := &clock{t: Epoch}
	o.Now = c.Now
	return &env{Stores: f.Open(t, o), clock: c, f: f, ctx: context.Background()}
}

// reopen is a clean restart of e's storage.
func (e *env) reopen(t *testing.T) *env {
	t.Helper()
	return &env{Stores: e.f.Reopen(t, e.Stores), clock: e.clock, f: e.f, ctx: e.ctx}
}

// again opens a second set of stores on e's storage; e stays open.
func (e *env) again(t *testing.T) *env {
	t.Helper()
	return &env{Stores: e.f.OpenAgain(t, e.Stores), clock: e.clock, f: e.f, ctx: e.ctx}
}

// digest is what intake stores as a delivery's digest.
func digest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

// delivery is a delivery of trigger:t with event id and body.
func delivery(eventID, body string) *touba.Delivery {
	return &touba.Delivery{TriggerRef: "trigger:t", EventID: eventID, Digest: digest(body), Body: []byte(body),
		Headers: map[string]string{"Content-Type": "application/json"}, RemoteAddr: "192.0.2.1:4242"}
}

// eventually waits, up to a deadline, for cond to hold: for what a store
// writes without waiting (run history, the delivery log before Flush).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
