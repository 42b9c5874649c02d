package cel_test

import (
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
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/testkit"
)

const program = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:c/Paid", "source": {"kind": "webhook"},
   "filter": [{"pointer": "/body/kind", "exists": true}, {"cel": "body.kind == 'paid' && body.amount > 100"}],
   "steps": [{"id": "post", "tool": "tool:c/Post",
              "input": {"$cel": "{'amount': body.amount / 100, 'id': body.id, 'cents': double(body.amount) / 100.0}"}}]},
  {"ref": "trigger:c/Keyed", "source": {"kind": "webhook"},
   "concurrency": {"key": {"cel": "body.customer.id"}, "max": 1},
   "steps": [{"id": "post", "tool": "tool:c/Post", "input": {"customer": {"$cel": "body.customer.id"}}}]},
  {"ref": "trigger:c/When", "source": {"kind": "webhook"},
   "steps": [{"id": "maybe", "tool": "tool:c/Post", "when": "body.go", "input": {"step": "maybe"}},
             {"id": "after", "tool": "tool:c/Post", "input": {"step": "after", "skipped": {"$cel": "steps.maybe.output == null"}}}]},
  {"ref": "trigger:c/BadInput", "source": {"kind": "webhook"}, "retry": {"max_attempts": 5, "initial_interval_ms": 10},
   "steps": [{"id": "post", "tool": "tool:c/Post", "input": {"n": {"$cel": "body.missing + 1"}}}]},
  {"ref": "trigger:c/BadWhen", "source": {"kind": "webhook"}, "retry": {"max_attempts": 5, "initial_interval_ms": 10},
   "steps": [{"id": "post", "tool": "tool:c/Post", "when": "body.flag", "input": {}}]},
  {"ref": "trigger:c/Order", "source": {"kind": "webhook"},
   "cancel_on": [{"trigger": "trigger:c/Stop", "match": {"cel": "'order-' + body.order.id"}, "on": "/body/ref"}],
   "steps": [{"id": "paid", "wait_for": {"trigger": "trigger:c/Pay", "match": {"cel": "body.order.id"}, "on": "/body/order_id"}},
             {"id": "post", "tool": "tool:c/Post", "input": {"order": {"$cel": "steps.paid.output.body.order_id"}}}]},
  {"ref": "trigger:c/Pay", "source": {"kind": "webhook"}, "steps": []},
  {"ref": "trigger:c/Stop", "source": {"kind": "webhook"}, "steps": []},
  {"ref": "trigger:c/Batched", "source": {"kind": "webhook", "max_body_bytes": 65536},
   "batch": {"key": {"cel": "body.shop.lowerAscii()"}, "max_size": 2, "window_ms": 60000},
   "steps": [{"id": "post", "tool": "tool:c/Post", "input": {"n": {"$cel": "size(events)"}, "ids": {"$cel": "events.map(e, e.body.id)"}}}]}]}`

// remote records the input of every call of tool:c/Post.
type remote struct {
	mu     sync.Mutex
	inputs []map[string]any
}

func (r *remote) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var call struct {
		Input map[string]any `json:"input"`
	}
	_ = json.Unmarshal(b, &call)
	r.mu.Lock()
	r.inputs = append(r.inputs, call.Input)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"stored": true}`))
}

func (r *remote) calls() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.inputs...)
}

type env struct {
	d      *testkit.Daemon
	dir    string
	remote *remote
	url    string // the remote's
}

func start(t *testing.T) *env {
	t.Helper()
	rem := &remote{}
	srv := httptest.NewServer(rem)
	t.Cleanup(srv.Close)
	e := &env{dir: t.TempDir(), remote: rem, url: srv.URL}
	e.serve(t, nil)
	return e
}

// serve starts the daemon on e's files, with env's variables; args are
// more flags.
func (e *env) serve(t *testing.T, env []string, args ...string) {
	t.Helper()
	dir := e.dir
	prog, man := filepath.Join(dir, "program.air.json"), filepath.Join(dir, "touba.manifest.json")
	manifest := fmt.Sprintf(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:c/Post": {
	  "handler": {"kind": "webhook", "options": {"url": %q, "timeout_sec": 10}, "credentials": {"hmac_secret": {"env": "CEL_HMAC"}}},
	  "timeout_ms": 20000, "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`, e.url)
	for path, content := range map[string]string{prog: program, man: manifest} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	flags := append([]string{"serve", prog, "--manifest", man,
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--admin-socket", filepath.Join(dir, "admin.sock"),
		"--log-level", "debug", "--workers", "2", "--queue", filepath.Join(dir, "q.sqlite"),
		"--state", filepath.Join(dir, "s.sqlite"), "--effect-journal", filepath.Join(dir, "j.sqlite")}, args...)
	d := testkit.Start(t, append([]string{"CEL_HMAC=cel-test-secret"}, env...), flags...)
	t.Cleanup(func() {
		if d.Cmd.ProcessState == nil { // not killed at a crash point
			d.Signal(syscall.SIGTERM)
			d.Wait(30 * time.Second)
		}
	})
	e.d = d
}

// answer is intake's answer to one delivery.
type answer struct {
	Status  int
	QueueID string `json:"queue_id"`
	State   string `json:"status"`
	Code    string `json:"code"`
	Error   struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (e *env) post(t *testing.T, name, id, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.d.URL()+"/triggers/"+name, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Touba-Event-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

// entry is what `queue show --json` says of one entry.
type entry struct {
	Status       string `json:"status"`
	Attempts     int    `json:"attempts"`
	ErrorCode    string `json:"error_code"`
	ErrorMessage string `json:"error_message"`
	Steps        []struct {
		StepID string          `json:"step_id"`
		Status string          `json:"status"`
		Output json.RawMessage `json:"output"`
	} `json:"steps"`
	Effects []struct {
		EffectID string `json:"effect_id"`
	} `json:"effects"`
}

func (e *env) cli(t *testing.T, v any, args ...string) {
	t.Helper()
	args = append(args, "--json", "--admin-socket", filepath.Join(e.dir, "admin.sock"))
	out, err := exec.Command(testkit.Binary(t), args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// settled waits until entry id ends (done or failed) and returns it.
func (e *env) settled(t *testing.T, id string) entry {
	t.Helper()
	var got entry
	testkit.WaitFor(t, 30*time.Second, func() bool {
		got = entry{}
		e.cli(t, &got, "queue", "show", id)
		return got.Status == touba.StatusDone || got.Status == touba.StatusFailed
	}, "entry "+id+" to end")
	return got
}

func TestExpressions(t *testing.T) {
	e := start(t)

	// A CEL filter takes a delivery and filters another.
	paid := e.post(t, "c/Paid", "p1", `{"kind": "paid", "amount": 1234, "id": "inv_1"}`)
	if paid.Status != http.StatusAccepted || paid.State != touba.IntakeEnqueued {
		t.Fatalf("paid: %+v, want 202 enqueued", paid)
	}
	refund := e.post(t, "c/Paid", "p2", `{"kind": "refund", "amount": 1234}`)
	if refund.Status != http.StatusAccepted || refund.State != touba.IntakeFiltered || refund.Code != "" {
		t.Fatalf("refund: %+v, want 202 filtered", refund)
	}
	// A filter that fails at run time (no amount: use has()): 202
	// filtered, code ExpressionFailed, in the delivery log.
	broken := e.post(t, "c/Paid", "p3", `{"kind": "paid"}`)
	if broken.Status != http.StatusAccepted || broken.State != touba.IntakeFiltered || broken.Code != touba.EExpressionFailed {
		t.Fatalf("failing filter: %+v, want 202 filtered with ExpressionFailed", broken)
	}
	var rows []touba.LoggedDelivery
	testkit.WaitFor(t, 30*time.Second, func() bool {
		rows = nil
		e.cli(t, &rows, "deliveries", "ls", "--code", touba.EExpressionFailed)
		return len(rows) > 0
	}, "the failed filter's row in the delivery log")
	if len(rows) != 1 || rows[0].EventID != "p3" || rows[0].StatusCode != http.StatusAccepted {
		t.Fatalf("delivery log: %+v, want p3's row, 202 ExpressionFailed", rows)
	}

	// The $cel input is computed from the body: amount / 100 (integer
	// division of an integral JSON number) and the double division.
	got := e.settled(t, paid.QueueID)
	if got.Status != touba.StatusDone || len(got.Effects) != 1 {
		t.Fatalf("paid entry: %+v", got)
	}
	calls := e.remote.calls()
	if len(calls) != 1 || calls[0]["amount"] != 12.0 || calls[0]["cents"] != 12.34 || calls[0]["id"] != "inv_1" {
		t.Fatalf("calls: %v, want one with amount 12, cents 12.34, id inv_1", calls)
	}

	// A key expression at intake: one that resolves is the entry's key,
	// one that fails is 422 ExpressionFailed and nothing enqueued.
	keyed := e.post(t, "c/Keyed", "k1", `{"customer": {"id": 7}}`)
	if keyed.Status != http.StatusAccepted {
		t.Fatalf("keyed: %+v", keyed)
	}
	var ke struct {
		ConcurrencyKey string `json:"concurrency_key"`
	}
	e.cli(t, &ke, "queue", "show", keyed.QueueID)
	if ke.ConcurrencyKey != "7" {
		t.Fatalf("concurrency key %q, want 7", ke.ConcurrencyKey)
	}
	nokey := e.post(t, "c/Keyed", "k2", `{"customer": null}`)
	if nokey.Status != http.StatusUnprocessableEntity || nokey.Error.Code != touba.EExpressionFailed || nokey.QueueID != "" {
		t.Fatalf("failing key: %+v, want 422 ExpressionFailed", nokey)
	}
	e.settled(t, keyed.QueueID)

	// when false: the step is skipped (output null, nothing journaled,
	// shown skipped) and the next one sees it.
	w := e.post(t, "c/When", "w1", `{"go": false}`)
	got = e.settled(t, w.QueueID)
	if got.Status != touba.StatusDone {
		t.Fatalf("when entry: %+v", got)
	}
	steps := map[string]string{}
	for _, s := range got.Steps {
		steps[s.StepID] = s.Status + " " + string(s.Output)
	}
	if steps["maybe"] != "skipped null" || !strings.HasPrefix(steps["after"], " ") {
		t.Fatalf("steps %v, want maybe skipped null and after done", steps)
	}
	if len(got.Effects) != 1 || !strings.HasSuffix(got.Effects[0].EffectID, ":after") {
		t.Fatalf("effects %+v, want after's only", got.Effects)
	}
	last := e.remote.calls()
	if l := last[len(last)-1]; l["step"] != "after" || l["skipped"] != true {
		t.Fatalf("after's input %v, want skipped true", l)
	}

	// A step input or when that fails ends the run failed, not retried.
	for _, tc := range []struct{ name, body string }{{"c/BadInput", `{}`}, {"c/BadWhen", `{"flag": "yes"}`}} {
		a := e.post(t, tc.name, "b1", tc.body)
		got := e.settled(t, a.QueueID)
		if got.Status != touba.StatusFailed || got.ErrorCode != touba.EExpressionFailed || got.Attempts != 1 || len(got.Effects) != 0 {
			t.Fatalf("%s: %+v, want failed ExpressionFailed after one attempt, no effect", tc.name, got)
		}
	}
	if n := len(e.remote.calls()); n != 3 {
		t.Fatalf("%d calls, want 3 (paid, keyed, after)", n)
	}
}

// TestRefusedAtLoad: check and serve refuse a program whose expression
// does not compile, naming the file, the JSON path and CEL's message,
// with ProgramInvalid and exit 2; --expression-cost-limit bounds the
// static estimate.
func TestRefusedAtLoad(t *testing.T) {
	dir := t.TempDir()
	man := filepath.Join(dir, "touba.manifest.json")
	os.WriteFile(man, []byte(`{"manifest_version": "touba-manifest-v1", "bindings": {"tool:c/Post": {
	  "handler": {"kind": "accounting_stub"}, "timeout_ms": 1000, "effect_contract": {"kind": "none"}}}}`), 0o600)
	for _, tc := range []struct{ name, filter, want string }{
		{"now", `now() > timestamp('2020-01-01T00:00:00Z')`, `$.triggers[0].filter[0].cel: CEL: 1:4: undeclared reference to 'now'`},
		{"syntax", `body.kind ==`, `$.triggers[0].filter[0].cel: CEL: 1:13: Syntax error`},
	} {
		prog := filepath.Join(dir, tc.name+".air.json")
		os.WriteFile(prog, []byte(`{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:c/A", "source": {"kind": "webhook"},
		  "filter": [{"cel": `+fmt.Sprintf("%q", tc.filter)+`}], "steps": [{"id": "s", "tool": "tool:c/Post"}]}]}`), 0o600)
		cmd := exec.Command(testkit.Binary(t), "check", prog, "--manifest", man)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "ProgramInvalid: "+prog+": "+tc.want) {
			t.Fatalf("%s: exit %d (%v)\n%s\nwant exit 2 and ProgramInvalid: %s: %s", tc.name, cmd.ProcessState.ExitCode(), err, out, prog, tc.want)
		}
	}
	// The estimate bounds a body's list by max_body_bytes: at the default
	// (1 MiB) this comprehension could cost 6 million, refused; at 64 KiB
	// it fits the default limit, and not a limit of 1000.
	prog := filepath.Join(dir, "cost.air.json")
	os.WriteFile(prog, []byte(`{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:c/A", "source": {"kind": "webhook"},
	  "filter": [{"cel": "body.items.exists(i, i == 1)"}], "steps": [{"id": "s", "tool": "tool:c/Post"}]}]}`), 0o600)
	if out, _ := exec.Command(testkit.Binary(t), "check", prog, "--manifest", man).CombinedOutput(); !strings.Contains(string(out),
		"is over the limit 1000000 (--expression-cost-limit); the estimate takes each string or list read from the event to be up to max_body_bytes (1048576) long") {
		t.Fatalf("1 MiB body:\n%s", out)
	}
	os.WriteFile(prog, []byte(`{"air_version": "touba-air-v1", "triggers": [{"ref": "trigger:c/A", "source": {"kind": "webhook", "max_body_bytes": 65536},
	  "filter": [{"cel": "body.items.exists(i, i == 1)"}], "steps": [{"id": "s", "tool": "tool:c/Post"}]}]}`), 0o600)
	if out, err := exec.Command(testkit.Binary(t), "check", prog, "--manifest", man).CombinedOutput(); err != nil {
		t.Fatalf("default limit: %v\n%s", err, out)
	}
	cmd := exec.Command(testkit.Binary(t), "check", prog, "--manifest", man, "--expression-cost-limit", "1000")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "over the limit 1000") {
		t.Fatalf("exit %d\n%s\nwant exit 2, over the limit 1000", cmd.ProcessState.ExitCode(), out)
	}
}

// TestInputSameAfterCrash: a $cel input is computed into the request the
// journal fingerprints; the daemon killed after the remote answered and
// before the outcome was journaled computes it again at restart, the
// same (no EffectRequestConflict), and the call is sent again with it.
func TestInputSameAfterCrash(t *testing.T) {
	rem := &remote{}
	srv := httptest.NewServer(rem)
	t.Cleanup(srv.Close)
	e := &env{dir: t.TempDir(), remote: rem, url: srv.URL}
	e.serve(t, []string{"TOUBA_CRASHPOINT=after-answer"})
	a := e.post(t, "c/Paid", "p1", `{"kind": "paid", "amount": 99900, "id": "inv_9"}`)
	if a.Status != http.StatusAccepted {
		t.Fatalf("%+v", a)
	}
	if code := e.d.Wait(30 * time.Second); code == 0 {
		t.Fatalf("exit %d, want killed at the crash point", code)
	}
	e.serve(t, nil, "--take-over-stale-lock") // the lock the killed daemon left
	got := e.settled(t, a.QueueID)
	calls := rem.calls()
	if got.Status != touba.StatusDone || len(calls) != 2 {
		t.Fatalf("entry %+v after %d calls, want done after 2", got, len(calls))
	}
	first, _ := json.Marshal(calls[0])
	second, _ := json.Marshal(calls[1])
	if string(first) != string(second) || calls[0]["amount"] != 999.0 {
		t.Fatalf("inputs %s then %s, want the same, amount 999", first, second)
	}
}

// TestKeysAndWaits: a cancel_on match and a batch key computed at intake,
// a wait_for match computed in the run, and a cancel_on expression that
// fails at intake (422, nothing enqueued).
func TestKeysAndWaits(t *testing.T) {
	e := start(t)

	// wait_for.match {"cel"}: the order waits for its payment, then posts.
	order := e.post(t, "c/Order", "o1", `{"order": {"id": "A-1"}}`)
	if order.Status != http.StatusAccepted {
		t.Fatalf("order: %+v", order)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		var got entry
		e.cli(t, &got, "queue", "show", order.QueueID)
		return got.Status == touba.StatusWaiting
	}, "the order to wait")
	if a := e.post(t, "c/Pay", "pay1", `{"order_id": "A-1"}`); a.Status != http.StatusAccepted {
		t.Fatalf("pay: %+v", a)
	}
	if got := e.settled(t, order.QueueID); got.Status != touba.StatusDone {
		t.Fatalf("order: %+v", got)
	}
	if calls := e.remote.calls(); len(calls) != 1 || calls[0]["order"] != "A-1" {
		t.Fatalf("calls %v, want the order's post of A-1", calls)
	}

	// cancel_on.match {"cel"}: a Stop naming order-B-2 cancels the order
	// waiting for its payment.
	waiting := e.post(t, "c/Order", "o2", `{"order": {"id": "B-2"}}`)
	if a := e.post(t, "c/Stop", "stop1", `{"ref": "order-B-2"}`); a.Status != http.StatusAccepted {
		t.Fatalf("stop: %+v", a)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		var got entry
		e.cli(t, &got, "queue", "show", waiting.QueueID)
		return got.Status == touba.StatusCancelled
	}, "the order to be cancelled")

	// A cancel_on expression that fails (no order) refuses the delivery.
	bad := e.post(t, "c/Order", "o3", `{"id": "no order"}`)
	if bad.Status != http.StatusUnprocessableEntity || bad.Error.Code != touba.EExpressionFailed {
		t.Fatalf("failing cancel_on match: %+v, want 422 ExpressionFailed", bad)
	}

	// batch.key {"cel"}: two deliveries of one shop (whatever its case) are
	// one run, which sees both in events.
	first := e.post(t, "c/Batched", "b1", `{"shop": "Main", "id": 1}`)
	e.post(t, "c/Batched", "b2", `{"shop": "MAIN", "id": 2}`)
	if got := e.settled(t, first.QueueID); got.Status != touba.StatusDone {
		t.Fatalf("batch carrier: %+v", got)
	}
	calls := e.remote.calls()
	last, _ := json.Marshal(calls[len(calls)-1])
	if string(last) != `{"ids":[1,2],"n":2}` {
		t.Fatalf("batch input %s, want both deliveries", last)
	}
}
