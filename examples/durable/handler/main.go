// Command handler is the stand-in downstream of the durable-steps example
// (examples/durable): one binary for the example's seven tools, the tool
// named by its first argument (each binding passes its own). Every call is
// appended to .touba/calls.jsonl under the handler's working directory
// (the manifest's folder), one JSON line with the tool, the effect id, the
// input and the time, so a person or a test can see what reached the
// downstream systems and when. The write itself is deduplicated by effect
// id, as a remote honouring Idempotency-Key does: a repeated call is
// recorded with "repeat": true and applies nothing twice.
//
// The shipping system can be "down": while .touba/shipping-down exists,
// CreateShipment refuses (not applied, ShippingUnavailable), which is how
// the example makes an order run fail at its third step for an operator
// to resume once it is fixed.
//
// The card network can "hang": while .touba/charge-stuck exists,
// ChargeCard marks .touba/charge-started, waits (up to 8 s) for the file to
// go, then answers that it cannot tell whether the charge happened
// (unknown): with the binding's retry_mode reconcile, the order parks for
// an operator to settle.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

const prefix = "tool:examples.durable/"

// tools maps the argument each binding passes to its tool.
var tools = map[string]string{
	"settle":  "SettleOrder",
	"remind":  "SendReminder",
	"pull":    "PullMissed",
	"reserve": "ReserveStock",
	"charge":  "ChargeCard",
	"ship":    "CreateShipment",
	"notify":  "NotifyCustomer",
}

// Call is one line of calls.jsonl.
type Call struct {
	Tool     string          `json:"tool"`
	EffectID string          `json:"effect_id"`
	QueueID  string          `json:"queue_id"`
	Input    json.RawMessage `json:"input"`
	// Action says what SettleOrder wrote: "order" or "cancellation".
	Action string    `json:"action,omitempty"`
	At     time.Time `json:"at"`
	Repeat bool      `json:"repeat,omitempty"`
}

var mu sync.Mutex

func main() {
	if len(os.Args) != 2 || tools[os.Args[1]] == "" {
		fmt.Fprintln(os.Stderr, "usage: handler settle|remind|pull|reserve|charge|ship|notify")
		os.Exit(2)
	}
	name := os.Args[1]
	handler.Main(handler.Tool{Ref: prefix + tools[name], Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		return run(name, c)
	}})
}

func run(name string, c *handler.Call) (*handler.Result, error) {
	eff := c.Effect()
	if eff == nil {
		return nil, handler.Errorf("EffectContextRequired", "%s is an external write", name)
	}
	if name == "ship" {
		if _, err := os.Stat(filepath.Join(".touba", "shipping-down")); err == nil {
			return nil, handler.Errorf("ShippingUnavailable", "the shipping system is down").
				WithReceipt(c.Receipt(handler.NotApplied, ""))
		}
	}
	if name == "charge" && stuck() {
		return nil, handler.Errorf("CardNetworkTimeout", "the card network did not answer").
			WithReceipt(c.Receipt(handler.Unknown, ""))
	}
	call := Call{Tool: name, EffectID: eff.EffectID, QueueID: c.Context.QueueID, Input: c.Input, At: time.Now().UTC()}
	if name == "settle" {
		// The wait's output: the matched payment, or null when the wait
		// timed out (on_timeout: continue). No payment: cancel the order.
		var in struct {
			Payment json.RawMessage `json:"payment"`
		}
		if err := c.Decode(&in); err != nil {
			return nil, handler.Errorf("BadInput", "input: %v", err)
		}
		call.Action = "order"
		if len(in.Payment) == 0 || string(in.Payment) == "null" {
			call.Action = "cancellation"
		}
	}
	n, err := record(filepath.Join(".touba", "calls.jsonl"), &call)
	if err != nil {
		return nil, handler.Errorf("DownstreamUnavailable", "%v", err).WithReceipt(c.Receipt(handler.Unknown, ""))
	}
	return handler.Output(map[string]any{"line": n, "action": call.Action, "repeat": call.Repeat}).
		WithReceipt(c.Receipt(handler.Applied, "durable:"+eff.EffectID)), nil
}

// record appends c, marked a repeat when its effect id was applied before,
// and returns its line number.
func record(path string, c *Call) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Several handler processes may run at once: flock orders them.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		var old Call
		if json.Unmarshal(sc.Bytes(), &old) == nil && old.EffectID == c.EffectID && !old.Repeat {
			c.Repeat = true
			c.Action = old.Action
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	line, err := json.Marshal(c)
	if err != nil {
		return 0, err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	return n + 1, f.Sync()
}

// stuck tells whether the card network hangs (.touba/charge-stuck): it
// says the call started, then waits for the file to go (at most 8 s,
// under the binding's timeout) before the unknown answer.
func stuck() bool {
	flag := filepath.Join(".touba", "charge-stuck")
	if _, err := os.Stat(flag); err != nil {
		return false
	}
	_ = os.WriteFile(filepath.Join(".touba", "charge-started"), nil, 0o600)
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(flag); err != nil {
			break
		}
	}
	return true
}
