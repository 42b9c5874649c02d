package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	touba "github.com/touba/touba-trigger"
)

// The delivery log (SPEC §6): every request that did not create an entry,
// written in batches without blocking intake, read back by operators, and
// bounded.
func runDeliveryLog(t *testing.T, f Factory) {
	t.Run("LogFlushAndRead", func(t *testing.T) { testLogRead(t, f) })
	t.Run("BodiesOnlyWhenStored", func(t *testing.T) { testLogBodies(t, f) })
	t.Run("Filters", func(t *testing.T) { testLogFilters(t, f) })
	t.Run("LogNeverBlocks", func(t *testing.T) { testLogNeverBlocks(t, f) })
	t.Run("Bounds", func(t *testing.T) { testLogBounds(t, f) })
	t.Run("BadBytesCostNoRow", func(t *testing.T) { testLogBadBytes(t, f) })
	t.Run("RefusedRowCostsOnlyItself", func(t *testing.T) { testLogRefusedRow(t, f) })
}

// deliveries reads the log with filter lf.
func (e *env) deliveries(t *testing.T, lf touba.LogFilter) []*touba.LoggedDelivery {
	t.Helper()
	got, err := e.State.Deliveries(e.ctx, lf)
	if err != nil {
		t.Fatalf("deliveries %+v: %v", lf, err)
	}
	return got
}

func (e *env) flush(t *testing.T) {
	t.Helper()
	if err := e.State.Flush(e.ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// eventIDs lists the event ids of rows, in their order.
func eventIDs(rows []*touba.LoggedDelivery) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.EventID
	}
	return out
}

func testLogRead(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	d := &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: "e1", Digest: digest("x"), StatusCode: 409,
		ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: "q1", RemoteAddr: "192.0.2.1:4242",
		Headers: map[string]string{"X-Event-Id": "e1"}, Body: []byte("x"), BodyStored: true}
	e.State.Log(d)
	e.flush(t)
	if d.DeliveryID == "" {
		t.Fatal("Log gave the row no delivery id")
	}
	got, err := e.State.Delivery(e.ctx, d.DeliveryID)
	if err != nil || got == nil {
		t.Fatalf("delivery %s: %v, %v", d.DeliveryID, got, err)
	}
	if got.DeliveryID != d.DeliveryID || !got.At.Equal(Epoch) || got.TriggerRef != d.TriggerRef || got.EventID != "e1" ||
		got.Digest != d.Digest || got.StatusCode != 409 || got.ErrorCode != d.ErrorCode || got.QueueID != "q1" ||
		got.RemoteAddr != d.RemoteAddr || got.Headers["X-Event-Id"] != "e1" || string(got.Body) != "x" || !got.BodyStored {
		t.Fatalf("stored %+v, want %+v", got, d)
	}
	if rows := e.deliveries(t, touba.LogFilter{}); len(rows) != 1 || rows[0].DeliveryID != d.DeliveryID {
		t.Fatalf("listing: %v", eventIDs(rows))
	}
	if missing, err := e.State.Delivery(e.ctx, "no-such-delivery"); missing != nil || err != nil {
		t.Fatalf("missing delivery: %v, %v; want nil, nil", missing, err)
	}
	if written, dropped := e.State.LogStats(); written != 1 || dropped != 0 {
		t.Fatalf("stats written=%d dropped=%d, want 1 and 0", written, dropped)
	}
	// A 202 duplicate has no error code and keeps its own id and time.
	at := Epoch.Add(-time.Minute)
	dup := &touba.LoggedDelivery{DeliveryID: "dup-1", At: at, TriggerRef: "trigger:t", EventID: "e2", StatusCode: 202, QueueID: "q2"}
	e.State.Log(dup)
	e.flush(t)
	if got, err := e.State.Delivery(e.ctx, "dup-1"); err != nil || got == nil || !got.At.Equal(at) || got.ErrorCode != "" || got.BodyStored {
		t.Fatalf("duplicate row: %+v, %v", got, err)
	}
}

// testLogBodies: a body is stored only when BodyStored says so (requests
// that failed verification keep none), and an empty stored body is still
// stored.
func testLogBodies(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	for _, d := range []*touba.LoggedDelivery{
		{DeliveryID: "unverified", StatusCode: 401, ErrorCode: touba.ETriggerSignatureInvalid, Body: []byte("secret-ish")},
		{DeliveryID: "verified", StatusCode: 409, ErrorCode: touba.ETriggerReplayRejected, Body: []byte("kept"), BodyStored: true},
		{DeliveryID: "empty", StatusCode: 409, ErrorCode: touba.ETriggerReplayRejected, Body: nil, BodyStored: true},
	} {
		d.TriggerRef = "trigger:t"
		e.State.Log(d)
	}
	e.flush(t)
	for id, want := range map[string]struct {
		stored bool
		body   string
	}{"unverified": {false, ""}, "verified": {true, "kept"}, "empty": {true, ""}} {
		got, err := e.State.Delivery(e.ctx, id)
		if err != nil || got == nil || got.BodyStored != want.stored || string(got.Body) != want.body {
			t.Fatalf("%s: %+v, %v; want body stored %v %q", id, got, err, want.stored, want.body)
		}
	}
}

func testLogFilters(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	rows := []*touba.LoggedDelivery{
		{EventID: "dup", StatusCode: 202, QueueID: "q1"},
		// A redelivery of a consumed entry, answered 200 consumed: still
		// listed with the rejections (SPEC §3.1).
		{EventID: "consumed", StatusCode: 200, ErrorCode: touba.ETriggerReplayRejected, QueueID: "q1"},
		{EventID: "sig", StatusCode: 401, ErrorCode: touba.ETriggerSignatureInvalid},
		{EventID: "conflict", StatusCode: 409, ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: "q1"},
		{EventID: "other", StatusCode: 409, ErrorCode: touba.ETriggerEventPayloadConflict, QueueID: "q2", TriggerRef: "trigger:other"},
		{EventID: "late", StatusCode: 503, ErrorCode: touba.ETriggerUnavailable},
	}
	for i, d := range rows {
		if d.TriggerRef == "" {
			d.TriggerRef = "trigger:t"
		}
		d.At = Epoch.Add(time.Duration(i) * time.Minute)
		e.State.Log(d)
	}
	e.flush(t)
	for _, tt := range []struct {
		f    touba.LogFilter
		want []string
	}{
		{touba.LogFilter{}, []string{"late", "other", "conflict", "sig", "consumed", "dup"}},
		{touba.LogFilter{Rejected: true}, []string{"late", "other", "conflict", "sig", "consumed"}},
		{touba.LogFilter{Rejected: true, Code: touba.ETriggerReplayRejected}, []string{"consumed"}},
		// Refused: answered 400 and above only; the redelivery answered 200
		// is not one (the console's count of rejections).
		{touba.LogFilter{Refused: true}, []string{"late", "other", "conflict", "sig"}},
		{touba.LogFilter{Refused: true, Code: touba.ETriggerReplayRejected}, []string{}},
		{touba.LogFilter{Code: touba.ETriggerEventPayloadConflict}, []string{"other", "conflict"}},
		{touba.LogFilter{Code: touba.ETriggerEventPayloadConflict, TriggerRef: "trigger:t"}, []string{"conflict"}},
		{touba.LogFilter{TriggerRef: "trigger:other"}, []string{"other"}},
		{touba.LogFilter{QueueID: "q1"}, []string{"conflict", "consumed", "dup"}},
		{touba.LogFilter{Since: Epoch.Add(4 * time.Minute)}, []string{"late", "other"}},
		{touba.LogFilter{Rejected: true, Since: Epoch.Add(time.Minute), Limit: 2}, []string{"late", "other"}},
		{touba.LogFilter{Limit: 1}, []string{"late"}},
		{touba.LogFilter{Code: "NoSuchCode"}, []string{}},
	} {
		if got := eventIDs(e.deliveries(t, tt.f)); !slices.Equal(got, tt.want) {
			t.Errorf("Deliveries(%+v)=%v, want %v", tt.f, got, tt.want)
		}
	}
	// The default limit is 100.
	for i := range 100 {
		e.State.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprint(i), StatusCode: 401,
			ErrorCode: touba.ETriggerSignatureInvalid})
	}
	e.flush(t)
	if got := e.deliveries(t, touba.LogFilter{}); len(got) != 100 || got[0].EventID != "99" {
		t.Fatalf("default listing: %d rows from %v, want 100 from the newest", len(got), eventIDs(got[:1]))
	}
}

// testLogNeverBlocks: a flood of Log calls returns at once; every row is
// then either written or counted as dropped.
func testLogNeverBlocks(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	const n = 20000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			e.State.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprint(i), StatusCode: 401,
				ErrorCode: touba.ETriggerSignatureInvalid})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Log blocked")
	}
	e.flush(t)
	if written, dropped := e.State.LogStats(); written+dropped != n || written == 0 {
		t.Fatalf("written=%d dropped=%d, want %d in all, some written", written, dropped, n)
	}
}

// testLogBounds: past its bounds the log loses its oldest rows first, by
// age and by count. The backend's own pruning runs on its schedule, so the
// test asks for a pass through Stores.PruneLog.
func testLogBounds(t *testing.T, f Factory) {
	e := open(t, f, Options{LogMaxRows: 50, LogMaxAge: time.Hour})
	if e.PruneLog == nil {
		t.Skip("the factory cannot prune the delivery log on demand")
	}
	for i := range 10 {
		e.State.Log(&touba.LoggedDelivery{At: Epoch.Add(-2 * time.Hour), TriggerRef: "trigger:t",
			EventID: fmt.Sprintf("old-%d", i), StatusCode: 401, ErrorCode: touba.ETriggerSignatureInvalid})
	}
	for i := range 100 {
		e.State.Log(&touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("new-%03d", i),
			StatusCode: 409, ErrorCode: touba.ETriggerEventPayloadConflict, Body: []byte("b"), BodyStored: true})
	}
	e.flush(t)
	if err := e.PruneLog(e.ctx); err != nil {
		t.Fatal(err)
	}
	rows := e.deliveries(t, touba.LogFilter{Limit: 1000})
	if len(rows) != 50 || rows[0].EventID != "new-099" || rows[49].EventID != "new-050" {
		t.Fatalf("kept %d rows %v, want the newest 50 (new-099..new-050)", len(rows), eventIDs(rows))
	}
	// Age alone: an hour later every row is past LogMaxAge.
	e.clock.Add(time.Hour + time.Second)
	if err := e.PruneLog(e.ctx); err != nil {
		t.Fatal(err)
	}
	if rows := e.deliveries(t, touba.LogFilter{Limit: 1000}); len(rows) != 0 {
		t.Fatalf("%d rows older than the max age kept", len(rows))
	}
}

// textOK reports whether s is valid UTF-8 without NUL: what a PostgreSQL
// text column accepts.
func textOK(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// testLogBadBytes: sender-controlled fields with NUL and bytes that are not
// UTF-8 (a path /triggers/%00 or %ff, a header value, a remote address)
// are stored with U+FFFD in their place, and cost no other row of their
// batch: on PostgreSQL one such row used to fail the multi-row insert of
// up to 2,048 rows.
func testLogBadBytes(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	const n = 300
	bad := map[string]*touba.LoggedDelivery{
		"nul-ref":  {TriggerRef: "trigger:\x00", StatusCode: 404, ErrorCode: touba.ETriggerNotFound},
		"ff-ref":   {TriggerRef: "trigger:\xff\xfe", StatusCode: 404, ErrorCode: touba.ETriggerNotFound},
		"headers":  {TriggerRef: "trigger:t", StatusCode: 401, Headers: map[string]string{"X-A\xff": "v\x00\xe9", "X-B": "ok"}},
		"remote":   {TriggerRef: "trigger:t", StatusCode: 401, RemoteAddr: "\x00\xc3(:1"},
		"event-id": {TriggerRef: "trigger:t", StatusCode: 400, EventID: "e\xe9\x00"},
	}
	ids := map[string]string{}
	for i := range n {
		d := &touba.LoggedDelivery{TriggerRef: "trigger:t", EventID: fmt.Sprintf("ok-%03d", i), StatusCode: 401,
			ErrorCode: touba.ETriggerSignatureInvalid, RemoteAddr: "192.0.2.1:1"}
		if i%60 == 30 {
			for name, b := range bad {
				if _, done := ids[name]; !done {
					if b.ErrorCode == "" {
						b.ErrorCode = touba.ETriggerSignatureInvalid
					}
					e.State.Log(b)
					ids[name] = b.DeliveryID
					break
				}
			}
		}
		e.State.Log(d)
	}
	e.flush(t)
	rows := e.deliveries(t, touba.LogFilter{Limit: 10 * n})
	if got, want := len(rows), n+len(bad); got != want {
		written, dropped := e.State.LogStats()
		t.Fatalf("log holds %d rows, want %d (written=%d dropped=%d)", got, want, written, dropped)
	}
	for name, id := range ids {
		got, err := e.State.Delivery(e.ctx, id)
		if err != nil || got == nil {
			t.Fatalf("%s: %v, %v", name, got, err)
		}
		for _, s := range []string{got.TriggerRef, got.EventID, got.RemoteAddr} {
			if !textOK(s) {
				t.Fatalf("%s: stored %q, want valid UTF-8 without NUL", name, s)
			}
		}
		for k, v := range got.Headers {
			if !textOK(k) || !textOK(v) {
				t.Fatalf("%s: stored header %q: %q", name, k, v)
			}
		}
	}
	if got, _ := e.State.Delivery(e.ctx, ids["nul-ref"]); got.TriggerRef != "trigger:\uFFFD" {
		t.Fatalf("NUL stored as %q, want U+FFFD", got.TriggerRef)
	}
	if got, _ := e.State.Delivery(e.ctx, ids["headers"]); got.Headers["X-A\uFFFD"] != "v\uFFFD\uFFFD" || got.Headers["X-B"] != "ok" {
		t.Fatalf("headers stored as %q", got.Headers)
	}
}

// testLogRefusedRow: a row the store refuses even after cleaning (here a
// delivery id logged twice) is dropped and counted alone; the other rows
// logged with it are written.
func testLogRefusedRow(t *testing.T, f Factory) {
	e := open(t, f, Options{})
	const n = 200
	for i := range n {
		e.State.Log(&touba.LoggedDelivery{DeliveryID: fmt.Sprintf("row-%03d", i), TriggerRef: "trigger:t",
			StatusCode: 401, ErrorCode: touba.ETriggerSignatureInvalid})
		if i == n/2 {
			e.State.Log(&touba.LoggedDelivery{DeliveryID: "row-010", TriggerRef: "trigger:again",
				StatusCode: 401, ErrorCode: touba.ETriggerSignatureInvalid})
		}
	}
	e.flush(t)
	rows := e.deliveries(t, touba.LogFilter{Limit: 10 * n})
	written, dropped := e.State.LogStats()
	if len(rows) != n || written != n || dropped != 1 {
		t.Fatalf("log holds %d rows (written=%d dropped=%d), want %d written and the repeated id dropped", len(rows), written, dropped, n)
	}
	if got, _ := e.State.Delivery(e.ctx, "row-010"); got == nil || got.TriggerRef != "trigger:t" {
		t.Fatalf("row-010: %+v, want the first one logged", got)
	}
}
