// Command benchtool is BenchmarkWorkerVsProcess's tool, one binary for
// both forms so the comparison is of the transport alone: with URL set it
// is a worker (handler.Worker) connecting out to the daemon at URL, else a
// process handler (handler.Main: persistent under TOUBA_HANDLER_MODE).
// The tool answers applied at once; a call whose input carries "ping"
// first posts it to remoteURL, which timestamps the effect for the latency
// figure.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/touba/touba-trigger/sdk/handler"
)

// remoteURL is where a ping goes: the benchmark's server listens there.
const remoteURL = "http://127.0.0.1:18977/ping"

func main() {
	// A process handler gets none of the daemon's environment (SPEC §4):
	// the ref and the remote side's address are fixed here.
	tool := handler.Tool{Ref: "tool:bench/Post", Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		var in struct {
			Order struct {
				Ping json.RawMessage `json:"ping"`
			} `json:"order"`
		}
		_ = json.Unmarshal(c.Input, &in)
		e := c.Effect()
		if in.Order.Ping != nil {
			resp, err := http.Post(remoteURL, "application/json", bytes.NewReader(in.Order.Ping))
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
		}
		return handler.Output(map[string]string{"posted": e.EffectID}).WithReceipt(c.Receipt(handler.Applied, "remote:"+e.EffectID)), nil
	}}
	if os.Getenv("URL") == "" {
		handler.Main(tool)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w := &handler.Worker{URL: os.Getenv("URL"), Token: os.Getenv("TOKEN"), Tools: []handler.Tool{tool},
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	// AHEAD sets Worker.Ahead, for trying other depths than the default.
	if n, err := strconv.Atoi(os.Getenv("AHEAD")); err == nil {
		w.Ahead = n
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
