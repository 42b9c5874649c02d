package trigger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
	"github.com/touba/touba-trigger/verify"
)

const testSecret = "s3cret-for-tests"

// testProgram has one trigger per identity source and one with a small
// body limit and a signature, so every row of SPEC §3.1 can be reached.
const testProgram = `{
  "air_version": "touba-air-v1",
  "triggers": [
    {"ref": "trigger:t/plain", "source": {"kind": "webhook", "max_body_bytes": 64},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/ptr", "source": {"kind": "webhook", "event_id": {"json_pointer": "/id"}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/signed", "source": {"kind": "webhook", "max_body_bytes": 64,
       "verify": {"scheme": "hmac-sha256", "secret": {"env": "UNUSED_IN_TEST"}}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/reject", "source": {"kind": "webhook", "redelivery": "reject"},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/required", "source": {"kind": "webhook", "event_id": {"header": "x-touba-event-id", "required": true}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/stripe", "source": {"kind": "webhook",
       "verify": {"scheme": "stripe", "secret": {"env": "UNUSED_IN_TEST"}}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/stripe-optional", "source": {"kind": "webhook", "event_id": {"required": false},
       "verify": {"scheme": "stripe", "secret": {"env": "UNUSED_IN_TEST"}}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/github", "source": {"kind": "webhook", "max_body_bytes": 64,
       "verify": {"scheme": "github", "secret": {"env": "UNUSED_IN_TEST"}}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]}
  ]
}`

// hmacVerifier checks X-Signature with the outbound reference code, so
// these tests do not depend on the inbound schemes.
type hmacVerifier struct{ secret []byte }

func (v hmacVerifier) Verify(h http.Header, body []byte, _ time.Time) error {
	return verify.Verify(v.secret, body, h.Get("X-Signature"))
}

type fixture struct {
	t      *testing.T
	dir    string
	queue  *queue.Queue
	state  *state.State
	intake *trigger.Intake
	srv    *httptest.Server
}

func newFixture(t *testing.T, qopts queue.Options) *fixture {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(dir, "queue.sqlite"), qopts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(ctx, filepath.Join(dir, "state.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := trigger.ParseProgram("program.air.json", []byte(testProgram))
	if err != nil {
		t.Fatal(err)
	}
	in := &trigger.Intake{Queue: q, Log: st}
	in.SetConfig(&trigger.Config{Program: p, Verifiers: map[string]trigger.Verifier{
		"t/signed": hmacVerifier{[]byte(testSecret)},
		// Stand-ins for the schemes' verifiers: these triggers test where
		// the id check sits, not the schemes (verify/ does).
		"t/stripe": hmacVerifier{[]byte(testSecret)},
		"t/github": hmacVerifier{[]byte(testSecret)},
	}})
	srv := httptest.NewServer(in.Router(nil))
	f := &fixture{t: t, dir: dir, queue: q, state: st, intake: in, srv: srv}
	t.Cleanup(func() {
		srv.Close()
		q.Close()
		st.Close()
	})
	return f
}

type reply struct {
	Status     int
	RetryAfter string
	QueueID    string `json:"queue_id"`
	Answer     string `json:"status"`
	Code       string `json:"code"` // TriggerReplayRejected beside status consumed
	Error      struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		QueueID string `json:"queue_id"`
	} `json:"error"`
}

func (f *fixture) send(method, name, body string, hdr map[string]string) reply {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+"/triggers/"+name, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return f.do(req)
}

func (f *fixture) do(req *http.Request) reply {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r reply
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&r); err != nil {
		f.t.Fatalf("answer %d is not JSON: %q", resp.StatusCode, b)
	}
	r.Status, r.RetryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	return r
}

func (f *fixture) count(t *testing.T) int {
	t.Helper()
	got, err := f.queue.List(context.Background(), touba.EntryFilter{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return len(got)
}

func (f *fixture) logRows(t *testing.T) []*touba.LoggedDelivery {
	t.Helper()
	if err := f.state.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := f.state.Deliveries(context.Background(), touba.LogFilter{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func signed(body string, extra map[string]string) map[string]string {
	h := map[string]string{"X-Signature": verify.Sign([]byte(testSecret), []byte(body))}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

func newServer(t *testing.T, in *trigger.Intake) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(in.Router(nil))
	t.Cleanup(srv.Close)
	return srv
}
