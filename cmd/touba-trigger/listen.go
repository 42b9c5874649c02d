package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/touba/touba-trigger/cli"
	sdk "github.com/touba/touba-trigger/sdk/handler"
	"github.com/touba/touba-trigger/verify"
	"github.com/touba/touba-trigger/worker"
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
	f := worker.NewForwarder(*forward, sign, stdout)
	w := &sdk.Worker{URL: *url, Token: token, MaxInFlight: *inFlight,
		Logf: func(format string, args ...any) {
			f.Say(strings.TrimPrefix(fmt.Sprintf(format, args...), "touba worker: "))
		}}
	for _, ref := range tools {
		w.Tools = append(w.Tools, sdk.Tool{Ref: ref, Run: f.Run})
	}
	f.Say(fmt.Sprintf("forwarding %s from %s to %s (Ctrl-C to stop)", strings.Join(tools, ", "), *url, *forward))
	err = w.Run(ctx)
	if err != nil {
		f.Say(fmt.Sprintf("stopped: %v", err))
		return err
	}
	f.Say("stopped")
	return nil
}
