package trigger_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/sqlite/queue"
)

// TestIntakeTable walks every row of SPEC §3.1 and the order of checks.
// Each case runs on a fresh queue; before() may send earlier deliveries.
func TestIntakeTable(t *testing.T) {
	long := strings.Repeat("x", 201)
	big := strings.Repeat("b", 65)
	for _, tc := range []struct {
		name       string
		before     func(f *fixture)
		method     string
		trigger    string
		body       string
		hdr        map[string]string
		status     int
		code       string // error code, or the answer's status for 202
		sameQueue  bool   // the answer names the entry before() created
		entries    int    // queue entries afterwards
		loggedCode string // delivery-log row expected ("-" for none)
		bodyKept   bool
	}{
		{name: "new", trigger: "t/plain", body: `{"a":1}`, hdr: map[string]string{"X-Touba-Event-Id": "e1"},
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "new without event id", trigger: "t/plain", body: `{"a":1}`,
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "duplicate", before: sendE1, trigger: "t/plain", body: `{"a":1}`, hdr: map[string]string{"X-Touba-Event-Id": "e1"},
			status: 202, code: "duplicate", sameQueue: true, entries: 1, loggedCode: "", bodyKept: true},
		{name: "conflict", before: sendE1, trigger: "t/plain", body: `{"a":2}`, hdr: map[string]string{"X-Touba-Event-Id": "e1"},
			status: 409, code: touba.ETriggerEventPayloadConflict, sameQueue: true, entries: 1, loggedCode: touba.ETriggerEventPayloadConflict, bodyKept: true},
		{name: "redelivery of consumed entry", before: func(f *fixture) { sendE1(f); lease(f) }, trigger: "t/plain", body: `{"a":1}`,
			hdr: map[string]string{"X-Touba-Event-Id": "e1"}, status: 200, code: touba.IntakeConsumed, sameQueue: true, entries: 1,
			loggedCode: touba.ETriggerReplayRejected, bodyKept: true},
		{name: "redelivery of consumed entry, redelivery reject", before: func(f *fixture) { sendOn(f, "t/reject", "e1"); lease(f) },
			trigger: "t/reject", body: `{"a":1}`, hdr: map[string]string{"X-Touba-Event-Id": "e1"},
			status: 409, code: touba.ETriggerReplayRejected, sameQueue: true, entries: 1, loggedCode: touba.ETriggerReplayRejected, bodyKept: true},
		{name: "duplicate, redelivery reject", before: func(f *fixture) { sendOn(f, "t/reject", "e1") },
			trigger: "t/reject", body: `{"a":1}`, hdr: map[string]string{"X-Touba-Event-Id": "e1"},
			status: 202, code: "duplicate", sameQueue: true, entries: 1, loggedCode: "", bodyKept: true},
		{name: "conflict on consumed entry, redelivery reject", before: func(f *fixture) { sendOn(f, "t/reject", "e1"); lease(f) },
			trigger: "t/reject", body: `{"a":2}`, hdr: map[string]string{"X-Touba-Event-Id": "e1"},
			status: 409, code: touba.ETriggerEventPayloadConflict, sameQueue: true, entries: 1, loggedCode: touba.ETriggerEventPayloadConflict, bodyKept: true},
		{name: "conflict on consumed entry", before: func(f *fixture) { sendE1(f); lease(f) }, trigger: "t/plain", body: `{"a":9}`,
			hdr: map[string]string{"X-Touba-Event-Id": "e1"}, status: 409, code: touba.ETriggerEventPayloadConflict, sameQueue: true, entries: 1,
			loggedCode: touba.ETriggerEventPayloadConflict, bodyKept: true},
		{name: "event id empty", trigger: "t/plain", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": ""},
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "event id too long", trigger: "t/plain", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": long},
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "event id not printable", trigger: "t/plain", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": "caf\xc3\xa9"},
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "event id from body", trigger: "t/ptr", body: `{"id":"evt_1"}`, status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "event id from body not a string", trigger: "t/ptr", body: `{"id":{"x":1}}`,
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "event id from body empty", trigger: "t/ptr", body: `{"id":""}`,
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		// source.event_id.required (SPEC §2.1): refused before any entry.
		{name: "required id header absent", trigger: "t/required", body: `{}`,
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "required id header present", trigger: "t/required", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": "r1"},
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "required id header empty is invalid", trigger: "t/required", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": ""},
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "stripe default id: body not JSON", trigger: "t/stripe", body: `not json`,
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "stripe default id: no /id", trigger: "t/stripe", body: `{"type":"charge.succeeded"}`,
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "stripe default id: null /id", trigger: "t/stripe", body: `{"id":null}`,
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "stripe default id: /id not a string", trigger: "t/stripe", body: `{"id":true}`,
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "stripe, required false: body not JSON gets a fresh identity", trigger: "t/stripe-optional", body: `not json`,
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "pointer, not required: body not JSON gets a fresh identity", trigger: "t/ptr", body: `not json`,
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "github default id header absent", trigger: "t/github", body: `{}`,
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "github default id header present, signed", trigger: "t/github", body: `{}`,
			hdr:    signed(`{}`, map[string]string{"X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}),
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "order: missing id before signature", trigger: "t/github", body: `{}`, hdr: map[string]string{"X-Signature": "sha256=00"},
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "order: id before signature, stripe", trigger: "t/stripe", body: `not json`, hdr: map[string]string{"X-Signature": "sha256=00"},
			status: 400, code: touba.ETriggerEventIDMissing, loggedCode: touba.ETriggerEventIDMissing},
		{name: "order: signature after a present id", trigger: "t/stripe", body: `{"id":"evt_1"}`, hdr: map[string]string{"X-Signature": "sha256=00"},
			status: 401, code: touba.ETriggerSignatureInvalid, loggedCode: touba.ETriggerSignatureInvalid},
		{name: "stripe default id present, signed", trigger: "t/stripe", body: `{"id":"evt_1"}`, hdr: signed(`{"id":"evt_1"}`, nil),
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "order: size before missing id", trigger: "t/github", body: big,
			status: 413, code: touba.ETriggerPayloadTooLarge, loggedCode: touba.ETriggerPayloadTooLarge},
		{name: "no such trigger", trigger: "t/nope", body: `{}`, status: 404, code: touba.ETriggerNotFound, loggedCode: touba.ETriggerNotFound},
		{name: "body too large", trigger: "t/plain", body: big, status: 413, code: touba.ETriggerPayloadTooLarge, loggedCode: touba.ETriggerPayloadTooLarge},
		{name: "signature missing", trigger: "t/signed", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": "s1"},
			status: 401, code: touba.ETriggerSignatureInvalid, loggedCode: touba.ETriggerSignatureInvalid},
		{name: "signature wrong", trigger: "t/signed", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": "s1", "X-Signature": "sha256=00"},
			status: 401, code: touba.ETriggerSignatureInvalid, loggedCode: touba.ETriggerSignatureInvalid},
		{name: "signature good", trigger: "t/signed", body: `{}`, hdr: signed(`{}`, map[string]string{"X-Touba-Event-Id": "s1"}),
			status: 202, code: "enqueued", entries: 1, loggedCode: "-"},
		{name: "method", method: "GET", trigger: "t/plain", status: 405, code: touba.EMethodNotAllowed, loggedCode: touba.EMethodNotAllowed},
		{name: "method PUT", method: "PUT", trigger: "t/plain", body: "{}", status: 405, code: touba.EMethodNotAllowed, loggedCode: touba.EMethodNotAllowed},

		// Order of checks: method, trigger, size, event id, signature, identity.
		{name: "order: method before trigger", method: "GET", trigger: "t/nope", status: 405, code: touba.EMethodNotAllowed, loggedCode: touba.EMethodNotAllowed},
		{name: "order: trigger before event id", trigger: "t/nope", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": long},
			status: 404, code: touba.ETriggerNotFound, loggedCode: touba.ETriggerNotFound},
		{name: "order: size before event id", trigger: "t/plain", body: big, hdr: map[string]string{"X-Touba-Event-Id": ""},
			status: 413, code: touba.ETriggerPayloadTooLarge, loggedCode: touba.ETriggerPayloadTooLarge},
		{name: "order: event id before signature", trigger: "t/signed", body: `{}`, hdr: map[string]string{"X-Touba-Event-Id": ""},
			status: 400, code: touba.ETriggerEventIDInvalid, loggedCode: touba.ETriggerEventIDInvalid},
		{name: "order: signature before identity", before: sendSigned, trigger: "t/signed", body: `{"z":1}`,
			hdr:    map[string]string{"X-Touba-Event-Id": "s1", "X-Signature": "sha256=00"},
			status: 401, code: touba.ETriggerSignatureInvalid, entries: 1, loggedCode: touba.ETriggerSignatureInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, queue.Options{})
			var first string
			if tc.before != nil {
				tc.before(f)
				ids, _ := f.queue.List(context.Background(), touba.EntryFilter{})
				if len(ids) > 0 {
					first = ids[0].QueueID
				}
			}
			method := tc.method
			if method == "" {
				method = "POST"
			}
			r := f.send(method, tc.trigger, tc.body, tc.hdr)
			if got, want := r.Status, tc.status; got != want {
				t.Fatalf("status=%d, want %d (%+v)", got, want, r)
			}
			code := r.Error.Code
			queueID := r.Error.QueueID
			if r.Status == 202 || r.Status == 200 {
				code, queueID = r.Answer, r.QueueID
			}
			if r.Status == 200 && r.Code != touba.ETriggerReplayRejected {
				t.Fatalf("200 answer %+v lacks code %s", r, touba.ETriggerReplayRejected)
			}
			if got, want := code, tc.code; got != want {
				t.Fatalf("code=%q, want %q (%+v)", got, want, r)
			}
			if tc.sameQueue && queueID != first {
				t.Fatalf("queue_id=%q, want the existing %q", queueID, first)
			}
			if r.Status == 202 && queueID == "" {
				t.Fatalf("202 without queue_id")
			}
			if got, want := f.count(t), tc.entries; got != want {
				t.Fatalf("entries=%d, want %d", got, want)
			}
			rows := f.logRows(t)
			if tc.loggedCode == "-" {
				if len(rows) != 0 {
					t.Fatalf("delivery log has %d rows, want none", len(rows))
				}
				return
			}
			if len(rows) != 1 {
				t.Fatalf("delivery log has %d rows, want 1", len(rows))
			}
			row := rows[0]
			if row.ErrorCode != tc.loggedCode || row.StatusCode != tc.status || row.TriggerRef != "trigger:"+tc.trigger {
				t.Fatalf("log row %+v, want code %q status %d", row, tc.loggedCode, tc.status)
			}
			if row.BodyStored != tc.bodyKept {
				t.Fatalf("body stored=%v, want %v", row.BodyStored, tc.bodyKept)
			}
			if tc.bodyKept && string(row.Body) != tc.body {
				t.Fatalf("stored body %q, want %q", row.Body, tc.body)
			}
			if tc.body != "" && tc.status != 404 && tc.status != 405 && tc.status != 413 && row.Digest != dedupe.Digest([]byte(tc.body)) {
				t.Fatalf("digest %q, want sha256 of the body", row.Digest)
			}
		})
	}
}

func sendE1(f *fixture) {
	if r := f.send("POST", "t/plain", `{"a":1}`, map[string]string{"X-Touba-Event-Id": "e1"}); r.Status != 202 {
		f.t.Fatalf("setup: %+v", r)
	}
}

func sendOn(f *fixture, trigger, eventID string) {
	if r := f.send("POST", trigger, `{"a":1}`, map[string]string{"X-Touba-Event-Id": eventID}); r.Status != 202 {
		f.t.Fatalf("setup: %+v", r)
	}
}

func sendSigned(f *fixture) {
	if r := f.send("POST", "t/signed", `{}`, signed(`{}`, map[string]string{"X-Touba-Event-Id": "s1"})); r.Status != 202 {
		f.t.Fatalf("setup: %+v", r)
	}
}

func lease(f *fixture) {
	got, err := f.queue.Lease(context.Background(), 10)
	if err != nil || len(got) != 1 {
		f.t.Fatalf("lease: %v %d", err, len(got))
	}
}

func TestEntryKeepsDelivery(t *testing.T) {
	f := newFixture(t, queue.Options{})
	body := `{"order_id":42}`
	r := f.send("POST", "t/plain", body, map[string]string{"X-Touba-Event-Id": "e9", "Authorization": "Bearer x", "X-Extra": "v"})
	if r.Status != 202 {
		t.Fatalf("%+v", r)
	}
	d, err := f.queue.Get(context.Background(), r.QueueID)
	if err != nil || d == nil {
		t.Fatalf("get: %v", err)
	}
	if d.TriggerRef != "trigger:t/plain" || d.EventID != "e9" || string(d.Body) != body ||
		d.Digest != dedupe.Digest([]byte(body)) || d.Status != touba.StatusPending || d.ReceivedAt.IsZero() {
		t.Fatalf("entry %+v", d)
	}
	if d.Headers["x-extra"] != "v" {
		t.Fatalf("headers %v lack x-extra", d.Headers)
	}
	if _, ok := d.Headers["authorization"]; ok {
		t.Fatalf("authorization header was kept: %v", d.Headers)
	}
}

func TestMaxPending(t *testing.T) {
	f := newFixture(t, queue.Options{MaxPending: 2})
	for i, want := range []int{202, 202, 503} {
		r := f.send("POST", "t/plain", "{}", nil)
		if r.Status != want {
			t.Fatalf("request %d: status=%d, want %d", i, r.Status, want)
		}
		if want == 503 && (r.Error.Code != touba.ETriggerUnavailable || r.RetryAfter == "") {
			t.Fatalf("503 answer %+v lacks code or Retry-After", r)
		}
	}
	if got, err := f.queue.Lease(context.Background(), 10); err != nil || len(got) != 2 {
		t.Fatalf("lease: %v %d", err, len(got))
	}
	if r := f.send("POST", "t/plain", "{}", nil); r.Status != 202 {
		t.Fatalf("after lease: status=%d, want 202", r.Status)
	}
}

func TestDraining(t *testing.T) {
	f := newFixture(t, queue.Options{})
	f.intake.Drain()
	r := f.send("POST", "t/plain", "{}", nil)
	if r.Status != 503 || r.Error.Code != touba.ETriggerUnavailable || r.RetryAfter == "" {
		t.Fatalf("%+v", r)
	}
	resp, err := http.Get(f.srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz=%d while draining", resp.StatusCode)
	}
}
