package durable_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The example's triggers.
const (
	refCheckout = "trigger:examples.durable/CheckoutCompleted"
	refPayment  = "trigger:examples.durable/PaymentSucceeded"
	refInvoice  = "trigger:examples.durable/InvoicePaymentFailed"
	refPaid     = "trigger:examples.durable/InvoicePaid"
	refNightly  = "trigger:examples.durable/NightlyCatchUp"
	refOrder    = "trigger:examples.durable/OrderPlaced"
)

// waitLong bounds every wait on a condition: far above what any of them
// takes (seconds), so a slow machine under -race does not fail a test.
const waitLong = 90 * time.Second

// program is the example's program file, decoded, for a test to edit.
type program map[string]any

func (p program) trigger(ref string) map[string]any {
	for _, tr := range p["triggers"].([]any) {
		if m := tr.(map[string]any); m["ref"] == ref {
			return m
		}
	}
	panic("no trigger " + ref)
}

func (p program) step(ref, id string) map[string]any {
	for _, s := range p.trigger(ref)["steps"].([]any) {
		if m := s.(map[string]any); m["id"] == id {
			return m
		}
	}
	panic("no step " + id + " in " + ref)
}

// sleeps sets the dunning's two sleeps.
func (p program) sleeps(wait1, wait2 time.Duration) {
	p.step(refInvoice, "wait_1")["sleep"] = map[string]any{"ms": wait1.Milliseconds()}
	p.step(refInvoice, "wait_2")["sleep"] = map[string]any{"ms": wait2.Milliseconds()}
}

// paymentTimeout sets the checkout's wait_for timeout.
func (p program) paymentTimeout(d time.Duration) {
	p.step(refCheckout, "paid")["wait_for"].(map[string]any)["timeout_ms"] = d.Milliseconds()
}

type world struct {
	t                                                   *testing.T
	dir, program, manifest, queue, state, journal, sock string
	d                                                   *testkit.Daemon
	reloads                                             int // "configuration reloaded" lines seen so far
}

// readExample returns the example's program, decoded.
func readExample(t *testing.T) program {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "durable", "program.air.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p program
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// newWorld is a folder holding a test copy of the example: its manifest
// as shipped, its handler at bin/handler, and its program with the order
// flow's retries made quick, then edited by edit (short sleeps and
// timeouts: each test sets its own).
func newWorld(t *testing.T, edit func(program)) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, dir: dir, program: filepath.Join(dir, "program.air.json"), manifest: filepath.Join(dir, "touba.manifest.json"),
		queue: filepath.Join(dir, "q.sqlite"), state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"),
		sock: filepath.Join(dir, "admin.sock")}
	m, err := os.ReadFile(filepath.Join("..", "..", "examples", "durable", "touba.manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.manifest, m, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(handlerBin, filepath.Join(dir, "bin", "handler")); err != nil {
		t.Fatal(err)
	}
	p := readExample(t)
	p.trigger(refOrder)["retry"] = map[string]any{"max_attempts": 2, "initial_interval_ms": 50, "max_interval_ms": 100}
	if edit != nil {
		edit(p)
	}
	w.write(p)
	return w
}

// write replaces the program file (a reload reads it on SIGHUP).
func (w *world) write(p program) {
	w.t.Helper()
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(w.program, b, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// start runs the daemon on the world's files. --take-over-stale-lock: a
// restart after SIGKILL finds the dead daemon's lock record of this host
// and boot. --allow-unisolated-handlers: the handler has no network grant,
// and not every test host can take it away.
func (w *world) start() *testkit.Daemon {
	w.t.Helper()
	w.d = testkit.Start(w.t, nil, "serve", w.program, "--manifest", w.manifest,
		"--queue", w.queue, "--state", w.state, "--effect-journal", w.journal, "--admin-socket", w.sock,
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--take-over-stale-lock", "--allow-unisolated-handlers",
		"--workers", "8", "--log-level", "info")
	w.reloads = 0
	return w.d
}

// stop ends the daemon with sig: SIGTERM must exit 0; SIGKILL leaves the
// files as a crash does.
func (w *world) stop(sig syscall.Signal) {
	w.t.Helper()
	w.d.Signal(sig)
	code := w.d.Wait(30 * time.Second)
	if sig == syscall.SIGTERM && code != 0 {
		w.t.Fatalf("SIGTERM: exit code %d, want 0\n%s", code, w.d.Log())
	}
}

// reload rewrites the program, sends SIGHUP and waits until the daemon
// says it took the new configuration.
func (w *world) reload(p program) {
	w.t.Helper()
	w.write(p)
	w.d.Signal(syscall.SIGHUP)
	w.reloads++
	testkit.WaitFor(w.t, waitLong, func() bool {
		if strings.Contains(w.d.Log(), "reload refused") {
			w.t.Fatalf("reload refused:\n%s", w.d.Log())
		}
		return strings.Count(w.d.Log(), "configuration reloaded") >= w.reloads
	}, "the daemon to reload")
}

// post sends body to the trigger ref (its event id read from the body,
// or the header eventID when not empty) and wants 202; it returns the
// queue id.
func (w *world) post(ref, eventID, body string) string {
	w.t.Helper()
	url := w.d.URL() + "/triggers/" + strings.TrimPrefix(ref, "trigger:")
	status, qid := testkit.Post(w.t, url, eventID, body, "Content-Type", "application/json")
	if status != 202 || qid == "" {
		w.t.Fatalf("post to %s: status %d, queue id %q, want 202 and an entry", ref, status, qid)
	}
	return qid
}

// cli runs an operator command against the daemon's socket or, when none
// runs, the world's files, and returns its stdout, stderr and error.
func (w *world) cli(args ...string) ([]byte, string, error) {
	w.t.Helper()
	cmd := exec.Command(testkit.Binary(w.t), append(args, "--admin-socket", w.sock, "--queue", w.queue,
		"--state-file", w.state, "--effect-journal", w.journal, "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = nil // not a terminal: the CLI must not ask
	err := cmd.Run()
	return stdout.Bytes(), stderr.String(), err
}

// cliJSON runs a command that must succeed and decodes its JSON.
func (w *world) cliJSON(out any, args ...string) {
	w.t.Helper()
	stdout, stderr, err := w.cli(args...)
	if err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
	}
	if out != nil {
		if err := json.Unmarshal(stdout, out); err != nil {
			w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stdout)
		}
	}
}

// shown is what the tests read of `queue show --json`: Waits are the
// entry's own sleeps and waits, MatchedWaits the waits of other entries
// its delivery matched.
type shown struct {
	QueueID      string             `json:"queue_id"`
	TriggerRef   string             `json:"trigger_ref"`
	EventID      string             `json:"event_id"`
	Status       string             `json:"status"`
	ErrorCode    string             `json:"error_code"`
	ErrorMessage string             `json:"error_message"`
	Runs         []touba.Run        `json:"runs"`
	Steps        []touba.StepOutput `json:"steps"`
	Effects      []touba.Effect     `json:"effects"`
	Waits        []touba.Wait       `json:"waits"`
	MatchedWaits []touba.Wait       `json:"matched_waits"`
	Body         *struct {
		Text string `json:"text"`
	} `json:"body"`
	Operator []touba.OperatorEvent `json:"operator_events"`
}

func (w *world) show(qid string) shown {
	w.t.Helper()
	var e shown
	w.cliJSON(&e, "queue", "show", qid)
	return e
}

// waitShow polls `queue show` until cond holds.
func (w *world) waitShow(qid, what string, cond func(shown) bool) shown {
	w.t.Helper()
	var e shown
	testkit.WaitFor(w.t, waitLong, func() bool { e = w.show(qid); return cond(e) }, what)
	return e
}

// waitStatus waits until the entry is in status (and fails at once when
// it ends in another final state).
func (w *world) waitStatus(qid, status string) shown {
	w.t.Helper()
	final := map[string]bool{touba.StatusDone: true, touba.StatusFailed: true, touba.StatusParked: true, touba.StatusCancelled: true}
	return w.waitShow(qid, "entry "+qid+" to be "+status, func(e shown) bool {
		if e.Status != status && final[e.Status] {
			w.t.Fatalf("entry %s ended %s (%s: %s), want %s", qid, e.Status, e.ErrorCode, e.ErrorMessage, status)
		}
		return e.Status == status
	})
}

// wait returns the entry's wait of step id (the entry's own), or fails.
func (e shown) wait(t *testing.T, stepID string) touba.Wait {
	t.Helper()
	for _, wt := range e.Waits {
		if wt.QueueID == e.QueueID && wt.StepID == stepID {
			return wt
		}
	}
	t.Fatalf("entry %s has no wait for step %s: %+v", e.QueueID, stepID, e.Waits)
	return touba.Wait{}
}

// output returns the checkpointed output of step id, or fails.
func (e shown) output(t *testing.T, stepID string) json.RawMessage {
	t.Helper()
	for _, s := range e.Steps {
		if s.StepID == stepID {
			return s.Output
		}
	}
	t.Fatalf("entry %s has no output of step %s: %+v", e.QueueID, stepID, e.Steps)
	return nil
}

// call is one line of the handler's record (examples/durable/handler).
type call struct {
	Tool     string          `json:"tool"`
	EffectID string          `json:"effect_id"`
	QueueID  string          `json:"queue_id"`
	Input    json.RawMessage `json:"input"`
	Action   string          `json:"action"`
	At       time.Time       `json:"at"`
	Repeat   bool            `json:"repeat"`
}

// calls reads what reached the downstream systems so far, under the
// handler's own lock (a line is never read half written).
func (w *world) calls() []call {
	w.t.Helper()
	f, err := os.Open(filepath.Join(w.dir, ".touba", "calls.jsonl"))
	if os.IsNotExist(err) {
		return nil
	} else if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		w.t.Fatal(err)
	}
	var out []call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var c call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			w.t.Fatalf("calls.jsonl: %v: %s", err, sc.Bytes())
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

// callsOf are the calls of tool for entry qid.
func (w *world) callsOf(tool, qid string) []call {
	var out []call
	for _, c := range w.calls() {
		if c.Tool == tool && c.QueueID == qid {
			out = append(out, c)
		}
	}
	return out
}

// once fails unless tool was called exactly once for qid, and returns the
// call: each write exactly once.
func (w *world) once(tool, qid string) call {
	w.t.Helper()
	cs := w.callsOf(tool, qid)
	if len(cs) != 1 {
		w.t.Fatalf("%s was called %d times for %s, want exactly once: %+v", tool, len(cs), qid, cs)
	}
	return cs[0]
}

// never fails if tool was called for qid.
func (w *world) never(tool, qid string) {
	w.t.Helper()
	if cs := w.callsOf(tool, qid); len(cs) != 0 {
		w.t.Fatalf("%s was called for %s, want never: %+v", tool, qid, cs)
	}
}

// Stripe-shaped bodies: the event id at /id, the type filtered on.
func checkoutBody(id, order string) string {
	return fmt.Sprintf(`{"id": %q, "type": "checkout.session.completed", "data": {"object": {"id": "cs_%s", "metadata": {"order_id": %q}}}}`, id, id, order)
}

func paymentBody(id, order string) string {
	return fmt.Sprintf(`{"id": %q, "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_%s", "amount": 4200, "metadata": {"order_id": %q}}}}`, id, id, order)
}

func invoiceFailedBody(id, invoice string) string {
	return fmt.Sprintf(`{"id": %q, "type": "invoice.payment_failed", "data": {"object": {"id": %q, "amount_due": 990}}}`, id, invoice)
}

func invoicePaidBody(id, invoice string) string {
	return fmt.Sprintf(`{"id": %q, "type": "invoice.paid", "data": {"object": {"id": %q, "amount_paid": 990}}}`, id, invoice)
}
