package worker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	sdk "github.com/touba/touba-trigger/sdk/handler"
	"github.com/touba/touba-trigger/verify"
)

// ListenConfig is what `touba-trigger listen` runs (SPEC §4.3): a worker
// of the bindings Tools on the daemon at URL, forwarding each call's input
// to ForwardTo as a Standard Webhooks request signed with Secret.
type ListenConfig struct {
	URL, ForwardTo string
	// TokenFile holds the binding's token (Check reads it into Token).
	TokenFile, Token string
	Tools            []string
	// Secret is the whsec_ signing secret; empty: one is generated and
	// printed, so the local server can verify what it gets.
	Secret      string
	MaxInFlight int
}

// Check reads the token file and checks a given signing secret as the
// forwarder will use it.
func (c *ListenConfig) Check() error {
	raw, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return fmt.Errorf("--token-file: %w", err)
	}
	c.Token = strings.TrimSpace(string(raw))
	if c.Secret == "" {
		return nil
	}
	if _, err := verify.New(verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{c.Secret}}); err != nil {
		return fmt.Errorf("--signing-secret: %w", err)
	}
	return nil
}

// Listen runs c until ctx ends or the daemon refuses the token (401/403),
// saying on out what it does: the secret it generated, each call, each lost
// and regained connection. Deliveries that arrive while it is away wait in
// the daemon and drain in order when it is back.
func Listen(ctx context.Context, c ListenConfig, out io.Writer) error {
	if c.Secret == "" {
		key := make([]byte, 24)
		_, _ = rand.Read(key)
		c.Secret = "whsec_" + base64.StdEncoding.EncodeToString(key)
		fmt.Fprintf(out, "signing secret: %s\n", c.Secret)
	}
	f := NewForwarder(c.ForwardTo, verify.Config{Scheme: verify.SchemeStandardWebhooks, Secrets: []string{c.Secret}}, out)
	w := &sdk.Worker{URL: c.URL, Token: c.Token, MaxInFlight: c.MaxInFlight,
		Logf: func(format string, args ...any) {
			f.Say(strings.TrimPrefix(fmt.Sprintf(format, args...), "touba worker: "))
		}}
	for _, ref := range c.Tools {
		w.Tools = append(w.Tools, sdk.Tool{Ref: ref, Run: f.Run})
	}
	f.Say(fmt.Sprintf("forwarding %s from %s to %s (Ctrl-C to stop)", strings.Join(c.Tools, ", "), c.URL, c.ForwardTo))
	if err := w.Run(ctx); err != nil {
		f.Say(fmt.Sprintf("stopped: %v", err))
		return err
	}
	f.Say("stopped")
	return nil
}
