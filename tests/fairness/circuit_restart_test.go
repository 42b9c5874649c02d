package fairness_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/touba/touba-trigger/internal/testkit"
)

// testCircuitOutlivesRestart (SPEC §2.2 circuit, issue 43): A's remote
// answers 503 to everything and A's circuit opens for a minute; the daemon
// is killed (-9) and started again on the same files or database. The
// restarted daemon reads the open circuit before any call: the remote sees
// no try until open_ms has passed. On SQLite a restart used to forget the
// circuit, and min_calls more tries (and their in-call retries) reached
// the failing remote before it opened again.
func testCircuitOutlivesRestart(t *testing.T, b backend) {
	r := newRemote(t, 0, http.StatusServiceUnavailable, false)
	w := newWorld(t, b, stallProgram, stallManifest(r.url("/a"),
		`"circuit": {"failure_ratio": 0.5, "min_calls": 5, "window_ms": 60000, "open_ms": 60000},`))
	w.start("--take-over-stale-lock")
	w.postAll(postClients, batch{"fair/A", "a", 50})
	w.daemon.WaitLog(`"event":"circuit.open"`, circuitOpenWait)
	w.daemon.Kill()
	// The killed daemon's requests already sent are served before the
	// server reads the end of their connections: once none is open, the
	// count holds all of them.
	testkit.WaitFor(t, 10*time.Second, func() bool { return r.conns.Load() == 0 }, "the killed daemon's connections closed")
	before := r.count("/a")
	w.start("--take-over-stale-lock")
	// The restarted daemon's runs of A resume (their entries were running
	// at the kill); each passes the circuit first, which reads the stored
	// state: open, so the daemon logs the circuit open without a call.
	// Without the stored state they call, and after min_calls failures
	// the circuit opens again, logged the same way.
	w.daemon.WaitLog(`"event":"circuit.open"`, circuitOpenWait)
	if after := r.count("/a") - before; after != 0 {
		t.Fatalf("%s: the failing remote got %d tries after the restart, want none while the circuit it left open lasts",
			b.name(), after)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		code, _ := testkit.Post(t, w.daemon.URL()+"/triggers/fair/B", "b-after", `{"n": 1}`)
		return code == http.StatusAccepted || code == http.StatusOK
	}, "the restarted daemon takes deliveries")
}

func TestCircuitOutlivesRestartSQLite(t *testing.T) { testCircuitOutlivesRestart(t, newSQLite(t)) }

func TestCircuitOutlivesRestartPostgres(t *testing.T) { testCircuitOutlivesRestart(t, newPostgres(t)) }

// testCircuitCountsTries (SPEC §2.2 circuit, issue 43): one delivery of A,
// whose webhook retries a 503 inside the call (six tries at most), and a
// circuit of min_calls 5. Each failed try counts as it fails, so the fifth
// opens the circuit and the call sends no sixth. Counting only ended calls,
// one call of six tries never reached min_calls, and a backlog sent
// min_calls times six tries before the circuit could open.
func testCircuitCountsTries(t *testing.T, b backend) {
	r := newRemote(t, 0, http.StatusServiceUnavailable, false)
	w := newWorld(t, b, stallProgram, stallManifest(r.url("/a"),
		`"circuit": {"failure_ratio": 0.5, "min_calls": 5, "window_ms": 60000, "open_ms": 60000},`))
	w.start()
	if _, err := w.post("fair/A", "a-1", `{"n": 1}`); err != nil {
		t.Fatal(err)
	}
	w.daemon.WaitLog(`"event":"circuit.open"`, circuitOpenWait)
	w.daemon.WaitLog(`"message":"webhook call failed"`, circuitOpenWait)
	if n := r.count("/a"); n != 5 {
		t.Fatalf("%s: the remote got %d tries of the one call, want 5: the circuit opens at the fifth failed try and stops the call", b.name(), n)
	}
}

func TestCircuitCountsTriesSQLite(t *testing.T) { testCircuitCountsTries(t, newSQLite(t)) }

func TestCircuitCountsTriesPostgres(t *testing.T) { testCircuitCountsTries(t, newPostgres(t)) }
