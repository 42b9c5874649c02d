package handler_test

import (
	"context"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/sdk/handler"
)

// TestReceiptBound checks that a receipt carries exactly the request's
// effect_id and fingerprint, in the result and in an error.
func TestReceiptBound(t *testing.T) {
	req := mustJSON(t, newRequest("c1", nil, true))
	wantID, wantFP := "q1:c1", "sha256:"+strings.Repeat("ab", 32)

	r := serveOne(t, newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		return handler.Output("done").WithReceipt(c.Receipt(handler.Applied, "order:42")), nil
	}), req)
	if got, want := *r.EffectReceipt, (receipt{wantID, wantFP, "applied", "order:42"}); got != want {
		t.Fatalf("receipt=%+v, want %+v", got, want)
	}

	r = serveOne(t, newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		return nil, handler.Errorf("ExternalWriteRefused", "the database refused the transaction").
			WithDetail("table", "orders").
			WithReceipt(c.Receipt(handler.NotApplied, ""))
	}), req)
	if got, want := r.code(), "ExternalWriteRefused"; got != want {
		t.Fatalf("code=%q, want %q", got, want)
	}
	if got, want := *r.errorReceipt(t), (receipt{wantID, wantFP, "not_applied", ""}); got != want {
		t.Fatalf("error receipt=%+v, want %+v", got, want)
	}
	if got, want := string(r.Error.Details["table"]), `"orders"`; got != want {
		t.Fatalf("details.table=%s, want %s", got, want)
	}
}

// TestReceiptCannotBeForged tries every way the API leaves to send a
// receipt for another identity; none may reach the response.
func TestReceiptCannotBeForged(t *testing.T) {
	// A receipt made by an earlier call, kept and returned by a later one.
	var kept *handler.Receipt
	first := newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		kept = c.Receipt(handler.Applied, "order:1")
		return nil, nil
	})
	if r := serveOne(t, first, mustJSON(t, newRequest("first", nil, true))); !r.OK {
		t.Fatalf("first call failed: %+v", r.Error)
	}
	if kept == nil || kept.EffectID() != "q1:first" {
		t.Fatalf("kept receipt=%+v", kept)
	}

	forgeries := map[string]func(context.Context, *handler.Call) (*handler.Result, error){
		"receipt of another call": func(context.Context, *handler.Call) (*handler.Result, error) {
			return handler.Output(1).WithReceipt(kept), nil
		},
		"copy of another call's receipt": func(context.Context, *handler.Call) (*handler.Result, error) {
			cp := *kept
			return handler.Output(1).WithReceipt(&cp), nil
		},
		"zero receipt": func(context.Context, *handler.Call) (*handler.Result, error) {
			return handler.Output(1).WithReceipt(&handler.Receipt{}), nil
		},
		"receipt of another call in an error": func(context.Context, *handler.Call) (*handler.Result, error) {
			return nil, handler.Errorf("Refused", "no").WithReceipt(kept)
		},
		"receipt smuggled in details": func(context.Context, *handler.Call) (*handler.Result, error) {
			return nil, handler.Errorf("Refused", "no").WithDetail("effect_receipt", map[string]string{
				"effect_id": "q1:other", "fingerprint": "sha256:00", "outcome": "applied"})
		},
		"invalid outcome": func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			return handler.Output(1).WithReceipt(c.Receipt(handler.Outcome("cancelled"), "")), nil
		},
		"edited effect copy": func(_ context.Context, c *handler.Call) (*handler.Result, error) {
			e := c.Effect()
			e.EffectID, e.Fingerprint = "q1:other", "sha256:00"
			// Still bound to the request's identity: checked below.
			return handler.Output(1).WithReceipt(c.Receipt(handler.Applied, "")), nil
		},
	}
	for name, run := range forgeries {
		t.Run(name, func(t *testing.T) {
			r := serveOne(t, newTool(t, run), mustJSON(t, newRequest("second", nil, true)))
			rc := r.EffectReceipt
			if !r.OK {
				rc = r.errorReceipt(t)
			}
			if rc != nil && (rc.EffectID != "q1:second" || rc.Fingerprint != "sha256:"+strings.Repeat("ab", 32)) {
				t.Fatalf("response carries a receipt for another identity: %+v", rc)
			}
			if rc != nil && name != "edited effect copy" {
				t.Fatalf("response carries receipt %+v, want none", rc)
			}
			if rc == nil && name == "edited effect copy" {
				t.Fatalf("bound receipt missing")
			}
		})
	}
}

// TestReceiptWithoutEffect checks that a call of a binding without
// external write gets no receipt, and that attaching nil is harmless.
func TestReceiptWithoutEffect(t *testing.T) {
	r := serveOne(t, newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		if c.Effect() != nil {
			t.Errorf("Effect()=%+v, want nil", c.Effect())
		}
		rc := c.Receipt(handler.Applied, "x")
		if rc != nil {
			t.Errorf("Receipt()=%+v, want nil", rc)
		}
		return handler.Output(1).WithReceipt(rc), nil
	}), mustJSON(t, newRequest("c1", nil, false)))
	if !r.OK || r.EffectReceipt != nil {
		t.Fatalf("ok=%v receipt=%+v, want ok and none", r.OK, r.EffectReceipt)
	}
}

// TestReceiptAccessors checks what a handler can read back from a receipt.
func TestReceiptAccessors(t *testing.T) {
	serveOne(t, newTool(t, func(_ context.Context, c *handler.Call) (*handler.Result, error) {
		rc := c.Receipt(handler.Unknown, "order:9")
		if rc.EffectID() != "q1:c1" || rc.Fingerprint() != "sha256:"+strings.Repeat("ab", 32) ||
			rc.Outcome() != handler.Unknown || rc.Ref() != "order:9" {
			t.Errorf("receipt reads %q %q %q %q", rc.EffectID(), rc.Fingerprint(), rc.Outcome(), rc.Ref())
		}
		return nil, nil
	}), mustJSON(t, newRequest("c1", nil, true)))
}

// TestErrorText checks the Go error text of a handler error.
func TestErrorText(t *testing.T) {
	if got, want := handler.Errorf("OutOfStock", "%d left", 0).Error(), "OutOfStock: 0 left"; got != want {
		t.Fatalf("Error()=%q, want %q", got, want)
	}
}
