// Package main is a tiny handler built by the SDK's end-to-end tests and
// run as a real child process, in one-shot and persistent mode.
//
// Its input steers it: {"echo": any} is returned in the output; "signal"
// opens a named gate and "wait_for" blocks until a gate opens, so a test
// can make calls in one process finish in a chosen order; "fail" returns a
// business error with that code; "panic" panics; "receipt" attaches a
// receipt with that outcome and "ref".
package main

import (
	"context"
	"os"
	"sync"

	"github.com/touba/touba-trigger/sdk/handler"
)

type input struct {
	Echo    any    `json:"echo"`
	Signal  string `json:"signal"`
	WaitFor string `json:"wait_for"`
	Fail    string `json:"fail"`
	Panic   bool   `json:"panic"`
	Receipt string `json:"receipt"`
	Ref     string `json:"ref"`
}

type output struct {
	Echo      any    `json:"echo"`
	Operation string `json:"operation"`
	CallID    string `json:"call_id"`
	EffectID  string `json:"effect_id,omitempty"`
	PID       int    `json:"pid"`
}

var (
	mu    sync.Mutex
	gates = map[string]chan struct{}{}
)

func gate(name string) chan struct{} {
	mu.Lock()
	defer mu.Unlock()
	g, ok := gates[name]
	if !ok {
		g = make(chan struct{})
		gates[name] = g
	}
	return g
}

func run(ctx context.Context, c *handler.Call) (*handler.Result, error) {
	var in input
	if err := c.Decode(&in); err != nil {
		return nil, handler.Errorf("BadInput", "%v", err)
	}
	if in.WaitFor != "" {
		select {
		case <-gate(in.WaitFor):
		case <-ctx.Done():
			return nil, handler.Errorf("GateTimeout", "gate %s never opened", in.WaitFor)
		}
	}
	if in.Signal != "" {
		g := gate(in.Signal)
		mu.Lock()
		select {
		case <-g:
		default:
			close(g)
		}
		mu.Unlock()
	}
	if in.Panic {
		panic("asked to panic")
	}
	var receipt *handler.Receipt
	if in.Receipt != "" {
		receipt = c.Receipt(handler.Outcome(in.Receipt), in.Ref)
	}
	if in.Fail != "" {
		return nil, handler.Errorf(in.Fail, "failed as asked").WithReceipt(receipt)
	}
	out := output{Echo: in.Echo, Operation: string(c.Operation), CallID: c.Context.CallID, PID: os.Getpid()}
	if e := c.Effect(); e != nil {
		out.EffectID = e.EffectID
	}
	return handler.Output(out).WithReceipt(receipt), nil
}

func main() {
	handler.Main(handler.Tool{
		Ref:            "tool:sdk.test/Echo",
		RequiredGrants: []string{"network"},
		Run:            run,
	})
}
