package fairness_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// stallProgram: trigger A calls the slow (or failing) webhook remote;
// trigger B calls an in-process accounting stub, so B's runs take no time
// of their own: any delay of B's is the dispatcher's.
const stallProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:fair/A", "source": {"kind": "webhook"},
   "steps": [{"id": "call", "tool": "tool:fair/Remote", "input": {"n": {"$ref": "/event/body/n"}}}]},
  {"ref": "trigger:fair/B", "source": {"kind": "webhook"},
   "steps": [{"id": "bill", "tool": "tool:fair/Bill", "input": {"n": {"$ref": "/event/body/n"}}}]}]}`

// stallManifest binds A's step to the webhook at url, with extra fields of
// the binding (max_concurrency, circuit) before its contract, and B's to
// the accounting stub. Both are external writes whose remote deduplicates
// by Idempotency-Key, so a 5xx or a timeout is retried inside the call.
func stallManifest(url, extra string) string {
	return fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {
  "tool:fair/Remote": {
    "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 5},
                "credentials": {"hmac_secret": {"env": "FAIR_HMAC"}}},
    %s
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}},
  "tool:fair/Bill": {"handler": {"kind": "accounting_stub"},
    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, url, extra)
}

// The size of B's probe: its entries are posted after A's backlog is in
// place, and each must be done within latencyBound of its own 202.
const probes = 10

// postClients is how many goroutines post A's backlog at once.
const postClients = 32

// Flood sizes: A's backlog on SQLite and on PostgreSQL. With the remote
// taking 1 s a call and the default 256 workers, A drains at most 256 a
// second, so either backlog outlasts B's probe many times over.
const (
	floodSQLite   = 3000
	floodPostgres = 3000
)

// testFlood (SPEC §2.1 dispatch): A's step calls a webhook that takes 1 s;
// A receives a backlog of n deliveries, then B receives 10. B's share of
// the workers (equal weights: half of them) is free within one of A's calls,
// so each of B's entries must be done within 2 s of its 202, however long
// A's backlog is. A's binding turns off the default max_concurrency (and
// circuit) of a webhook, so that A's calls, not a hold, take the workers.
func testFlood(t *testing.T, b backend, n int) {
	r := newRemote(t, time.Second, http.StatusOK, false)
	w := newWorld(t, b, stallProgram, stallManifest(r.url("/a"), `"max_concurrency": 0, "circuit": null,`))
	w.start()
	w.postAll(postClients, batch{"fair/A", "a", n})
	w.measure("fair/B", "b", probes, latencyBound)
	t.Logf("%s: A's calls answered by the end: %d of %d", b.name(), r.count("/a"), n)
}

func TestFloodDoesNotDelayOtherTriggerSQLite(t *testing.T) {
	testFlood(t, newSQLite(t), floodSQLite)
}

func TestFloodDoesNotDelayOtherTriggerPostgres(t *testing.T) {
	testFlood(t, newPostgres(t), floodPostgres)
}

// slotsBacklog is A's backlog behind its binding's max_concurrency 5: at 1 s
// a call, 5 a second, it lasts two minutes.
const slotsBacklog = 600

// testSlotCap (SPEC §2.2 max_concurrency, "Holds take nothing"): A's binding
// allows 5 calls in flight and its remote takes 1 s; 600 of A are queued.
// A's runs waiting for a slot hold no worker, so B's 10 entries each run at
// once: done within 2 s of their 202.
func testSlotCap(t *testing.T, b backend) {
	r := newRemote(t, time.Second, http.StatusOK, false)
	w := newWorld(t, b, stallProgram, stallManifest(r.url("/a"), `"max_concurrency": 5,`))
	w.start()
	w.postAll(postClients, batch{"fair/A", "a", slotsBacklog})
	w.measure("fair/B", "b", probes, latencyBound)
	t.Logf("%s: A's calls answered by the end: %d of %d", b.name(), r.count("/a"), slotsBacklog)
}

func TestSlotCapDoesNotStallOtherTriggerSQLite(t *testing.T) { testSlotCap(t, newSQLite(t)) }

func TestSlotCapDoesNotStallOtherTriggerPostgres(t *testing.T) { testSlotCap(t, newPostgres(t)) }

// circuitBacklog is A's backlog when its remote fails.
const circuitBacklog = 600

// circuitOpenWait bounds the wait for A's circuit to open: the first calls
// end after their 6 tries (about 6 s of backoff between them).
const circuitOpenWait = 60 * time.Second

// testOpenCircuit (SPEC §2.2 circuit, "Holds take nothing"): A's remote
// answers 503 to everything; A's binding has a circuit (half of at least 5
// calls failing opens it for 30 s) and retries 5xx inside the call
// (idempotency_key). 600 of A are queued; once the daemon logs that the
// circuit opened, B's 10 entries are posted: A's runs waiting on the open
// circuit hold no worker, and calls in flight send no further tries, so
// each of B's entries is done within 2 s of its 202.
func testOpenCircuit(t *testing.T, b backend) {
	r := newRemote(t, 0, http.StatusServiceUnavailable, false)
	w := newWorld(t, b, stallProgram, stallManifest(r.url("/a"),
		`"circuit": {"failure_ratio": 0.5, "min_calls": 5, "window_ms": 60000, "open_ms": 30000},`))
	w.start()
	start := time.Now()
	w.postAll(postClients, batch{"fair/A", "a", circuitBacklog})
	w.daemon.WaitLog(`"event":"circuit.open"`, circuitOpenWait)
	t.Logf("%s: circuit open %v after the first of A's deliveries; the remote answered %d tries",
		b.name(), time.Since(start).Round(time.Millisecond), r.count("/a"))
	w.measure("fair/B", "b", probes, latencyBound)
}

func TestOpenCircuitDoesNotStallOtherTriggerSQLite(t *testing.T) { testOpenCircuit(t, newSQLite(t)) }

func TestOpenCircuitDoesNotStallOtherTriggerPostgres(t *testing.T) {
	testOpenCircuit(t, newPostgres(t))
}
