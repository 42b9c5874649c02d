// Command sdkecho is a handler written with the Go SDK (sdk/handler), for
// the handler package's tests of persistent mode against a real SDK: it
// answers with its pid, its mode and its input, and an applied receipt.
package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/touba/touba-trigger/sdk/handler"
)

func main() {
	handler.Main(handler.Tool{
		Ref: "tool:test/Echo",
		Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
			out := handler.Output(map[string]any{"pid": os.Getpid(), "mode": os.Getenv(handler.ModeEnv),
				"echo": json.RawMessage(c.Input)})
			if r := c.Receipt(handler.Applied, "echo:"+c.Context.CallID); r != nil {
				out = out.WithReceipt(r)
			}
			return out, nil
		},
	})
}
