package orders_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
	"github.com/touba/touba-trigger/internal/testkit"
	"github.com/touba/touba-trigger/verify"
)

// answer is the daemon's answer to a delivery.
type answer struct {
	status  int
	code    string // error code, TriggerReplayRejected on 200 consumed, or "" on 202
	queueID string
}

// send posts body as a Standard Webhooks delivery with id msgID, signed
// with secret at the current time.
func send(tb testing.TB, base, msgID, body, secret string) answer {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, base+triggerPath, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(verify.StandardIDHeader, msgID)
	cfg := verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{secret}}
	if err := verify.SignRequest(cfg, req.Header, []byte(body), time.Now()); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("post %s: %v", msgID, err)
	}
	defer resp.Body.Close()
	var a struct {
		QueueID string `json:"queue_id"`
		Code    string `json:"code"` // beside status consumed
		Error   struct {
			Code    string `json:"code"`
			QueueID string `json:"queue_id"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		tb.Fatalf("answer to %s: %v", msgID, err)
	}
	return answer{status: resp.StatusCode, code: a.Code + a.Error.Code, queueID: a.QueueID + a.Error.QueueID}
}

func readOrder(tb testing.TB, dir string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "order.json"))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// TestOrderEndToEnd sends the README's delivery through ReadOrder,
// CreateOrder (Node.js) and ShipOrder (Python), then the redeliveries of
// the walk-through.
func TestOrderEndToEnd(t *testing.T) {
	e := newExample(t)
	d := e.start(nil)
	body := readOrder(t, e.dir)

	first := send(t, d.URL(), "msg_0001", body, webhookSecret)
	if got, want := first.status, http.StatusAccepted; got != want {
		t.Fatalf("status=%d, want %d (%+v)", got, want, first)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return e.stats().Shipments.Performed == 1 }, "one shipment")
	orders := e.orders()
	if got, want := len(orders), 1; got != want {
		t.Fatalf("orders=%d, want %d: %+v", got, want, orders)
	}
	if got, want := orders[0].Reference, "A-1001"; got != want {
		t.Fatalf("reference=%q, want %q", got, want)
	}

	// The same delivery again: consumed, so a replay; the same id with
	// another body: a conflict; a wrong signature: refused. None runs anything.
	tests := []struct {
		name, id, body, secret string
		status                 int
		code                   string
	}{
		{"redelivery", "msg_0001", body, webhookSecret, http.StatusOK, touba.ETriggerReplayRejected},
		{"same id, other body", "msg_0001", strings.Replace(body, `"quantity": 2`, `"quantity": 3`, 1), webhookSecret,
			http.StatusConflict, touba.ETriggerEventPayloadConflict},
		{"wrong secret", "msg_0009", body, "whsec_c29tZSBvdGhlciBzZWNyZXQ=", http.StatusUnauthorized, touba.ETriggerSignatureInvalid},
	}
	for _, tt := range tests {
		a := send(t, d.URL(), tt.id, tt.body, tt.secret)
		if a.status != tt.status || a.code != tt.code {
			t.Fatalf("%s: answered %d %s, want %d %s", tt.name, a.status, a.code, tt.status, tt.code)
		}
		if tt.id == "msg_0001" && a.queueID != first.queueID {
			t.Fatalf("%s: queue_id %s, want the first delivery's %s", tt.name, a.queueID, first.queueID)
		}
	}

	// A new delivery for the same shop order: ReadOrder finds it, so
	// CreateOrder makes none, and the provider keeps one shipment per order.
	second := send(t, d.URL(), "msg_0002", body, webhookSecret)
	if second.status != http.StatusAccepted {
		t.Fatalf("second delivery: %+v", second)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return e.stats().Shipments.Requests == 2 }, "the second run's ship call")
	s := e.stats()
	if s.Orders.Performed != 1 || s.Shipments.Performed != 1 {
		t.Fatalf("provider performed %d orders and %d shipments, want 1 and 1", s.Orders.Performed, s.Shipments.Performed)
	}

	d.Signal(syscall.SIGTERM)
	if code := d.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d\n%s", code, d.Log())
	}
	for _, qid := range []string{first.queueID, second.queueID} {
		if got, want := e.entryStatus(qid), touba.StatusDone; got != want {
			t.Fatalf("entry %s is %s, want %s\n%s", qid, got, want, d.Log())
		}
	}
	create, ship := e.effect(first.queueID, "create"), e.effect(first.queueID, "ship")
	if create.State != touba.EffectApplied || create.ReceiptRef != "order:"+orders[0].ID {
		t.Fatalf("create effect %s %q, want applied with order:%s", create.State, create.ReceiptRef, orders[0].ID)
	}
	if ship.State != touba.EffectApplied || !strings.HasPrefix(ship.ReceiptRef, "shipment:") {
		t.Fatalf("ship effect (the Python handler's receipt) %s %q, want applied with shipment:...", ship.State, ship.ReceiptRef)
	}
}

// TestKillBetweenDispatchedAndOutcome SIGKILLs the daemon (TOUBA_CRASHPOINT)
// after CreateOrder was dispatched and before its outcome was journaled:
// before the request reached the handler, and after the handler created the
// order and answered. The restarted daemon finds the effect unknown and,
// the binding being idempotency_key, sends the same effect_id again; the
// provider deduplicates on it, so there is exactly one order.
func TestKillBetweenDispatchedAndOutcome(t *testing.T) {
	tests := []struct {
		point       string
		sentBefore  int // orders performed when the daemon died
		wantReplays int // requests the provider answered from its idempotency store
	}{
		{dispatcher.CrashAfterDispatched, 0, 0},
		{dispatcher.CrashAfterAnswer, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.point, func(t *testing.T) {
			e := newExample(t)
			d := e.start([]string{"TOUBA_CRASHPOINT=" + tt.point})
			a := send(t, d.URL(), "msg_crash", readOrder(t, e.dir), webhookSecret)
			if a.status != http.StatusAccepted {
				t.Fatalf("delivery: %+v", a)
			}
			if code := d.Wait(60 * time.Second); code != -1 {
				t.Fatalf("exit code %d, want death by SIGKILL at %s\n%s", code, tt.point, d.Log())
			}
			if got := e.stats().Orders.Performed; got != tt.sentBefore {
				t.Fatalf("orders performed before the restart=%d, want %d", got, tt.sentBefore)
			}

			d2 := e.start(nil, "--take-over-stale-lock")
			testkit.WaitFor(t, 60*time.Second, func() bool { return e.stats().Shipments.Performed == 1 }, "one shipment after the restart")
			d2.WaitLog("effect.unknown", 10*time.Second)
			s := e.stats()
			if got, want := len(e.orders()), 1; got != want {
				t.Fatalf("orders=%d, want exactly %d\n%s", got, want, d2.Log())
			}
			if s.Orders.Performed != 1 || s.Orders.Replays != tt.wantReplays {
				t.Fatalf("provider performed %d orders with %d replays, want 1 with %d", s.Orders.Performed, s.Orders.Replays, tt.wantReplays)
			}

			d2.Signal(syscall.SIGTERM)
			if code := d2.Wait(30 * time.Second); code != 0 {
				t.Fatalf("exit code %d\n%s", code, d2.Log())
			}
			if got, want := e.entryStatus(a.queueID), touba.StatusDone; got != want {
				t.Fatalf("entry is %s, want %s", got, want)
			}
			create := e.effect(a.queueID, "create")
			if create.State != touba.EffectApplied || create.Attempts != 2 || create.ReceiptRef != "order:"+e.orders()[0].ID {
				t.Fatalf("create effect %s after %d attempts, receipt %q; want applied after 2 with the order's id",
					create.State, create.Attempts, create.ReceiptRef)
			}
		})
	}
}
