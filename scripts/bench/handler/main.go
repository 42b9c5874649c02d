// Command handler is the small Go process handler of scripts/bench-dispatch:
// it answers every call at once with its input as output and, for an
// external write, an applied receipt.
package main

import (
	"context"

	"github.com/touba/touba-trigger/sdk/handler"
)

func main() {
	handler.Main(handler.Tool{
		Ref: "tool:bench/Write",
		Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
			out := handler.Output(c.Input)
			if r := c.Receipt(handler.Applied, "bench:"+c.Context.CallID); r != nil {
				out = out.WithReceipt(r)
			}
			return out, nil
		},
	})
}
