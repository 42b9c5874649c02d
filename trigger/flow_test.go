package trigger_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
	"github.com/touba/touba-trigger/trigger"
)

// flowProgram exercises every flow-control field: t/guarded has all of
// them and a generous rate; t/limited has a tight rate.
const flowProgram = `{
  "air_version": "touba-air-v1",
  "triggers": [
    {"ref": "trigger:t/guarded", "source": {"kind": "webhook", "max_body_bytes": 64,
       "allow_from": ["203.0.113.0/24", "2001:db8::/32"],
       "rate_limit": {"per_second": 1000, "burst": 1000},
       "verify": {"scheme": "hmac-sha256", "secret": {"env": "UNUSED_IN_TEST"}}},
     "filter": [{"pointer": "/body/type", "equals": "order.created"}],
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/limited", "source": {"kind": "webhook", "max_body_bytes": 64,
       "rate_limit": {"per_second": 0.5, "burst": 2}},
     "steps": [{"id": "s", "tool": "tool:x/Y"}]},
    {"ref": "trigger:t/filtered", "source": {"kind": "webhook"},
     "filter": [
       {"pointer": "/headers/x-kind", "in": ["a", "b"]},
       {"pointer": "/body/amount", "equals": 10},
       {"pointer": "/body/test", "exists": false},
       {"pointer": "/body/customer", "exists": true}],
     "steps": [{"id": "s", "tool": "tool:x/Y"}]}
  ]
}`

// clock is a settable intake clock, so rate-limit tests move time rather
// than wait for it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type flowFixture struct {
	t      *testing.T
	q      *queue.Queue
	st     *state.State
	in     *trigger.Intake
	h      http.Handler
	clock  *clock
	config func(program string) *trigger.Config
}

func newFlowFixture(t *testing.T, trusted string) *flowFixture {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	q, err := queue.Open(ctx, filepath.Join(dir, "queue.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(ctx, filepath.Join(dir, "state.sqlite"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close(); st.Close() })
	proxies, err := trigger.ParseCIDRList(trusted)
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := &flowFixture{t: t, q: q, st: st, clock: c}
	f.config = func(program string) *trigger.Config {
		p, err := trigger.ParseProgram("program.air.json", []byte(program))
		if err != nil {
			t.Fatal(err)
		}
		return &trigger.Config{Program: p, Verifiers: map[string]trigger.Verifier{"t/guarded": hmacVerifier{[]byte(testSecret)}}}
	}
	f.in = &trigger.Intake{Queue: q, Log: st, Now: c.now, TrustedProxies: proxies}
	f.in.SetConfig(f.config(flowProgram))
	f.h = f.in.Router(nil)
	return f
}

// post sends a request from peer (host:port) straight to the handler, so
// the test chooses the TCP peer address.
func (f *flowFixture) post(method, name, peer, body string, hdr map[string]string) (int, string, string) {
	f.t.Helper()
	req := httptest.NewRequest(method, "/triggers/"+name, strings.NewReader(body))
	req.RemoteAddr = peer
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String(), rec.Header().Get("Retry-After")
}

func (f *flowFixture) entries() int {
	f.t.Helper()
	got, err := f.q.List(context.Background(), touba.EntryFilter{Limit: 100000})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(got)
}

// TestFlowCheckOrder: each row breaks several checks at once; the answer
// must be the first failing one in SPEC §3.1's order (method, trigger,
// source address, rate limit, size, event id, signature, filter, identity).
func TestFlowCheckOrder(t *testing.T) {
	const (
		inside  = "203.0.113.7:5000"
		outside = "198.51.100.7:5000"
		big     = `{"type":"order.created","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`
		created = `{"type":"order.created"}`
		other   = `{"type":"order.deleted"}`
	)
	badID := map[string]string{"X-Touba-Event-Id": ""}
	cases := []struct {
		name, method, trigger, peer, body string
		hdr                               map[string]string
		status                            int
		want                              string
	}{
		{"method before trigger and source", "GET", "nope", outside, big, nil, 405, touba.EMethodNotAllowed},
		{"trigger before source", "POST", "nope", outside, big, nil, 404, touba.ETriggerNotFound},
		{"source before size and signature", "POST", "t/guarded", outside, big, nil, 403, touba.ETriggerSourceForbidden},
		{"size before event id and signature", "POST", "t/guarded", inside, big, badID, 413, touba.ETriggerPayloadTooLarge},
		{"event id before signature", "POST", "t/guarded", inside, created, badID, 400, touba.ETriggerEventIDInvalid},
		{"signature before filter", "POST", "t/guarded", inside, other, nil, 401, touba.ETriggerSignatureInvalid},
		{"filter after signature", "POST", "t/guarded", inside, other, signed(other, nil), 202, touba.IntakeFiltered},
		{"ipv6 source inside", "POST", "t/guarded", "[2001:db8::5]:443", created, signed(created, nil), 202, touba.IntakeEnqueued},
		{"accepted", "POST", "t/guarded", inside, created, signed(created, nil), 202, touba.IntakeEnqueued},
	}
	f := newFlowFixture(t, "")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := f.post(c.method, c.trigger, c.peer, c.body, c.hdr)
			if status != c.status || !strings.Contains(body, `"`+c.want+`"`) {
				t.Fatalf("got %d %s, want %d %s", status, body, c.status, c.want)
			}
		})
	}
	if got, want := f.entries(), 2; got != want {
		t.Fatalf("entries=%d, want %d (only the accepted rows)", got, want)
	}
	// Rate limit comes before size: with the bucket empty, an oversized
	// body is refused 429, not 413.
	for i := 0; i < 2; i++ {
		if s, b, _ := f.post("POST", "t/limited", inside, "{}", nil); s != 202 {
			t.Fatalf("burst request %d: %d %s", i, s, b)
		}
	}
	if s, b, ra := f.post("POST", "t/limited", inside, big+big, nil); s != 429 || !strings.Contains(b, touba.ETriggerRateLimited) || ra == "" {
		t.Fatalf("over the rate with a large body: %d %s Retry-After %q, want 429 TriggerRateLimited", s, b, ra)
	}
}

// TestForwardedFor: X-Forwarded-For is believed only from a trusted proxy,
// and then its right-most address that is not a trusted proxy counts.
func TestForwardedFor(t *testing.T) {
	created := `{"type":"order.created"}`
	cases := []struct {
		name, trusted, peer, xff string
		status                   int
	}{
		{"peer inside, no header", "192.0.2.0/24", "203.0.113.5:1", "", 202},
		{"peer outside, no header", "192.0.2.0/24", "198.51.100.1:1", "", 403},
		{"untrusted peer cannot claim an address", "192.0.2.0/24", "198.51.100.1:1", "203.0.113.5", 403},
		{"no trusted proxies: header ignored", "", "192.0.2.1:1", "203.0.113.5", 403},
		{"trusted proxy forwards an inside client", "192.0.2.0/24", "192.0.2.1:1", "203.0.113.5", 202},
		{"right-most untrusted hop counts, not a forged left one", "192.0.2.0/24", "192.0.2.1:1", "203.0.113.5, 198.51.100.7", 403},
		{"trusted hops are skipped", "192.0.2.0/24", "192.0.2.1:1", "198.51.100.7, 203.0.113.5, 192.0.2.9", 202},
		{"a broken hop trusts nothing", "192.0.2.0/24", "192.0.2.1:1", "203.0.113.5, junk", 403},
		{"a trusted proxy itself outside the list", "192.0.2.0/24", "192.0.2.1:1", "", 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFlowFixture(t, c.trusted)
			hdr := signed(created, nil)
			if c.xff != "" {
				hdr["X-Forwarded-For"] = c.xff
			}
			if status, body, _ := f.post("POST", "t/guarded", c.peer, created, hdr); status != c.status {
				t.Fatalf("got %d %s, want %d", status, body, c.status)
			}
		})
	}
}

// TestRateLimitRetryAfter: past the burst, 429 with a Retry-After in whole
// seconds; after that long (on the intake's clock) a request is accepted,
// and not before. A reload keeps the bucket of an unchanged limit and
// replaces that of a changed one.
func TestRateLimitRetryAfter(t *testing.T) {
	f := newFlowFixture(t, "")
	peer := "203.0.113.5:1"
	for i := 0; i < 2; i++ {
		if s, b, _ := f.post("POST", "t/limited", peer, "{}", nil); s != 202 {
			t.Fatalf("request %d within the burst: %d %s", i, s, b)
		}
	}
	s, b, ra := f.post("POST", "t/limited", peer, "{}", nil)
	if s != 429 || !strings.Contains(b, touba.ETriggerRateLimited) {
		t.Fatalf("past the burst: %d %s", s, b)
	}
	// 0.5 per second: the next token is 2 s away.
	if ra != "2" {
		t.Fatalf("Retry-After=%q, want 2", ra)
	}
	f.clock.add(time.Second)
	if s, _, ra := f.post("POST", "t/limited", peer, "{}", nil); s != 429 || ra != "1" {
		t.Fatalf("1 s later: %d Retry-After %q, want 429 and 1", s, ra)
	}
	f.clock.add(time.Second)
	if s, b, _ := f.post("POST", "t/limited", peer, "{}", nil); s != 202 {
		t.Fatalf("after Retry-After: %d %s, want 202", s, b)
	}
	// Reload with the same limit: the bucket is empty still.
	f.in.SetConfig(f.config(flowProgram))
	if s, _, _ := f.post("POST", "t/limited", peer, "{}", nil); s != 429 {
		t.Fatalf("after a reload with the same limit: %d, want 429 (bucket kept)", s)
	}
	// A changed limit is a new bucket.
	f.in.SetConfig(f.config(strings.Replace(flowProgram, `"per_second": 0.5, "burst": 2`, `"per_second": 0.5, "burst": 3`, 1)))
	if s, b, _ := f.post("POST", "t/limited", peer, "{}", nil); s != 202 {
		t.Fatalf("after a reload with a new limit: %d %s, want 202", s, b)
	}
	rows := 0
	for _, r := range flowLogRows(t, f.st) {
		if r.ErrorCode == touba.ETriggerRateLimited && r.StatusCode == 429 {
			rows++
		}
	}
	if rows != 3 {
		t.Fatalf("delivery log holds %d TriggerRateLimited rows, want 3", rows)
	}
}

// TestFilterForms: equals, in and exists over headers and body; a delivery
// that fails is 202 filtered, logged with code filtered and its body, and
// makes no entry.
func TestFilterForms(t *testing.T) {
	pass := `{"amount": 10, "customer": {"id": 1}}`
	cases := []struct {
		name, kind, body string
		enqueued         bool
	}{
		{"all hold", "a", pass, true},
		{"in: second value", "b", pass, true},
		{"number by value: 10.0 equals 10", "a", `{"amount": 10.0, "customer": 1}`, true},
		{"header not in list", "c", pass, false},
		{"header missing", "", pass, false},
		{"equals fails", "a", `{"amount": 11, "customer": 1}`, false},
		{"equals: string is not number", "a", `{"amount": "10", "customer": 1}`, false},
		{"exists false fails", "a", `{"amount": 10, "customer": 1, "test": null}`, false},
		{"exists true fails", "a", `{"amount": 10}`, false},
		{"body not JSON", "a", `amount=10`, false},
	}
	f := newFlowFixture(t, "")
	want := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr := map[string]string{}
			if c.kind != "" {
				hdr["X-Kind"] = c.kind
			}
			status, body, _ := f.post("POST", "t/filtered", "203.0.113.5:1", c.body, hdr)
			answer := touba.IntakeFiltered
			if c.enqueued {
				answer, want = touba.IntakeEnqueued, want+1
			}
			if status != 202 || !strings.Contains(body, `"status":"`+answer+`"`) {
				t.Fatalf("got %d %s, want 202 %s", status, body, answer)
			}
			if got := f.entries(); got != want {
				t.Fatalf("entries=%d, want %d", got, want)
			}
		})
	}
	filtered := 0
	for _, r := range flowLogRows(t, f.st) {
		if r.ErrorCode == touba.IntakeFiltered {
			filtered++
			if r.StatusCode != 202 || !r.BodyStored || len(r.Body) == 0 {
				t.Fatalf("filtered row %+v: want status 202 and its body kept", r)
			}
		}
	}
	if filtered != 7 {
		t.Fatalf("delivery log holds %d filtered rows, want 7", filtered)
	}
}

func flowLogRows(t *testing.T, st *state.State) []*touba.LoggedDelivery {
	t.Helper()
	if err := st.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := st.Deliveries(context.Background(), touba.LogFilter{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
