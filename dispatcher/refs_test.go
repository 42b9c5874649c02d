package dispatcher_test

import (
	"path/filepath"
	"testing"

	touba "github.com/touba/touba-trigger"
)

// TestRefResolution runs a step whose input reads the event body, its
// headers and fields, and a second step that reads the first one's output
// (SPEC §2.1), and checks what each handler was given.
func TestRefResolution(t *testing.T) {
	dir := t.TempDir()
	thenCalls := filepath.Join(dir, "then.calls")
	prog := program(t, 3,
		step{"one", toolW, map[string]any{
			"order":   ref("/event/body/order_id"),
			"big":     ref("/event/body/big"),
			"whole":   ref("/event/body"),
			"sig":     ref("/event/headers/x-sig"),
			"trigger": ref("/event/trigger_ref"),
			"event":   ref("/event/event_id"),
			"queue":   ref("/event/queue_id"),
			"at":      ref("/event/received_at"),
			"list":    []any{ref("/event/body/items/1"), "lit"},
			"escaped": ref("/event/body/a~1b~0c"),
			"literal": map[string]any{"$ref": "/event/nowhere", "also": 1},
		}},
		step{"two", toolThen, map[string]any{"mode": "ok", "calls": thenCalls,
			"bill":  ref("/steps/one/output/external_id"),
			"order": ref("/steps/one/output/payload/order"),
			"all":   ref("/steps/one/output"),
		}})
	w := newWorld(t, prog, manifestOf(t, binding{Tool: toolW, Stub: true, Write: touba.RetryIdempotencyKey},
		binding{Tool: toolThen}), nil, true)
	body := `{"order_id": 42, "big": 12345678901234567890123, "items": ["a", "b"], "a/b~c": true}`
	qid := w.enqueue(trigName, body, map[string]string{"x-sig": "abc"})
	e := w.wait(qid, touba.StatusDone)

	one := w.effect(qid, "one").Result
	payload := field(t, one, "payload")
	for key, want := range map[string]string{
		"order":   `42`,
		"big":     `12345678901234567890123`, // numbers kept as written
		"whole":   body,
		"sig":     `"abc"`,
		"trigger": `"trigger:` + trigName + `"`,
		"event":   mustJSON(t, e.EventID),
		"queue":   mustJSON(t, qid),
		"at":      mustJSON(t, touba.FormatTime(e.ReceivedAt)),
		"list":    `["b", "lit"]`,
		"escaped": `true`,
		"literal": `{"$ref": "/event/nowhere", "also": 1}`,
	} {
		if got := field(t, payload, key); !jsonEqual(t, got, []byte(want)) {
			t.Errorf("input %s of step one = %s, want %s", key, got, want)
		}
	}
	if got, want := string(field(t, payload, "big")), `12345678901234567890123`; got != want {
		t.Errorf("big number reached the handler as %s, want %s", got, want)
	}

	cs := calls(t, thenCalls)
	if len(cs) != 1 {
		t.Fatalf("step two called %d times, want 1", len(cs))
	}
	for key, want := range map[string]string{
		"bill":  mustJSON(t, "BILL-"+qid+":one"),
		"order": `42`,
		"all":   string(one),
	} {
		if got := field(t, cs[0].Input, key); !jsonEqual(t, got, []byte(want)) {
			t.Errorf("input %s of step two = %s, want %s", key, got, want)
		}
	}
}

// TestRefToBodyThatIsNotJSON: the event body is then the raw body as a
// string.
func TestRefToBodyThatIsNotJSON(t *testing.T) {
	w := newWorld(t, program(t, 3, step{"one", toolW, map[string]any{"body": ref("/event/body")}}),
		manifestOf(t, binding{Tool: toolW, Stub: true, Write: touba.RetryIdempotencyKey}), nil, true)
	qid := w.enqueue(trigName, `a=1&b=<2>`, nil)
	w.wait(qid, touba.StatusDone)
	got := field(t, field(t, w.effect(qid, "one").Result, "payload"), "body")
	if want := mustJSON(t, "a=1&b=<2>"); !jsonEqual(t, got, []byte(want)) {
		t.Fatalf("body = %s, want %s", got, want)
	}
}

// TestStepInputUnresolved: a $ref that resolves to nothing fails the step
// with StepInputUnresolved, before any call and without a journal entry,
// and the entry is not retried.
func TestStepInputUnresolved(t *testing.T) {
	cases := []struct {
		name, ptr, body string
	}{
		{"body field missing", "/event/body/missing", `{"order_id": 1}`},
		{"header absent", "/event/headers/x-absent", `{}`},
		{"index out of range", "/event/body/items/2", `{"items": [1, 2]}`},
		{"index not a number", "/event/body/items/first", `{"items": [1, 2]}`},
		{"into a scalar", "/event/body/order_id/x", `{"order_id": 1}`},
		{"into a body that is not JSON", "/event/body/x", `x=1`},
		{"earlier output lacks the field", "/steps/first/output/nope", `{}`},
	}
	for _, r := range runners {
		for _, c := range cases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				dir := t.TempDir()
				firstCalls, billCalls := filepath.Join(dir, "first.calls"), filepath.Join(dir, "bill.calls")
				prog := program(t, 3,
					step{"first", toolThen, map[string]any{"mode": "ok", "calls": firstCalls}},
					step{"bill", toolW, map[string]any{"mode": "ok", "calls": billCalls, "x": ref(c.ptr)}})
				w := newWorld(t, prog, manifestOf(t, binding{Tool: toolW, Stub: r.stub, Write: touba.RetryIdempotencyKey},
					binding{Tool: toolThen}), nil, true)
				qid := w.enqueue(trigName, c.body, map[string]string{"x-present": "1"})
				wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EStepInputUnresolved, 1)
				if got := w.remoteCalls(r, billCalls); got != 0 {
					t.Fatalf("bill reached the remote side %d times, want 0", got)
				}
				if got := w.effects(qid); len(got) != 0 {
					t.Fatalf("effects journaled: %+v, want none", got)
				}
				runs := w.waitRuns(qid, 1)
				if runs[0].ErrorCode != touba.EStepInputUnresolved {
					t.Fatalf("run %+v, want code %s", runs[0], touba.EStepInputUnresolved)
				}
			})
		}
	}
}

// The unresolved input of a none-contract step fails the same way.
func TestStepInputUnresolvedNoneContract(t *testing.T) {
	billCalls := filepath.Join(t.TempDir(), "bill.calls")
	w := newWorld(t, program(t, 3, step{"bill", toolW, map[string]any{"mode": "ok", "calls": billCalls, "x": ref("/event/body/x")}}),
		manifestOf(t, binding{Tool: toolW}), nil, true)
	qid := w.enqueue(trigName, `{"y": 1}`, nil)
	wantEntry(t, w.wait(qid, touba.StatusFailed), touba.StatusFailed, touba.EStepInputUnresolved, 1)
	if got := len(calls(t, billCalls)); got != 0 {
		t.Fatalf("%d calls, want 0", got)
	}
}
