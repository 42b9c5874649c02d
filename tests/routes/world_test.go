package routes_test

import (
	"bytes"
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

	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/internal/testkit"
)

// The triggers: one endpoint, its routes by event type.
const (
	refEvents  = "trigger:stripe/Events"
	refInvoice = "trigger:stripe/InvoicePaid"
	refRefund  = "trigger:stripe/ChargeRefunded"
	refCancel  = "trigger:stripe/SubscriptionDeleted"
	refLarge   = "trigger:stripe/LargePayment"
)

// waitLong bounds every wait on a condition: far above what any takes.
const waitLong = 60 * time.Second

// routeDef is one route of the program: its ref, its filter and what its
// step sends to the remote's path.
type routeDef struct {
	ref, filter, extra, input string
}

var (
	invoiceRoute = routeDef{refInvoice, `[{"cel": "body.type == 'invoice.paid'"}]`,
		`"concurrency": {"key": {"cel": "body.data.object.customer"}, "max": 1},`,
		`{"$cel": "{'invoice': body.data.object.id, 'amount': body.data.object.amount_paid / 100}"}`}
	refundRoute = routeDef{refRefund, `[{"pointer": "/body/type", "equals": "charge.refunded"}]`,
		`"dispatch": {"weight": 30}, "retry": {"max_attempts": 1},`, `{"charge": {"$ref": "/event/body/data/object/id"}}`}
	cancelRoute = routeDef{refCancel, `[{"cel": "body.type == 'customer.subscription.deleted'"}]`, ``,
		`{"subscription": {"$ref": "/event/body/data/object/id"}}`}
	largeRoute = routeDef{refLarge, `[{"cel": "has(body.data.object.amount_paid) && body.data.object.amount_paid >= 100000"}]`, ``,
		`{"invoice": {"$ref": "/event/body/data/object/id"}}`}
	allRoutes = []routeDef{invoiceRoute, refundRoute, cancelRoute, largeRoute}
)

// program is the program with these routes of the endpoint.
func program(routes ...routeDef) string {
	var b strings.Builder
	b.WriteString(`{"air_version": "touba-air-v1", "triggers": [
  {"ref": "` + refEvents + `", "source": {"kind": "webhook", "event_id": {"json_pointer": "/id", "required": true}}, "steps": []}`)
	for _, r := range routes {
		fmt.Fprintf(&b, `,
  {"ref": %q, "source": {"kind": "trigger", "trigger": %q}, "filter": %s, %s
   "steps": [{"id": "post", "tool": "tool:stripe/%s", "input": %s}]}`, r.ref, refEvents, r.filter, r.extra, toolOf(r.ref), r.input)
	}
	b.WriteString("]}")
	return b.String()
}

// toolOf is the tool of a route's step: its name.
func toolOf(ref string) string { return strings.TrimPrefix(ref, "trigger:stripe/") }

// remote is the system the routes' steps write to, one path per tool: it
// records each call's input by path, and fails a path on demand (400:
// not applied).
type remote struct {
	srv *httptest.Server

	mu     sync.Mutex
	inputs map[string][]map[string]any
	fail   map[string]bool
	hold   chan struct{} // when set, every call waits for it to close
}

func newRemote(t *testing.T) *remote {
	r := &remote{inputs: map[string][]map[string]any{}, fail: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) serve(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var call struct {
		Input map[string]any `json:"input"`
	}
	_ = json.Unmarshal(b, &call)
	path := strings.TrimPrefix(req.URL.Path, "/")
	r.mu.Lock()
	hold, fail := r.hold, r.fail[path]
	r.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if fail {
		http.Error(w, `{"error": "refused"}`, http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.inputs[path] = append(r.inputs[path], call.Input)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"stored": true}`))
}

// calls are the inputs the remote applied for tool.
func (r *remote) calls(tool string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.inputs[tool]...)
}

func (r *remote) setFail(tool string, fail bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[tool] = fail
}

// world is one daemon's files (or database), program and remote.
type world struct {
	t                                                   *testing.T
	r                                                   *remote
	dir, program, manifest, queue, state, journal, sock string
	dsn                                                 string // PostgreSQL instead of the files
	d                                                   *testkit.Daemon
}

// backends are where each test runs: the files, and a PostgreSQL
// database (skipped, saying so, without PostgreSQL 15).
var backends = []string{"sqlite", "postgres"}

// newWorld writes the program with routes and the manifest (every tool
// a webhook to the remote's path) on backend.
func newWorld(t *testing.T, backend string, routes ...routeDef) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, r: newRemote(t), dir: dir, program: filepath.Join(dir, "program.air.json"),
		manifest: filepath.Join(dir, "touba.manifest.json"), queue: filepath.Join(dir, "q.sqlite"),
		state: filepath.Join(dir, "s.sqlite"), journal: filepath.Join(dir, "j.sqlite"), sock: filepath.Join(dir, "admin.sock")}
	if backend == "postgres" {
		if ok, why := pgtest.Available(); !ok {
			t.Skip("PostgreSQL 15 not installed: " + why)
		}
		w.dsn = pgtest.New(t)
	}
	w.setProgram(routes...)
	return w
}

func (w *world) write(path, content string) {
	w.t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// setProgram writes the program with routes, and the manifest binding
// their tools (every tool a webhook to the remote's path): a reload reads
// both.
func (w *world) setProgram(routes ...routeDef) {
	w.write(w.program, program(routes...))
	var bindings []string
	for _, r := range routes {
		bindings = append(bindings, fmt.Sprintf(`"tool:stripe/%s": {
	  "handler": {"kind": "webhook", "options": {"url": "%s/%s", "timeout_sec": 10}, "credentials": {"hmac_secret": {"env": "ROUTES_HMAC"}}},
	  "timeout_ms": 20000, "max_concurrency": 0, "circuit": null,
	  "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}`, toolOf(r.ref), w.r.srv.URL, toolOf(r.ref)))
	}
	w.write(w.manifest, `{"manifest_version": "touba-manifest-v1", "bindings": {`+strings.Join(bindings, ",")+`}}`)
}

// start runs the daemon, with TOUBA_CRASHPOINT=crashpoint when set.
func (w *world) start(crashpoint string) *testkit.Daemon {
	w.t.Helper()
	env := []string{"ROUTES_HMAC=routes-test-secret"}
	if crashpoint != "" {
		env = append(env, "TOUBA_CRASHPOINT="+crashpoint)
	}
	args := []string{"serve", w.program, "--manifest", w.manifest, "--listen", "127.0.0.1:0", "--metrics-listen", "",
		"--admin-socket", w.sock, "--log-level", "info", "--workers", "4"}
	if w.dsn != "" {
		args = append(args, "--database", w.dsn, "--node-id", "n1", "--lease-ttl", "30s")
	} else {
		args = append(args, "--take-over-stale-lock", "--queue", w.queue, "--state", w.state, "--effect-journal", w.journal)
	}
	w.d = testkit.Start(w.t, env, args...)
	w.t.Cleanup(func() {
		if w.d.Cmd.ProcessState == nil {
			w.d.Signal(syscall.SIGTERM)
			w.d.Wait(30 * time.Second)
		}
	})
	return w.d
}

// reload sends SIGHUP and waits until the daemon says it loaded the new
// program.
func (w *world) reload() {
	w.t.Helper()
	before := strings.Count(w.d.Log(), "configuration reloaded")
	w.d.Signal(syscall.SIGHUP)
	testkit.WaitFor(w.t, waitLong, func() bool { return strings.Count(w.d.Log(), "configuration reloaded") > before },
		"the daemon to reload")
}

// answer is intake's answer to one delivery.
type answer struct {
	Status  int
	QueueID string `json:"queue_id"`
	Answer  string `json:"status"`
	Code    string `json:"code"`
	Error   struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		QueueID string `json:"queue_id"`
	} `json:"error"`
}

// event is a Stripe-like event body.
func event(id, typ, object string) string {
	return fmt.Sprintf(`{"id": %q, "type": %q, "data": {"object": %s}}`, id, typ, object)
}

// sendTo posts body to the trigger name; err is the transport's (a
// daemon killed before it answered).
func (w *world) sendTo(name, body string) (answer, error) {
	resp, err := http.Post(w.d.URL()+"/triggers/"+name, "application/json", strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	a := answer{Status: resp.StatusCode}
	err = json.NewDecoder(resp.Body).Decode(&a)
	return a, err
}

// send posts an event to the endpoint, which must answer.
func (w *world) send(body string) answer {
	w.t.Helper()
	a, err := w.sendTo("stripe/Events", body)
	if err != nil {
		w.t.Fatalf("send %s: %v", body, err)
	}
	return a
}

// accept sends an event that must be accepted (202 enqueued).
func (w *world) accept(body string) string {
	w.t.Helper()
	a := w.send(body)
	if a.Status != http.StatusAccepted || a.Answer != "enqueued" || a.QueueID == "" {
		w.t.Fatalf("send %s: %+v, want 202 enqueued", body, a)
	}
	return a.QueueID
}

// cli runs an operator command against the daemon's socket, or the files
// (or the database) when none runs, and decodes its --json output.
func (w *world) cli(out any, args ...string) {
	w.t.Helper()
	stdout, stderr, err := w.runCmd(append(args, "--json")...)
	if err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s%s", strings.Join(args, " "), err, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		w.t.Fatalf("touba-trigger %s: %v\n%s", strings.Join(args, " "), err, stdout)
	}
}

// run runs an operator command and returns what it printed.
func (w *world) run(args ...string) (string, error) {
	w.t.Helper()
	stdout, stderr, err := w.runCmd(args...)
	return stdout + stderr, err
}

// runCmd runs an operator command and returns its stdout and stderr.
func (w *world) runCmd(args ...string) (string, string, error) {
	w.t.Helper()
	where := []string{"--admin-socket", w.sock, "--queue", w.queue, "--state-file", w.state, "--effect-journal", w.journal}
	if w.dsn != "" {
		where = []string{"--admin-socket", w.sock, "--database", w.dsn}
	}
	cmd := exec.Command(testkit.Binary(w.t), append(args, where...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// entry is what the tests read of `queue ls` and `queue show --json`.
type entry struct {
	QueueID        string `json:"queue_id"`
	EventID        string `json:"event_id"`
	TriggerRef     string `json:"trigger_ref"`
	Status         string `json:"status"`
	ErrorCode      string `json:"error_code"`
	ConcurrencyKey string `json:"concurrency_key"`
	RoutedFrom     string `json:"routed_from"`
	Routes         []struct {
		TriggerRef string `json:"trigger_ref"`
		Fed        bool   `json:"fed"`
		QueueID    string `json:"queue_id"`
		Code       string `json:"code"`
		Status     string `json:"status"`
	} `json:"routes"`
}

// entries lists every entry, by trigger.
func (w *world) entries() map[string][]entry {
	w.t.Helper()
	var list []entry
	w.cli(&list, "queue", "ls", "--limit", "1000", "--oldest-first")
	out := map[string][]entry{}
	for _, e := range list {
		out[e.TriggerRef] = append(out[e.TriggerRef], e)
	}
	return out
}

// ofEvent are the entries of event id, by trigger.
func (w *world) ofEvent(id string) map[string]entry {
	w.t.Helper()
	out := map[string]entry{}
	for ref, list := range w.entries() {
		for _, e := range list {
			if e.EventID == id {
				if _, dup := out[ref]; dup {
					w.t.Fatalf("two entries of %s for event %s", ref, id)
				}
				out[ref] = e
			}
		}
	}
	return out
}

func (w *world) show(qid string) entry {
	w.t.Helper()
	var e entry
	w.cli(&e, "queue", "show", qid)
	return e
}

// waitStatus waits until every entry of ref for event id is status.
func (w *world) waitStatus(ref, id, status string) entry {
	w.t.Helper()
	var got entry
	testkit.WaitFor(w.t, waitLong, func() bool {
		got = w.ofEvent(id)[ref]
		return got.Status == status
	}, ref+" "+id+" to be "+status)
	return got
}

// waitCalls waits until the remote applied n calls of tool.
func (w *world) waitCalls(tool string, n int) []map[string]any {
	w.t.Helper()
	var got []map[string]any
	testkit.WaitFor(w.t, waitLong, func() bool { got = w.r.calls(tool); return len(got) >= n },
		fmt.Sprintf("%d calls of %s", n, tool))
	return got
}

// fmtJSON is fmt.Sprintf, for a body template.
func fmtJSON(format string, args ...any) string { return fmt.Sprintf(format, args...) }
