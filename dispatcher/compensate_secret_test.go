package dispatcher_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dispatcher"
)

// A compensation's answer goes to the operator's terminal and the audit
// trail: an error message or a receipt holding a secret value is withheld,
// as a run's call is (the journal refuses to store them as well).
func TestCompensationWithholdsSecrets(t *testing.T) {
	const token = "tok-compensate-Secret-9f3a"
	for _, mode := range []string{"fail_secret", "receipt_secret", "echo_secret"} {
		t.Run(mode, func(t *testing.T) {
			in := map[string]any{"mode": "ok", "compensate_mode": mode, "code": touba.EWebhookRejected,
				"secret_env": "API_TOKEN", "calls": filepath.Join(t.TempDir(), "bill.calls")}
			w := newWorld(t, program(t, 3, step{"bill", toolW, in}),
				manifestOf(t, binding{Tool: toolW, Write: touba.RetryReconcile, Secrets: map[string]string{"API_TOKEN": secretEnv}}),
				map[string]string{secretEnv: token}, true)
			qid := w.enqueue(trigName, `{}`, nil)
			e := w.wait(qid, touba.StatusDone)
			cfg := w.config()
			cfg.Bindings[toolW].Compensation = true
			ctx := context.Background()
			orig := w.effect(qid, "bill")
			c, err := dispatcher.Compensate(ctx, cfg, w.j, e, w.steps(qid), orig)
			if err != nil {
				t.Fatal(err)
			}
			shown, _ := json.Marshal(c)
			if strings.Contains(string(shown), token) {
				t.Fatalf("the compensation's answer holds the secret: %s", shown)
			}
			if mode == "fail_secret" && (c.ErrorCode != touba.EWebhookRejected || !strings.Contains(c.Message, "withheld")) {
				t.Fatalf("error %s %q, want the code kept and the message withheld", c.ErrorCode, c.Message)
			}
			if mode != "fail_secret" && c.ErrorCode != touba.ESecretValueRefused {
				t.Fatalf("error code %q, want %s", c.ErrorCode, touba.ESecretValueRefused)
			}
			w.close()
			noSecretIn(t, w.dir, token, "journal.sqlite")
		})
	}
}
