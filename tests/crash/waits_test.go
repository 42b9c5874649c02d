package crash_test

// Durable steps (SPEC §2.3) under crashes: the files waits_*_test.go kill
// the daemon at the crash points of sleeps, waits, matches, cancels and
// schedule ticks (waits_points_test.go, waits_tick_test.go), at random
// moments under a mixed load (waits_kill_test.go), and on PostgreSQL
// (waits_pg_test.go), and check the same promises as the rest of the
// package (waits_check_test.go): nothing acknowledged is lost, no write
// is repeated, each wait ends once and each tick is one entry. This file
// holds their world: a program of orders that write, sleep, wait for
// their payment and confirm, cancelled by a refund; waits_store_test.go
// reads the queue and its waits while the daemon runs, and
// waits_harness_test.go runs the daemon to and through a crash point.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The triggers of the wait program, by URL path.
const (
	ordersPath   = "crash/Orders"
	paymentsPath = "crash/Payments"
	refundsPath  = "crash/Refunds"
	ticksPath    = "crash/Ticks"
)

// The steps of the wait program besides write and confirm.
const (
	stepNap  = "nap"
	stepPaid = "paid"
	stepTick = "write" // the schedule's one step
)

// waitProg says which durable steps the orders trigger has, between its
// write and its confirm: a sleep (nap, the JSON of the sleep object, ""
// for none), a wait for the order's payment (paid), and a cancel_on by a
// refund (cancel).
type waitProg struct {
	nap    string
	paid   bool
	cancel bool
}

// napMS is a sleep of ms milliseconds; napUntil sleeps until the order's
// nap_until (orderBody).
func napMS(ms int) string { return fmt.Sprintf(`{"ms": %d}`, ms) }

const napUntil = `{"until": {"$ref": "/event/body/nap_until"}}`

// String is the program file. confirm takes the write's receipt, the
// sleep's woke_at and the matched payment's event id through $ref, so the
// remote's record shows which outputs the last step saw after the crashes.
func (p waitProg) String() string {
	steps := []string{`{"id": "write", "tool": "tool:crash/Write", "input": {"order": {"$ref": "/event/body"}}}`}
	confirm := `"order": {"$ref": "/event/body"}, "prev": {"$ref": "/steps/write/output/receipt"}`
	if p.nap != "" {
		steps = append(steps, `{"id": "nap", "sleep": `+p.nap+`}`)
		confirm += `, "woke": {"$ref": "/steps/nap/output/woke_at"}`
	}
	if p.paid {
		steps = append(steps, `{"id": "paid", "wait_for": {"trigger": "trigger:crash/Payments",
		  "match": {"$ref": "/event/body/order_id"}, "on": "/body/order_id"}}`)
		confirm += `, "paid": {"$ref": "/steps/paid/output/event_id"}`
	}
	steps = append(steps, `{"id": "confirm", "tool": "tool:crash/Write", "input": {`+confirm+`}}`)
	cancel := ""
	if p.cancel {
		cancel = `"cancel_on": [{"trigger": "trigger:crash/Refunds", "match": {"$ref": "/event/body/order_id"}, "on": "/body/order_id"}],`
	}
	return `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:crash/Orders", "source": {"kind": "webhook"}, ` + cancel + `
   "steps": [` + strings.Join(steps, ",\n     ") + `],
   "retry": {"max_attempts": 10, "initial_interval_ms": 50, "max_interval_ms": 200}},
  {"ref": "trigger:crash/Payments", "source": {"kind": "webhook"}, "steps": []},
  {"ref": "trigger:crash/Refunds", "source": {"kind": "webhook"}, "steps": []}]}`
}

// waitWorld is a world running a wait program; it remembers every
// delivery it sent (acknowledged or not) so it can send it again as a
// sender would, and what each one is.
type waitWorld struct {
	*world
	mu   sync.Mutex
	sent map[string]sentDelivery // event id -> what was sent
}

// sentDelivery is one delivery the test sent: where, what, and the queue
// id of its answer ("" while unanswered).
type sentDelivery struct {
	path, body, order string // order: the order id it is about
	queueID           string
}

// newWaitWorld is newWorld (remote handler, retryMode) running prog.
func newWaitWorld(t *testing.T, retryMode string, prog fmt.Stringer) *waitWorld {
	t.Helper()
	w := &waitWorld{world: newWorld(t, retryMode, oneShotKind), sent: map[string]sentDelivery{}}
	w.setProgram(prog)
	return w
}

// setProgram writes prog over the world's program file.
func (w *waitWorld) setProgram(prog fmt.Stringer) {
	w.t.Helper()
	if err := os.WriteFile(w.program, []byte(prog.String()), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// Event ids and bodies: order n is "order-n" with order id "o-n"; its
// payment is "pay-n" (a second payment "pay-n-2"), its refund "refund-n".
func orderEvent(n int) string   { return fmt.Sprintf("order-%d", n) }
func orderID(n int) string      { return fmt.Sprintf("o-%d", n) }
func paymentEvent(n int) string { return fmt.Sprintf("pay-%d", n) }
func refundEvent(n int) string  { return fmt.Sprintf("refund-%d", n) }

// orderBody is order n's body; napUntil (zero: none) is when a napUntil
// sleep ends.
func orderBody(n int, napUntil time.Time) string {
	m := map[string]any{"order_id": orderID(n), "amount": 42}
	if !napUntil.IsZero() {
		m["nap_until"] = napUntil.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func orderRefBody(n int) string { return fmt.Sprintf(`{"order_id":%q}`, orderID(n)) }

// post sends one delivery to d at path and records it as sent; ok is an
// answer that names its entry (202 enqueued or duplicate, 200 consumed),
// which records it as acknowledged. A transport error (the daemon died
// while answering) is no acknowledgement: ok false, err set.
func (w *waitWorld) post(d *testkit.Daemon, path, eventID, order, body string) (qid string, ok bool, err error) {
	w.mu.Lock()
	if _, seen := w.sent[eventID]; !seen {
		w.sent[eventID] = sentDelivery{path: path, body: body, order: order}
		w.order = append(w.order, eventID)
	}
	w.mu.Unlock()
	status, qid, err := postRaw(d.URL()+"/triggers/"+path, eventID, body)
	if err != nil {
		return "", false, err
	}
	if (status != http.StatusAccepted && status != http.StatusOK) || qid == "" {
		w.t.Errorf("post %s to %s: status %d, queue id %q; want 202 or 200 naming the entry", eventID, path, status, qid)
		return "", false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sent[eventID]
	if s.queueID != "" && s.queueID != qid {
		w.t.Errorf("%s answered with queue id %s, earlier %s: one identity, two entries", eventID, qid, s.queueID)
	}
	s.queueID = qid
	w.sent[eventID] = s
	w.acked[eventID] = qid
	return qid, true, nil
}

// mustPost is post that wants an acknowledgement.
func (w *waitWorld) mustPost(d *testkit.Daemon, path, eventID, order, body string) string {
	w.t.Helper()
	qid, ok, err := w.post(d, path, eventID, order, body)
	if !ok {
		w.t.Fatalf("post %s to %s: no acknowledgement (%v)\n%s", eventID, path, err, d.Log())
	}
	return qid
}

// resendAll sends every delivery not yet acknowledged again, as its
// sender would after a lost answer, until d acknowledges it.
func (w *waitWorld) resendAll(d *testkit.Daemon) {
	w.t.Helper()
	for _, id := range w.events() {
		s := w.delivery(id)
		if s.queueID != "" {
			continue
		}
		testkit.WaitFor(w.t, 30*time.Second, func() bool {
			_, ok, _ := w.post(d, s.path, id, s.order, s.body)
			return ok
		}, "the resent "+id+" acknowledged")
	}
}

// events are the event ids sent so far, in the order first sent.
func (w *waitWorld) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string{}, w.order...)
}

func (w *waitWorld) delivery(eventID string) sentDelivery {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent[eventID]
}

// qid is the queue id eventID was acknowledged with ("" if none).
func (w *waitWorld) qid(eventID string) string { return w.delivery(eventID).queueID }

// postRaw posts body to url with eventID and returns the status and the
// queue id of the answer; err is a transport error, which the crash tests
// expect when the daemon dies before it answers.
func postRaw(url, eventID, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("X-Touba-Event-Id", eventID)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	var a struct {
		QueueID string `json:"queue_id"`
		Error   struct {
			QueueID string `json:"queue_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return resp.StatusCode, "", fmt.Errorf("answer %q: %w", b, err)
	}
	return resp.StatusCode, a.QueueID + a.Error.QueueID, nil
}

// entryByEvent finds the entry of eventID among entries (by queue id).
func entryByEvent(entries map[string]*touba.Delivery, eventID string) *touba.Delivery {
	for _, e := range entries {
		if e.EventID == eventID {
			return e
		}
	}
	return nil
}

// waitEntries waits, up to pgWait, until cond holds of the entries as the
// store shows them now (the daemon may run).
func (w *world) waitEntries(what string, cond func(map[string]*touba.Delivery) bool) map[string]*touba.Delivery {
	w.t.Helper()
	var last map[string]*touba.Delivery
	// Each look opens the queue (or a database session): a slower poll
	// than testkit.WaitFor's leaves the daemon its machine.
	testkit.WaitForReport(w.t, pgWait, testkit.Every(25*time.Millisecond, func() bool {
		last = w.liveEntries()
		return cond(last)
	}), what, func() {
		counts := map[string]int{}
		for _, e := range last {
			counts[e.TriggerRef+" "+e.Status]++
		}
		w.t.Logf("the queue holds %v", counts)
	})
	return last
}

// allStatus is a waitEntries condition: every entry of eventIDs exists
// and is in one of statuses.
func allStatus(eventIDs []string, statuses ...string) func(map[string]*touba.Delivery) bool {
	return func(entries map[string]*touba.Delivery) bool {
		for _, id := range eventIDs {
			e := entryByEvent(entries, id)
			if e == nil {
				return false
			}
			ok := false
			for _, s := range statuses {
				ok = ok || e.Status == s
			}
			if !ok {
				return false
			}
		}
		return true
	}
}

// settledEntries is a waitEntries condition: no entry is pending,
// running or waiting.
func settledEntries(entries map[string]*touba.Delivery) bool {
	for _, e := range entries {
		switch e.Status {
		case touba.StatusPending, touba.StatusRunning, touba.StatusWaiting:
			return false
		}
	}
	return true
}
