package manifest_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
)

// specExample is the manifest of SPEC §2.2, verbatim.
const specExample = `{
  "manifest_version": "touba-manifest-v1",
  "bindings": {
    "tool:examples.orders/CreateOrder": {
      "handler": { "kind": "process", "command": "node", "args": ["handlers/create_order.handler.mjs"], "cwd": "." },
      "grants": ["network"],
      "timeout_ms": 5000,
      "max_payload_bytes": 1048576,
      "secrets": { "ORDERS_API_TOKEN": { "env": "ORDERS_API_TOKEN" } },
      "effect_contract": { "kind": "external_write", "retry_mode": "idempotency_key" }
    },
    "tool:examples.orders/ReadOrder": {
      "handler": { "kind": "process", "command": "node", "args": ["handlers/read_order.handler.mjs"], "cwd": "." },
      "grants": ["network"], "timeout_ms": 5000, "max_payload_bytes": 1048576,
      "effect_contract": { "kind": "none" }
    }
  }
}`

// one wraps a single binding, bound to "tool:a/B", in a valid top level.
func one(binding string) string {
	return `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/B":` + binding + `}}`
}

// Fragments of bindings the bad cases vary.
const (
	proc = `{"kind":"process","command":"bin/h"}`
	none = `"effect_contract":{"kind":"none"}`
	hook = `{"kind":"webhook","options":{"url":"https://example.test/h"},"credentials":{"hmac_secret":{"env":"K"}}}`
)

// MustParse parses src as m.json in a temp folder, failing the test on error.
func MustParse(tb testing.TB, src string) *manifest.Manifest {
	tb.Helper()
	m, err := manifest.Parse(filepath.Join(tb.TempDir(), "m.json"), []byte(src))
	if err != nil {
		tb.Fatalf("parse: %v", err)
	}
	return m
}

func TestParse_SpecExample(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "touba.manifest.json")
	if err := os.WriteFile(path, []byte(specExample), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Load(path)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got, want := m.Path, path; got != want {
		t.Fatalf("Path=%q, want %q", got, want)
	}
	if got, want := m.Dir, dir; got != want {
		t.Fatalf("Dir=%q, want %q", got, want)
	}
	if got, want := m.Version, manifest.Version; got != want {
		t.Fatalf("Version=%q, want %q", got, want)
	}
	want := map[string]*manifest.Binding{
		"tool:examples.orders/CreateOrder": {
			Ref: "tool:examples.orders/CreateOrder",
			Handler: manifest.Handler{Kind: "process", Command: "node",
				Args: []string{"handlers/create_order.handler.mjs"}, Cwd: "."},
			Grants: []string{"network"}, TimeoutMS: 5000, MaxPayloadBytes: 1048576,
			Secrets:        map[string]secret.Ref{"ORDERS_API_TOKEN": {Env: "ORDERS_API_TOKEN"}},
			EffectContract: manifest.EffectContract{Kind: touba.ContractExternalWrite, RetryMode: touba.RetryIdempotencyKey},
		},
		"tool:examples.orders/ReadOrder": {
			Ref: "tool:examples.orders/ReadOrder",
			Handler: manifest.Handler{Kind: "process", Command: "node",
				Args: []string{"handlers/read_order.handler.mjs"}, Cwd: "."},
			Grants: []string{"network"}, TimeoutMS: 5000, MaxPayloadBytes: 1048576,
			Secrets:        map[string]secret.Ref{},
			EffectContract: manifest.EffectContract{Kind: touba.ContractNone},
		},
	}
	if !reflect.DeepEqual(m.Bindings, want) {
		t.Fatalf("bindings=%+v, want %+v", m.Bindings, want)
	}
	if got, want := m.ExternalWrites(), []string{"tool:examples.orders/CreateOrder"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ExternalWrites=%v, want %v", got, want)
	}
	b := m.Bindings["tool:examples.orders/CreateOrder"]
	if got, want := m.WorkDir(b), dir; got != want {
		t.Fatalf("WorkDir=%q, want %q", got, want)
	}
	if got, want := b.Timeout().String(), "5s"; got != want {
		t.Fatalf("Timeout=%s, want %s", got, want)
	}
}

func TestParse_Defaults(t *testing.T) {
	m := MustParse(t, `{"manifest_version":"touba-manifest-v1","bindings":{
		"tool:p":    {"handler":{"kind":"process","command":"h","persistent":{}},`+none+`},
		"tool:p2":   {"handler":{"kind":"process","command":"h","cwd":"sub/dir","persistent":{"max_in_flight":2}},`+none+`},
		"tool:w":    {"handler":`+hook+`,"effect_contract":{"kind":"external_write","retry_mode":"reconcile"},"compensation":{"supported":true}},
		"tool:stub": {"handler":{"kind":"accounting_stub"},"grants":["env","filesystem"],"effect_contract":{"kind":"external_write","retry_mode":"none"}}}}`)

	p := m.Bindings["tool:p"]
	if got, want := p.TimeoutMS, 30000; got != want {
		t.Fatalf("TimeoutMS=%d, want %d", got, want)
	}
	if got, want := p.MaxPayloadBytes, int64(1048576); got != want {
		t.Fatalf("MaxPayloadBytes=%d, want %d", got, want)
	}
	if p.Grants == nil || len(p.Grants) != 0 || p.Handler.Args == nil || len(p.Handler.Args) != 0 {
		t.Fatalf("grants=%#v args=%#v, want empty non-nil slices", p.Grants, p.Handler.Args)
	}
	if got, want := p.Handler.Cwd, "."; got != want {
		t.Fatalf("Cwd=%q, want %q", got, want)
	}
	if got, want := *p.Handler.Persistent, (manifest.Persistent{MaxInFlight: 16, MaxCalls: 100000, IdleTimeoutMS: 60000}); got != want {
		t.Fatalf("Persistent=%+v, want %+v", got, want)
	}
	p2 := m.Bindings["tool:p2"]
	if got, want := *p2.Handler.Persistent, (manifest.Persistent{MaxInFlight: 2, MaxCalls: 100000, IdleTimeoutMS: 60000}); got != want {
		t.Fatalf("Persistent=%+v, want %+v", got, want)
	}
	if got, want := m.WorkDir(p2), filepath.Join(m.Dir, "sub", "dir"); got != want {
		t.Fatalf("WorkDir=%q, want %q", got, want)
	}
	if p.Compensation != nil || p.Handler.Options != nil || p.Handler.Credentials != nil {
		t.Fatalf("process binding has webhook or compensation fields: %+v", p)
	}

	w := m.Bindings["tool:w"]
	if got, want := *w.Handler.Options, (manifest.Options{URL: "https://example.test/h", TimeoutSec: 10}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Options=%+v, want %+v", got, want)
	}
	if got, want := *w.Handler.Credentials.HMACSecret, (secret.Ref{Env: "K"}); got != want {
		t.Fatalf("HMACSecret=%+v, want %+v", got, want)
	}
	if w.Handler.Persistent != nil || w.Handler.Args != nil || w.Handler.Cwd != "" {
		t.Fatalf("webhook handler has process fields: %+v", w.Handler)
	}
	if w.Compensation == nil || !w.Compensation.Supported {
		t.Fatalf("Compensation=%+v, want supported", w.Compensation)
	}

	stub := m.Bindings["tool:stub"]
	if got, want := stub.Handler, (manifest.Handler{Kind: "accounting_stub"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Handler=%+v, want %+v", got, want)
	}
	if got, want := m.ExternalWrites(), []string{"tool:stub", "tool:w"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ExternalWrites=%v, want %v", got, want)
	}
}

func TestParse_Bad(t *testing.T) {
	const B = `m.json: $.bindings["tool:a/B"]`
	for _, tt := range []struct {
		name, src, want string
	}{
		{"top level array", `[]`, `m.json: $: must be an object (got array)`},
		{"top level null", `null`, `m.json: $: must not be null`},
		{"empty input", ``, `m.json: $: invalid JSON at line 1, column 1 (byte 0): unexpected end of input`},
		{"truncated", `{"manifest_version":`, `m.json: $.manifest_version: invalid JSON at line 1, column 21 (byte 20): unexpected end of input`},
		{"syntax error inside", one(`{"handler":` + proc + `,"grants":[,],` + none + `}`),
			B + `.grants[0]: invalid JSON at line 1, column 122 (byte 121): invalid character ',' looking for beginning of value`},
		{"trailing document", `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a":{"handler":` + proc + `,` + none + `}}} {}`,
			`m.json: $: trailing data after the JSON document (at line 1, column 147 (byte 146))`},
		{"trailing garbage", one(`{"handler":`+proc+`,`+none+`}`) + `x`, `m.json: $: trailing data after the JSON document`},
		{"duplicate key", one(`{"handler":` + proc + `,` + none + `,"timeout_ms":1,"timeout_ms":2}`), B + `.timeout_ms: duplicate key`},
		{"unknown top-level field", `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a":{"handler":` + proc + `,` + none + `}},"extra":1}`,
			`m.json: $.extra: unknown field (known: bindings, manifest_version)`},
		{"wrong version", `{"manifest_version":"touba-manifest-v2","bindings":{"tool:a":{"handler":` + proc + `,` + none + `}}}`,
			`m.json: $.manifest_version: must be "touba-manifest-v1" (got "touba-manifest-v2")`},
		{"missing version", `{"bindings":{"tool:a":{"handler":` + proc + `,` + none + `}}}`, `m.json: $.manifest_version: required field is missing`},
		{"missing bindings", `{"manifest_version":"touba-manifest-v1"}`, `m.json: $.bindings: required field is missing`},
		{"empty bindings", `{"manifest_version":"touba-manifest-v1","bindings":{}}`, `m.json: $.bindings: must contain at least one binding`},
		{"bad tool ref space", `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a b":{"handler":` + proc + `,` + none + `}}}`,
			`m.json: $.bindings["tool:a b"]: tool ref must be "tool:" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*`},
		{"tool ref without prefix", `{"manifest_version":"touba-manifest-v1","bindings":{"orders/Create":{"handler":` + proc + `,` + none + `}}}`,
			`m.json: $.bindings["orders/Create"]: tool ref must be "tool:" followed by`},
		{"tool ref trailing slash", `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/":{"handler":` + proc + `,` + none + `}}}`,
			`m.json: $.bindings["tool:a/"]: tool ref must be "tool:" followed by`},
		{"unknown binding field", one(`{"handler":` + proc + `,` + none + `,"colour":"red"}`),
			B + `.colour: unknown field (known: circuit, compensation, effect_contract, grants, handler, max_concurrency, max_payload_bytes, secrets, timeout_ms)`},
		{"missing handler", one(`{` + none + `}`), B + `.handler: required field is missing`},
		{"unknown handler field", one(`{"handler":{"kind":"process","command":"h","shell":true},` + none + `}`),
			B + `.handler.shell: unknown field (known: args, command, credentials, cwd, kind, options, persistent, token)`},
		{"unknown handler kind", one(`{"handler":{"kind":"docker"},` + none + `}`),
			B + `.handler.kind: unknown handler kind "docker" (known: accounting_stub, http, kafka, nats, process, rabbitmq, webhook, worker)`},
		{"absent contract", one(`{"handler":` + proc + `}`), B + `.effect_contract: required field is missing`},
		{"null contract", one(`{"handler":` + proc + `,"effect_contract":null}`), B + `.effect_contract: must not be null`},
		{"unknown contract kind", one(`{"handler":` + proc + `,"effect_contract":{"kind":"maybe"}}`),
			B + `.effect_contract.kind: unknown effect contract kind "maybe" (known: external_write, none)`},
		{"unknown contract field", one(`{"handler":` + proc + `,"effect_contract":{"kind":"none","idempotent":true}}`),
			B + `.effect_contract.idempotent: unknown field (known: kind, retry_mode)`},
		{"external_write without retry_mode", one(`{"handler":` + proc + `,"effect_contract":{"kind":"external_write"}}`),
			B + `.effect_contract.retry_mode: required when kind is "external_write"`},
		{"retry_mode on none", one(`{"handler":` + proc + `,"effect_contract":{"kind":"none","retry_mode":"none"}}`),
			B + `.effect_contract.retry_mode: not allowed when kind is "none"`},
		{"unknown retry_mode", one(`{"handler":` + proc + `,"effect_contract":{"kind":"external_write","retry_mode":"pray"}}`),
			B + `.effect_contract.retry_mode: unknown retry_mode "pray" (known: idempotency_key, none, reconcile)`},
		{"process without command", one(`{"handler":{"kind":"process","args":[]},` + none + `}`),
			B + `.handler.command: required for a process handler`},
		{"process empty command", one(`{"handler":{"kind":"process","command":""},` + none + `}`), B + `.handler.command: must not be empty`},
		{"process empty cwd", one(`{"handler":{"kind":"process","command":"h","cwd":""},` + none + `}`), B + `.handler.cwd: must not be empty`},
		{"process args not strings", one(`{"handler":{"kind":"process","command":"h","args":["a",1]},` + none + `}`),
			B + `.handler.args[1]: must be a string (got number)`},
		{"webhook field on process", one(`{"handler":{"kind":"process","command":"h","options":{"url":"https://x.test"}},` + none + `}`),
			B + `.handler.options: not allowed for a process handler`},
		{"process field on webhook", one(`{"handler":{"kind":"webhook","command":"h","options":{"url":"https://x.test"},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.command: not allowed for a webhook handler`},
		{"field on stub", one(`{"handler":{"kind":"accounting_stub","cwd":"."},` + none + `}`),
			B + `.handler.cwd: not allowed for an accounting_stub handler`},
		{"persistent on webhook", one(`{"handler":{"kind":"webhook","persistent":{},"options":{"url":"https://x.test"},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.persistent: only allowed for a process handler`},
		{"persistent zero in flight", one(`{"handler":{"kind":"process","command":"h","persistent":{"max_in_flight":0}},` + none + `}`),
			B + `.handler.persistent.max_in_flight: must be a positive integer (got 0)`},
		{"persistent unknown field", one(`{"handler":{"kind":"process","command":"h","persistent":{"workers":2}},` + none + `}`),
			B + `.handler.persistent.workers: unknown field (known: idle_timeout_ms, max_calls, max_in_flight)`},
		{"webhook without options", one(`{"handler":{"kind":"webhook","credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options: required for a webhook handler`},
		{"webhook without url", one(`{"handler":{"kind":"webhook","options":{"timeout_sec":3},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.url: required for a webhook handler`},
		{"webhook without credentials", one(`{"handler":{"kind":"webhook","options":{"url":"https://x.test"}},` + none + `}`),
			B + `.handler.credentials: required for a webhook handler`},
		{"webhook without hmac_secret", one(`{"handler":{"kind":"webhook","options":{"url":"https://x.test"},"credentials":{}},` + none + `}`),
			B + `.handler.credentials.hmac_secret: required for a webhook handler`},
		{"webhook url scheme", one(`{"handler":{"kind":"webhook","options":{"url":"ftp://x.test/h"},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.url: must be an absolute http or https URL`},
		{"webhook url relative", one(`{"handler":{"kind":"webhook","options":{"url":"/hook"},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.url: must be an absolute http or https URL`},
		{"webhook url user info", one(`{"handler":{"kind":"webhook","options":{"url":"https://u:pw@x.test/h"},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.url: must not contain user info; sign with credentials.hmac_secret instead`},
		{"webhook zero timeout", one(`{"handler":{"kind":"webhook","options":{"url":"https://x.test","timeout_sec":0},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.timeout_sec: must be a positive integer (got 0)`},
		{"secrets on webhook", one(`{"handler":` + hook + `,"secrets":{"T":{"env":"T"}},` + none + `}`),
			B + `.secrets: only allowed for a process handler (as environment variables) or an http handler (in headers)`},
		{"unknown grant", one(`{"handler":` + proc + `,"grants":["network","root"],` + none + `}`),
			B + `.grants[1]: unknown grant "root" (known: env, filesystem, network)`},
		{"duplicate grant", one(`{"handler":` + proc + `,"grants":["network","network"],` + none + `}`),
			B + `.grants[1]: duplicate grant "network"`},
		{"grants not array", one(`{"handler":` + proc + `,"grants":"network",` + none + `}`), B + `.grants: must be an array (got string)`},
		{"zero timeout", one(`{"handler":` + proc + `,"timeout_ms":0,` + none + `}`), B + `.timeout_ms: must be a positive integer (got 0)`},
		{"zero max_concurrency", one(`{"handler":` + proc + `,"max_concurrency":0,` + none + `}`), B + `.max_concurrency: must be a positive integer (got 0)`},
		{"negative max_concurrency", one(`{"handler":` + proc + `,"max_concurrency":-2,` + none + `}`), B + `.max_concurrency: must be a positive integer (got -2)`},
		{"null max_concurrency", one(`{"handler":` + proc + `,"max_concurrency":null,` + none + `}`), B + `.max_concurrency: must not be null`},
		{"negative timeout", one(`{"handler":` + proc + `,"timeout_ms":-5,` + none + `}`), B + `.timeout_ms: must be a positive integer (got -5)`},
		{"fractional timeout", one(`{"handler":` + proc + `,"timeout_ms":1.5,` + none + `}`), B + `.timeout_ms: must be a positive integer (got 1.5)`},
		{"exponent timeout", one(`{"handler":` + proc + `,"timeout_ms":1e3,` + none + `}`), B + `.timeout_ms: must be a positive integer (got 1e3)`},
		{"huge timeout", one(`{"handler":` + proc + `,"timeout_ms":86400001,` + none + `}`), B + `.timeout_ms: must be at most 86400000 (got 86400001)`},
		{"string size", one(`{"handler":` + proc + `,"max_payload_bytes":"1MiB",` + none + `}`), B + `.max_payload_bytes: must be a positive integer (got string)`},
		{"negative size", one(`{"handler":` + proc + `,"max_payload_bytes":-1,` + none + `}`), B + `.max_payload_bytes: must be a positive integer (got -1)`},
		{"out of range size", one(`{"handler":` + proc + `,"max_payload_bytes":99999999999999999999,` + none + `}`),
			B + `.max_payload_bytes: must be at most 4611686018427387904 (got 99999999999999999999)`},
		{"secret ref no source", one(`{"handler":` + proc + `,"secrets":{"T":{}},` + none + `}`),
			B + `.secrets.T: secret reference must name exactly one of "env", "file", "credential"`},
		{"secret ref two sources", one(`{"handler":` + proc + `,"secrets":{"T":{"env":"T","file":"t.txt"}},` + none + `}`),
			B + `.secrets.T: secret reference must name exactly one of "env", "file", "credential"`},
		{"secret ref unknown field", one(`{"handler":` + proc + `,"secrets":{"T":{"vault":"t"}},` + none + `}`),
			B + `.secrets.T.vault: unknown field (known: credential, env, file)`},
		{"secret ref credential path", one(`{"handler":` + proc + `,"secrets":{"T":{"credential":"../t"}},` + none + `}`),
			B + `.secrets.T: secret reference: credential name must not contain a path separator`},
		{"secret ref bad env name", one(`{"handler":` + proc + `,"secrets":{"T":{"env":"A=B"}},` + none + `}`),
			B + `.secrets.T.env: must be a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"secret name invalid", one(`{"handler":` + proc + `,"secrets":{"1BAD":{"env":"T"}},` + none + `}`),
			B + `.secrets["1BAD"]: must be a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)`},
		{"secret name PATH", one(`{"handler":` + proc + `,"secrets":{"PATH":{"env":"T"}},` + none + `}`),
			B + `.secrets.PATH: name is reserved by the host (reserved: LANG, PATH, TOUBA_HANDLER_MODE, TZ)`},
		{"secret name TOUBA_HANDLER_MODE", one(`{"handler":` + proc + `,"secrets":{"TOUBA_HANDLER_MODE":{"env":"T"}},` + none + `}`),
			B + `.secrets.TOUBA_HANDLER_MODE: name is reserved by the host`},
		{"hmac secret two sources", one(`{"handler":{"kind":"webhook","options":{"url":"https://x.test"},"credentials":{"hmac_secret":{"env":"K","credential":"k"}}},` + none + `}`),
			B + `.handler.credentials.hmac_secret: secret reference must name exactly one of "env", "file", "credential"`},
		{"compensation unknown field", one(`{"handler":` + proc + `,` + none + `,"compensation":{"supported":true,"inverse":"tool:x"}}`),
			B + `.compensation.inverse: unknown field (known: supported)`},
		{"compensation not boolean", one(`{"handler":` + proc + `,` + none + `,"compensation":{"supported":"yes"}}`),
			B + `.compensation.supported: must be a boolean (got string)`},
		{"compensation empty", one(`{"handler":` + proc + `,` + none + `,"compensation":{}}`),
			B + `.compensation.supported: required field is missing`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := manifest.Parse("m.json", []byte(tt.src))
			if err == nil {
				t.Fatalf("parsed %+v, want error %q", m, tt.want)
			}
			if got := err.Error(); got != tt.want && !strings.HasPrefix(got, tt.want) {
				t.Fatalf("error:\n %s\nwant:\n %s", got, tt.want)
			}
			var ce *manifest.ConfigError
			if !errors.As(err, &ce) || ce.File != "m.json" {
				t.Fatalf("error %T %v is not a *ConfigError for m.json", err, err)
			}
			if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
				t.Fatalf("ErrorCode=%q, want %q", got, want)
			}
		})
	}
}

func TestParse_CollectsAllErrors(t *testing.T) {
	_, err := manifest.Parse("m.json", []byte(one(`{"handler":{"kind":"process"},"timeout_ms":0,"effect_contract":null}`)))
	want := strings.Join([]string{
		`m.json: $.bindings["tool:a/B"].handler.command: required for a process handler`,
		`m.json: $.bindings["tool:a/B"].timeout_ms: must be a positive integer (got 0)`,
		`m.json: $.bindings["tool:a/B"].effect_contract: must not be null`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}

func TestLoad_MissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.json")
	_, err := manifest.Load(path)
	if got, want := err.Error(), path+": $: cannot read file: no such file or directory"; got != want {
		t.Fatalf("error=%q, want %q", got, want)
	}
	if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
		t.Fatalf("ErrorCode=%q, want %q", got, want)
	}
}
