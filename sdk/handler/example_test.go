package handler_test

import (
	"context"
	"os"
	"strings"

	"github.com/touba/touba-trigger/sdk/handler"
)

// A handler for an external write: the effect_id goes to the remote side
// as its idempotency key and the receipt says what happened. Main would
// read stdin and write stdout; ServeOne shows the exchange.
func Example() {
	tool := handler.Tool{
		Ref:            "tool:examples.orders/CreateOrder",
		RequiredGrants: []string{"network"},
		Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
			var in struct {
				Request struct {
					Item string `json:"item"`
				} `json:"request"`
			}
			if err := c.Decode(&in); err != nil {
				return nil, handler.Errorf("BadInput", "%v", err)
			}
			effect := c.Effect()
			if effect == nil {
				return nil, handler.Errorf("EffectContextRequired", "CreateOrder is an external write")
			}
			// A real handler sends effect.EffectID as the Idempotency-Key here.
			order := map[string]string{"id": "42", "item": in.Request.Item}
			return handler.Output(order).WithReceipt(c.Receipt(handler.Applied, "order:42")), nil
		},
	}
	request := `{"protocol":"touba-tool-handler-v1","operation":"invoke","tool_ref":"tool:examples.orders/CreateOrder",
	 "input":{"request":{"item":"tea"}},
	 "context":{"call_id":"c1","grants":["network"],
	            "effect":{"scope":"q1","effect_id":"q1:create","fingerprint":"sha256:ab","retry_mode":"idempotency_key","attempt":1}}}`
	if err := handler.ServeOne(context.Background(), tool, strings.NewReader(request), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// {"ok":true,"output":{"id":"42","item":"tea"},"effect_receipt":{"effect_id":"q1:create","fingerprint":"sha256:ab","outcome":"applied","receipt_ref":"order:42"}}
}

// A business error after a confirmed rollback: the code stays public and
// the receipt tells the host the write did not happen.
func ExampleErrorf() {
	run := func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		return nil, handler.Errorf("ExternalWriteRefused", "the database refused the transaction").
			WithReceipt(c.Receipt(handler.NotApplied, ""))
	}
	request := `{"protocol":"touba-tool-handler-v1","operation":"invoke","tool_ref":"tool:examples.db/Write","input":{},
	 "context":{"call_id":"c1","effect":{"effect_id":"q1:write","fingerprint":"sha256:cd"}}}`
	tool := handler.Tool{Ref: "tool:examples.db/Write", Run: run}
	if err := handler.ServeOne(context.Background(), tool, strings.NewReader(request), os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// {"ok":false,"error":{"code":"ExternalWriteRefused","message":"the database refused the transaction","details":{"effect_receipt":{"effect_id":"q1:write","fingerprint":"sha256:cd","outcome":"not_applied"}}}}
}
