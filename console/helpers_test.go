package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/admin"
	"github.com/touba/touba-trigger/console"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

const token = "correct-horse-battery-staple-42"

// fixture is a console over an admin.Service on real files, served over
// loopback.
type fixture struct {
	q     *queue.Queue
	st    *state.State
	j     *journal.Journal
	svc   *admin.Service
	srv   *httptest.Server
	mu    sync.Mutex
	comps []string // effects the fake compensator was asked to compensate
}

func (f *fixture) compensated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.comps...)
}

func newFixture(tb testing.TB, pageSize int) *fixture {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	f := &fixture{}
	var err error
	if f.q, err = queue.Open(ctx, filepath.Join(dir, "q.sqlite"), queue.Options{}); err != nil {
		tb.Fatal(err)
	}
	if f.st, err = state.Open(ctx, filepath.Join(dir, "s.sqlite"), state.Options{}); err != nil {
		tb.Fatal(err)
	}
	if f.j, err = journal.Open(ctx, filepath.Join(dir, "j.sqlite"), journal.Options{}); err != nil {
		tb.Fatal(err)
	}
	f.svc = &admin.Service{Queue: f.q, State: f.st, Journal: f.j, Log: zerolog.Nop(),
		Compensable: func(ref string) bool { return ref == "tool:undoable" },
		Compensator: func(ctx context.Context, e *touba.Delivery, _ map[string]touba.StepOutput, orig *touba.Effect) (*touba.Compensation, error) {
			f.mu.Lock()
			f.comps = append(f.comps, orig.EffectID)
			f.mu.Unlock()
			return &touba.Compensation{Scope: orig.Scope, EffectID: orig.EffectID, CompensationID: touba.CompensationID(orig.EffectID),
				ToolRef: orig.ToolRef, State: touba.EffectApplied, ReceiptRef: "undo-1"}, nil
		}}
	con, err := console.New(console.Config{Service: f.svc, Token: []byte(token), Log: zerolog.Nop(), PageSize: pageSize})
	if err != nil {
		tb.Fatal(err)
	}
	f.srv = httptest.NewServer(con)
	tb.Cleanup(func() {
		f.srv.Close()
		f.q.Close()
		f.st.Close()
		f.j.Close()
	})
	return f
}

// entry enqueues a delivery and brings it to status.
func (f *fixture) entry(tb testing.TB, trigger, eventID, body, status string) string {
	tb.Helper()
	ctx := context.Background()
	r, err := f.q.Enqueue(ctx, &touba.Delivery{TriggerRef: trigger, EventID: eventID, Digest: dedupe.Digest([]byte(body)),
		Body: []byte(body), Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "192.0.2.7:5555"})
	if err != nil || !r.Created {
		tb.Fatalf("enqueue %s: %v %+v", eventID, err, r)
	}
	if status == touba.StatusPending {
		return r.QueueID
	}
	got, err := f.q.Lease(ctx, 1)
	if err != nil || len(got) != 1 || got[0].QueueID != r.QueueID {
		tb.Fatalf("lease %s: %v %+v", eventID, err, got)
	}
	code := ""
	switch status {
	case touba.StatusParked:
		code = touba.EEffectReconciliationRequired
	case touba.StatusFailed:
		code = touba.EHandlerFailed
	}
	if err := f.q.Finish(ctx, r.QueueID, got[0].LeaseToken, status, code, "test"); err != nil {
		tb.Fatal(err)
	}
	return r.QueueID
}

// effect journals an effect of step in scope ending in outcome.
func (f *fixture) effect(tb testing.TB, scope, step, tool, retryMode, outcome string) string {
	tb.Helper()
	ctx := context.Background()
	id, call := scope+":"+step, "call-"+step
	if _, err := f.j.Prepare(ctx, touba.EffectPrepare{Scope: scope, EffectID: id, ToolRef: tool, Operation: touba.OperationInvoke,
		Fingerprint: "sha256:" + step, RetryMode: retryMode, CallID: call}); err != nil {
		tb.Fatal(err)
	}
	if err := f.j.Dispatch(ctx, scope, id, call); err != nil {
		tb.Fatal(err)
	}
	o := touba.EffectOutcome{Scope: scope, EffectID: id, CallID: call, State: outcome, ErrorCode: touba.EHandlerTimeout}
	if outcome == touba.EffectApplied {
		o.ReceiptRef, o.Result, o.ErrorCode = "r-"+step, []byte(`{"ok":true}`), ""
	}
	if err := f.j.Finish(ctx, o); err != nil {
		tb.Fatal(err)
	}
	return id
}

func (f *fixture) logRow(tb testing.TB, d *touba.LoggedDelivery) string {
	tb.Helper()
	f.st.Log(d)
	if err := f.st.Flush(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return d.DeliveryID
}

func (f *fixture) effectState(tb testing.TB, scope, id string) string {
	tb.Helper()
	e, err := f.j.Get(context.Background(), scope, id)
	if err != nil || e == nil {
		tb.Fatalf("effect %s: %v", id, err)
	}
	return e.State
}

func (f *fixture) status(tb testing.TB, queueID string) string {
	tb.Helper()
	d, err := f.q.Get(context.Background(), queueID)
	if err != nil || d == nil {
		tb.Fatalf("get %s: %v", queueID, err)
	}
	return d.Status
}

// browser is a logged-in session: a cookie jar and the CSRF token of the
// last page read.
type browser struct {
	tb   testing.TB
	c    *http.Client
	base string
	csrf string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)
var formField = regexp.MustCompile(`name="form" value="([0-9a-f]+)"`)

func (f *fixture) login(tb testing.TB) *browser {
	tb.Helper()
	jar, _ := cookiejar.New(nil)
	b := &browser{tb: tb, base: f.srv.URL, c: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	_, page := b.get("/login")
	m := formField.FindStringSubmatch(page)
	if m == nil {
		tb.Fatalf("no login form in %s", page)
	}
	resp, _ := b.post("/login", url.Values{"form": {m[1]}, "token": {token}, "next": {"/"}})
	if resp.StatusCode != http.StatusSeeOther {
		tb.Fatalf("login: %d, want 303", resp.StatusCode)
	}
	b.get("/")
	if b.csrf == "" {
		tb.Fatal("no CSRF token on the overview after login")
	}
	return b
}

func (b *browser) do(req *http.Request) (*http.Response, string) {
	b.tb.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if m := csrfField.FindStringSubmatch(string(body)); m != nil {
		b.csrf = m[1]
	}
	return resp, string(body)
}

func (b *browser) get(path string) (*http.Response, string) {
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	return b.do(req)
}

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return b.do(req)
}

// action posts a form with the session's CSRF token.
func (b *browser) action(path string, form url.Values) (*http.Response, string) {
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", b.csrf)
	return b.post(path, form)
}

// plain is a client with no session and no token.
func plain(tb testing.TB, method, u string, hdr map[string]string) (*http.Response, string) {
	tb.Helper()
	req, _ := http.NewRequest(method, u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}
