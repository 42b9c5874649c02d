package trigger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/trigger"
)

// keysProgram: a trigger for each key a delivery decides (concurrency,
// debounce, batch, its own cancel_on match), and one whose deliveries are
// awaited by a wait_for and named by a cancel_on (their values are offered).
const keysProgram = `{"air_version": "touba-air-v1", "triggers": [
  {"ref": "trigger:k/conc", "source": {"kind": "webhook"},
   "concurrency": {"key": {"$ref": "/event/body/k"}, "max": 1}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:k/debounce", "source": {"kind": "webhook"},
   "debounce": {"key": {"$ref": "/event/body/k"}, "window_ms": 60000}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:k/batch", "source": {"kind": "webhook"},
   "batch": {"key": {"$ref": "/event/headers/x-k"}, "max_size": 10, "window_ms": 60000}, "steps": [{"id": "s", "tool": "tool:x/Y"}]},
  {"ref": "trigger:k/cancellable", "source": {"kind": "webhook"},
   "cancel_on": [{"trigger": "trigger:k/awaited", "match": {"$ref": "/event/body/k"}, "on": "/body/k"}],
   "steps": [{"id": "paid", "wait_for": {"trigger": "trigger:k/awaited", "match": {"$ref": "/event/body/k"}, "on": "/body/k"}}]},
  {"ref": "trigger:k/awaited", "source": {"kind": "webhook"}, "steps": []}]}`

func newKeysIntake(t *testing.T) (*queue.Queue, string) {
	t.Helper()
	q, err := queue.Open(context.Background(), filepath.Join(t.TempDir(), "queue.sqlite"), queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	p, err := trigger.ParseProgram("program.air.json", []byte(keysProgram))
	if err != nil {
		t.Fatal(err)
	}
	in := &trigger.Intake{Queue: q}
	in.SetConfig(&trigger.Config{Program: p})
	return q, newServer(t, in).URL
}

// keyOf is a JSON string whose encoding is exactly n bytes (its quotes
// included).
func keyOf(n int) string { return strings.Repeat("k", n-2) }

func postKey(t *testing.T, url, name, id, key string, header bool) reply {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"k": key})
	req, err := http.NewRequest(http.MethodPost, url+"/triggers/"+name, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Touba-Event-Id", id)
	if header {
		req.Header.Set("X-K", key) // a string: its JSON adds the two quotes, as in the body
	}
	f := &fixture{t: t}
	return f.do(req)
}

// TestKeyLimitBoundary: a key whose JSON is exactly touba.MaxKeyBytes is
// accepted, one byte more is refused 422 KeyTooLong naming the key, its
// length and the limit, and nothing is enqueued for it; for every key a
// delivery decides. A value offered to another trigger's wait or cancel
// over the limit is left out: the delivery is accepted.
func TestKeyLimitBoundary(t *testing.T) {
	q, url := newKeysIntake(t)
	for _, tc := range []struct {
		name, which string
		header      bool
	}{
		{"k/conc", "concurrency.key /event/body/k", false},
		{"k/debounce", "debounce.key /event/body/k", false},
		{"k/batch", "batch.key /event/headers/x-k", true},
		{"k/cancellable", `cancel_on[0].match {"$ref": "/event/body/k"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok := postKey(t, url, tc.name, "at-limit", keyOf(touba.MaxKeyBytes), tc.header)
			if got, want := ok.Status, http.StatusAccepted; got != want {
				t.Fatalf("key of %d bytes: status=%d %+v, want %d", touba.MaxKeyBytes, got, ok, want)
			}
			over := postKey(t, url, tc.name, "over-limit", keyOf(touba.MaxKeyBytes+1), tc.header)
			if got, want := over.Status, http.StatusUnprocessableEntity; got != want {
				t.Fatalf("key of %d bytes: status=%d %+v, want %d", touba.MaxKeyBytes+1, got, over, want)
			}
			if got, want := over.Error.Code, touba.EKeyTooLong; got != want {
				t.Fatalf("code=%q, want %q", got, want)
			}
			for _, want := range []string{tc.which, fmt.Sprintf("%d bytes", touba.MaxKeyBytes+1), fmt.Sprint(touba.MaxKeyBytes)} {
				if !strings.Contains(over.Error.Message, want) {
					t.Fatalf("message %q does not say %q", over.Error.Message, want)
				}
			}
			ref := "trigger:" + tc.name
			es, err := q.List(context.Background(), touba.EntryFilter{Limit: 100, TriggerRef: ref})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 1 || es[0].EventID != "at-limit" {
				t.Fatalf("entries of %s: %d, want the one at the limit only", ref, len(es))
			}
		})
	}
	// k/awaited's deliveries offer /body/k to k/cancellable's wait and
	// cancel it by it: an oversized value is no key of k/awaited's own.
	if r := postKey(t, url, "k/awaited", "offers-over", keyOf(touba.MaxKeyBytes+1), false); r.Status != http.StatusAccepted {
		t.Fatalf("a delivery offering an oversized value: %d %+v, want 202 (the offer left out)", r.Status, r)
	}
}

// TestSetDurable_LeavesOutOversizedOffers: the values a delivery offers to
// waits and cancels are left out over the limit, kept at it.
func TestSetDurable_LeavesOutOversizedOffers(t *testing.T) {
	p, err := trigger.ParseProgram("program.air.json", []byte(keysProgram))
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := p.Lookup("k/awaited")
	for _, tc := range []struct {
		n    int
		want int
	}{{touba.MaxKeyBytes, 1}, {touba.MaxKeyBytes + 1, 0}} {
		body, _ := json.Marshal(map[string]string{"k": keyOf(tc.n)})
		d := &touba.Delivery{TriggerRef: tr.Ref, Body: body}
		tr.SetDurable(d)
		if len(d.Offers) != tc.want || len(d.Cancels) != tc.want {
			t.Fatalf("value of %d bytes: %d offers, %d cancels; want %d each", tc.n, len(d.Offers), len(d.Cancels), tc.want)
		}
		if err := tr.CheckKeys(d); err != nil {
			t.Fatalf("value of %d bytes: CheckKeys: %v", tc.n, err)
		}
	}
}
