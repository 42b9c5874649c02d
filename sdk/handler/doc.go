// Package handler is the Go SDK for writing touba-trigger handlers that
// speak touba-tool-handler-v1 (SPEC §4 and §4.1), as a process or over HTTP
// behind a webhook binding (§4.2).
//
// A handler is a Tool: the tool reference it implements, the grants it
// needs and a Run function. Main reads the request from stdin, checks it,
// calls Run and writes the response to stdout. With TOUBA_HANDLER_MODE=persistent
// in the environment the same binary serves one request per line, each in
// its own goroutine, until stdin closes; otherwise it serves exactly one.
// The SDK imports nothing of the daemon: it is the handler's side of the
// protocol only.
//
// A complete handler for an external write:
//
//	package main
//
//	import (
//		"context"
//		"errors"
//
//		"github.com/touba/touba-trigger/sdk/handler"
//	)
//
//	type Order struct {
//		ID    string `json:"id,omitempty"`
//		Item  string `json:"item"`
//		Count int    `json:"count"`
//	}
//
//	func main() {
//		handler.Main(handler.Tool{
//			Ref:            "tool:examples.orders/CreateOrder",
//			RequiredGrants: []string{"network"},
//			Run:            createOrder,
//		})
//	}
//
//	func createOrder(ctx context.Context, c *handler.Call) (*handler.Result, error) {
//		var in struct {
//			Request Order `json:"request"`
//		}
//		if err := c.Decode(&in); err != nil {
//			return nil, handler.Errorf("BadInput", "%v", err)
//		}
//		effect := c.Effect()
//		if effect == nil {
//			return nil, handler.Errorf("EffectContextRequired", "CreateOrder is an external write")
//		}
//		// The shop deduplicates on the idempotency key, so a retry after an
//		// unknown outcome creates no second order.
//		order, err := shop.Create(ctx, in.Request, effect.EffectID)
//		switch {
//		case errors.Is(err, shop.ErrRefused):
//			return nil, handler.Errorf("ExternalWriteRefused", "the shop refused the order").
//				WithReceipt(c.Receipt(handler.NotApplied, ""))
//		case err != nil:
//			// The order may exist: say so, the host decides what to do.
//			return nil, handler.Errorf("ShopUnavailable", "the shop did not answer").
//				WithReceipt(c.Receipt(handler.Unknown, ""))
//		}
//		return handler.Output(order).WithReceipt(c.Receipt(handler.Applied, "order:"+order.ID)), nil
//	}
//
// Here shop stands for the client of the remote service; it is not part of
// the SDK.
//
// # Over HTTP: the target of a webhook binding
//
// The same Tool serves as the URL of a binding of kind webhook (SPEC §2.2,
// §4.2): only the line that serves it changes.
//
//	handler.Main(tool)                                              // a process handler
//	log.Fatal(http.ListenAndServe(addr, handler.HTTPHandler(tool))) // a webhook target
//
// The daemon POSTs the protocol request with Idempotency-Key (the effect_id)
// and X-Signature: "sha256=" and the lowercase hex HMAC-SHA256 of the raw
// body, exactly the bytes sent, keyed with the binding's
// credentials.hmac_secret. HTTPHandler checks it with Verify, with the
// secret from WithSecret or the environment variable TOUBA_WEBHOOK_SECRET,
// before anything else reads the body, and answers:
//
//	405  a method other than POST
//	413  a body over the limit (WithMaxBodyBytes, default 1 MiB)
//	401  X-Signature missing, malformed or wrong; Run is not called
//	400  HandlerProtocolError: not a request of the protocol, or an
//	     Idempotency-Key that is not the signed effect_id
//	200  the protocol response: the receipt, or a business error with ok
//	     false and its code (ToolRefMismatch, GrantMissing, HandlerFailed too)
//
// Every answer carries the header Touba-Protocol: touba-tool-handler-v1:
// that header, not the body's shape, tells the daemon the body is a
// protocol response. The daemon takes a 200 answer's receipt as is, and
// records any 4xx as not_applied with code WebhookRejected, which is true
// since Run did not run. The signature covers the body, not the time: a recorded request can
// be sent again, and a retry after a lost answer is sent again on purpose,
// so Run must deduplicate by Effect().EffectID (equal to
// Context.IdempotencyKey over HTTP) as it would for a process handler.
//
// # What the SDK checks
//
// Before Run, a request with another protocol or an unknown operation is
// answered with HandlerProtocolError, one for another tool with
// ToolRefMismatch, and one whose context.grants lacks a required grant
// with GrantMissing; for an external write these two also carry a
// not_applied receipt, since Run never started. A panic in Run is answered
// with HandlerPanic. A plain error from Run is answered with HandlerFailed
// and a generic message (the text goes to Tool.ErrorLog, as it may hold
// private data); return an *Error for a public code and message.
//
// # Receipts
//
// A Receipt can only be made by Call.Receipt, which binds it to that
// call's effect_id and fingerprint, and is sent only in the answer to that
// call: a handler cannot vouch for another identity. A call without a
// receipt, or with one the SDK drops, leaves the outcome to the host, which
// records the effect as unknown. Operation tells a compensation
// (Compensate) from a normal call (Invoke).
package handler
