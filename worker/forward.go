package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	sdk "github.com/touba/touba-trigger/sdk/handler"
	"github.com/touba/touba-trigger/verify"
)

// NewForwarder forwards to the URL to, signing with sign, and writes its
// lines to out.
func NewForwarder(to string, sign verify.Config, out io.Writer) *Forwarder {
	return &Forwarder{to: to, sign: sign, out: out, client: &http.Client{}}
}

// Forwarder is `touba-trigger listen`'s tool (SPEC §4.3): it forwards
// each call's input to a local URL as a Standard Webhooks request
// (webhook-id the effect id) and writes a line per call to its terminal.
type Forwarder struct {
	to     string
	sign   verify.Config
	client *http.Client
	mu     sync.Mutex
	out    io.Writer
}

// Say writes one line to the terminal.
func (f *Forwarder) Say(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.out, "%s  %s\n", time.Now().Format("15:04:05.000"), line)
}

// Run forwards one call: applied on a 2xx, not_applied on another 4xx,
// no answer (the call ends unknown in the daemon and, under
// idempotency_key, comes back) on a 5xx or no answer from the URL.
func (f *Forwarder) Run(ctx context.Context, c *sdk.Call) (*sdk.Result, error) {
	start := time.Now()
	id := c.Context.CallID
	if e := c.Effect(); e != nil {
		id = e.EffectID
	}
	body := []byte(c.Input)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.to, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(verify.StandardIDHeader, id)
	if err := verify.SignRequest(f.sign, req.Header, body, time.Now()); err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		f.Say(fmt.Sprintf("%s  %s  failed: %v (%s); the daemon hands it out again", c.Context.EventID, id, err, since(start)))
		return nil, sdk.ErrNoAnswer
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	f.Say(fmt.Sprintf("%s  %s  %d  %s", c.Context.EventID, id, resp.StatusCode, since(start)))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		out := map[string]any{"status": resp.StatusCode}
		if json.Valid(answer) && len(answer) > 0 {
			out["body"] = json.RawMessage(answer)
		} else if len(answer) > 0 {
			out["body"] = string(answer)
		}
		r := sdk.Output(out)
		if c.Effect() != nil {
			r = r.WithReceipt(c.Receipt(sdk.Applied, fmt.Sprintf("http_status=%d", resp.StatusCode)))
		}
		return r, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
		e := sdk.Errorf("WebhookRejected", "%s answered %d", f.to, resp.StatusCode)
		if c.Effect() != nil {
			e = e.WithReceipt(c.Receipt(sdk.NotApplied, ""))
		}
		return nil, e
	}
	return nil, sdk.ErrNoAnswer
}

func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
