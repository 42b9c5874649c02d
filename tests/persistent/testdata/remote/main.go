// Command remote is the handler of the persistent tests, on the Go SDK: it
// records each request that reaches it as one line of its "remote" file
// (the file named by its argument), then, while <remote>.hold exists,
// holds its answer, and answers with its pid and an applied receipt.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/touba/touba-trigger/sdk/handler"
)

// Line is one request the remote saw.
type Line struct {
	EffectID string `json:"effect_id"`
	CallID   string `json:"call_id"`
	Attempt  int    `json:"attempt"`
	PID      int    `json:"pid"`
	Mode     string `json:"mode"`
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: remote FILE")
		os.Exit(2)
	}
	remote := os.Args[1]
	handler.Main(handler.Tool{
		Ref: "tool:persist/Write",
		Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
			e := c.Effect()
			if e == nil {
				return nil, handler.Errorf("EffectContextRequired", "an external write needs its effect")
			}
			if err := record(remote, Line{EffectID: e.EffectID, CallID: c.Context.CallID, Attempt: e.Attempt,
				PID: os.Getpid(), Mode: os.Getenv(handler.ModeEnv)}); err != nil {
				return nil, err
			}
			for held(remote + ".hold") {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			return handler.Output(map[string]int{"pid": os.Getpid()}).
				WithReceipt(c.Receipt(handler.Applied, "remote:"+e.EffectID)), nil
		},
	})
}

// record appends l as one line in one write, so concurrent calls never
// interleave their lines.
func record(file string, l Line) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func held(file string) bool {
	_, err := os.Stat(file)
	return err == nil
}
