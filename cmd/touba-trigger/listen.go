package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/touba/touba-trigger/cli"
	sdk "github.com/touba/touba-trigger/sdk/handler"
	"github.com/touba/touba-trigger/verify"
)

// listen is a worker for a developer's laptop (SPEC §4.3): it takes the
// calls of worker bindings from a daemon and forwards each call's input to
// a local URL as a Standard Webhooks request. Deliveries that arrive while
// it is away wait in the daemon and drain in order when it is back.

// toolList is a repeatable --tool.
type toolList []string

func (l *toolList) String() string     { return strings.Join(*l, ",") }
func (l *toolList) Set(v string) error { *l = append(*l, v); return nil }

func runListen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := usage.FlagSet("listen", stderr)
	url := fs.String("url", "", "the daemon's base URL (its --listen address)")
	tokenFile := fs.String("token-file", "", "file holding the worker binding's token")
	var tools toolList
	fs.Var(&tools, "tool", "a worker binding's tool ref to take calls of (repeatable)")
	forward := fs.String("forward-to", "", "local URL each call's input is POSTed to")
	secret := fs.String("signing-secret", "", "Standard Webhooks secret (whsec_...); generated and printed when empty")
	inFlight := fs.Int("max-in-flight", 1, "calls forwarded at once (1 keeps the daemon's order)")
	if err := fs.Parse(args); err != nil {
		return cli.UsageError{Err: err}
	}
	if *url == "" || *tokenFile == "" || len(tools) == 0 || *forward == "" || fs.NArg() > 0 {
		return cli.Usagef("listen needs --url, --token-file, --tool and --forward-to")
	}
	raw, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("read --token-file: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if *secret == "" {
		key := make([]byte, 24)
		_, _ = rand.Read(key)
		*secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
		fmt.Fprintf(stdout, "signing secret: %s\n", *secret)
	}
	sign := verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{*secret}}
	if _, err := verify.New(sign); err != nil {
		return cli.Usagef("--signing-secret: %v", err)
	}
	f := &forwarder{to: *forward, sign: sign, out: stdout, client: &http.Client{}}
	w := &sdk.Worker{URL: *url, Token: token, MaxInFlight: *inFlight,
		Logf: func(format string, args ...any) { f.say(strings.TrimPrefix(fmt.Sprintf(format, args...), "touba worker: ")) }}
	for _, ref := range tools {
		w.Tools = append(w.Tools, sdk.Tool{Ref: ref, Run: f.run})
	}
	f.say(fmt.Sprintf("forwarding %s from %s to %s (Ctrl-C to stop)", strings.Join(tools, ", "), *url, *forward))
	err = w.Run(ctx)
	if err != nil {
		f.say(fmt.Sprintf("stopped: %v", err))
		return err
	}
	f.say("stopped")
	return nil
}

// forwarder sends calls to the local URL.
type forwarder struct {
	to     string
	sign   verify.Config
	client *http.Client
	mu     sync.Mutex
	out    io.Writer
}

// say writes one line to the terminal.
func (f *forwarder) say(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.out, "%s  %s\n", time.Now().Format("15:04:05.000"), line)
}

// run forwards one call: applied on a 2xx, not_applied on another 4xx,
// no answer (the call ends unknown in the daemon and, under
// idempotency_key, comes back) on a 5xx or no answer from the URL.
func (f *forwarder) run(ctx context.Context, c *sdk.Call) (*sdk.Result, error) {
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
		f.say(fmt.Sprintf("%s  %s  failed: %v (%s); the daemon hands it out again", c.Context.EventID, id, err, since(start)))
		return nil, sdk.ErrNoAnswer
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	f.say(fmt.Sprintf("%s  %s  %d  %s", c.Context.EventID, id, resp.StatusCode, since(start)))
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
