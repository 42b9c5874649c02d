// Command worker is the tests' worker process: handler.Connect with one
// tool that appends a line per call to the file REMOTE (the "remote
// side") and answers applied, or, while the file HANG exists, records the
// call and never answers (so the test can kill it mid-call).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/touba/touba-trigger/sdk/handler"
)

var mu sync.Mutex

func main() {
	remote, hang := os.Getenv("REMOTE"), os.Getenv("HANG")
	n, _ := strconv.Atoi(os.Getenv("MAX_IN_FLIGHT"))
	tool := handler.Tool{Ref: os.Getenv("TOOL"), Run: func(ctx context.Context, c *handler.Call) (*handler.Result, error) {
		e := c.Effect()
		line, _ := json.Marshal(map[string]any{"effect_id": e.EffectID, "call_id": c.Context.CallID,
			"event_id": c.Context.EventID, "pid": os.Getpid()})
		mu.Lock()
		f, err := os.OpenFile(remote, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = f.Write(append(line, '\n'))
			f.Close()
		}
		mu.Unlock()
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(hang); hang != "" && err == nil {
			select {} // hang until killed
		}
		return handler.Output(map[string]string{"posted": e.EffectID}).WithReceipt(c.Receipt(handler.Applied, "remote:"+e.EffectID)), nil
	}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w := &handler.Worker{URL: os.Getenv("URL"), Token: os.Getenv("TOKEN"), Tools: []handler.Tool{tool}, MaxInFlight: n,
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
