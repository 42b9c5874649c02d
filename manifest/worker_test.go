package manifest_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
)

const workerBinding = `{"handler": {"kind": "worker", "token": {"env": "LEDGER_WORKER_TOKEN"}}, "grants": [], "timeout_ms": 10000,
	"effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}`

func TestParse_Worker(t *testing.T) {
	m := MustParse(t, `{"manifest_version":"touba-manifest-v1","bindings":{"tool:ledger/PostInvoice":`+workerBinding+`}}`)
	b := m.Bindings["tool:ledger/PostInvoice"]
	if b.Handler.Kind != manifest.KindWorker || b.Handler.Token == nil || *b.Handler.Token != (secret.Ref{Env: "LEDGER_WORKER_TOKEN"}) {
		t.Fatalf("handler %+v", b.Handler)
	}
	// A worker binding's calls go over the network: the remote defaults (SPEC §2.2).
	if b.MaxConcurrency != manifest.DefaultRemoteMaxConcurrency || b.Circuit == nil {
		t.Fatalf("max_concurrency %d, circuit %+v; want the remote defaults", b.MaxConcurrency, b.Circuit)
	}
	res, err := m.Resolve(envOf(map[string]string{"LEDGER_WORKER_TOKEN": "tok-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Worker["tool:ledger/PostInvoice"]; got != "tok-1" || !res.Values.Contains("tok-1") {
		t.Fatalf("token %q, in values %v", got, res.Values.Contains("tok-1"))
	}
	if _, err := m.Resolve(envOf(map[string]string{"LEDGER_WORKER_TOKEN": ""})); err == nil || !strings.Contains(err.Error(), "value is empty") {
		t.Fatalf("empty token: %v", err)
	}
}

func TestParse_WorkerRefusals(t *testing.T) {
	for name, tc := range map[string]struct{ handler, want string }{
		"no token":         {`{"kind":"worker"}`, `$.bindings["tool:a/W"].handler.token: required for a worker handler`},
		"bad ref":          {`{"kind":"worker","token":"literal"}`, `$.bindings["tool:a/W"].handler.token: must be an object`},
		"other field":      {`{"kind":"worker","token":{"env":"T"},"command":"x"}`, "command: not allowed for a worker handler"},
		"token on process": {`{"kind":"process","command":"x","token":{"env":"T"}}`, "token: not allowed for a process handler"},
	} {
		t.Run(name, func(t *testing.T) {
			src := `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/W":{"handler":` + tc.handler + `,` + none + `}}}`
			_, err := manifest.Parse(filepath.Join(t.TempDir(), "m.json"), []byte(src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
