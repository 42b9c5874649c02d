package manifest_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/manifest"
)

// WriteManifest writes src as touba.manifest.json in a fresh folder, with
// extra files beside it, and loads it.
func WriteManifest(tb testing.TB, src string, files map[string]string) *manifest.Manifest {
	tb.Helper()
	dir := tb.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	path := filepath.Join(dir, "touba.manifest.json")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		tb.Fatal(err)
	}
	m, err := manifest.Load(path)
	if err != nil {
		tb.Fatalf("load: %v", err)
	}
	return m
}

// envOf is a secret.Env over a fixed map.
func envOf(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

const secretsManifest = `{"manifest_version":"touba-manifest-v1","bindings":{
	"tool:p": {"handler":{"kind":"process","command":"h"},"effect_contract":{"kind":"none"},
		"secrets":{"FROM_ENV":{"env":"SRC_VAR"},"FROM_FILE":{"file":"secrets/token.txt"},"FROM_CRED":{"credential":"api-key"}}},
	"tool:w": {"handler":{"kind":"webhook","options":{"url":"http://127.0.0.1:1/h"},"credentials":{"hmac_secret":{"file":"hmac.key"}}},
		"effect_contract":{"kind":"external_write","retry_mode":"idempotency_key"}}}}`

func TestResolve(t *testing.T) {
	m := WriteManifest(t, secretsManifest, map[string]string{
		"secrets/token.txt": "file-token-value\n", // the final newline is not part of the secret
		"hmac.key":          "hmac-key-value",
	})
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "api-key"), []byte("credential-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := m.Resolve(envOf(map[string]string{"SRC_VAR": "env-value", "CREDENTIALS_DIRECTORY": creds}))
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	env := res.Env["tool:p"]
	for name, want := range map[string]string{"FROM_ENV": "env-value", "FROM_FILE": "file-token-value", "FROM_CRED": "credential-value"} {
		if got := env[name]; got != want {
			t.Fatalf("Env[%s]=%q, want %q", name, got, want)
		}
	}
	if got, want := len(res.Env["tool:w"]), 0; got != want {
		t.Fatalf("webhook env has %d vars, want %d", got, want)
	}
	if got, want := res.HMAC["tool:w"], "hmac-key-value"; got != want {
		t.Fatalf("HMAC=%q, want %q", got, want)
	}
	if _, ok := res.HMAC["tool:p"]; ok {
		t.Fatalf("process binding has an HMAC key")
	}
	if got, want := res.Values.Len(), 4; got != want {
		t.Fatalf("Values.Len=%d, want %d", got, want)
	}
	if !res.Values.Contains(`{"stored":"xx credential-value xx"}`) {
		t.Fatalf("Values does not flag a text holding a secret")
	}
}

func TestResolve_Unresolvable(t *testing.T) {
	// Only the file secrets are missing values; the others exist and must not
	// leak into the message.
	m := WriteManifest(t, secretsManifest, map[string]string{"secrets/token.txt": "\n"})
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "api-key"), []byte("credential-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := m.Resolve(envOf(map[string]string{"SRC_VAR": "env-value", "CREDENTIALS_DIRECTORY": creds}))
	if err == nil {
		t.Fatal("resolved, want an error")
	}
	msg := err.Error()
	for _, want := range []string{
		m.Path + `: $.bindings["tool:p"].secrets.FROM_FILE: cannot resolve: secret file:secrets/token.txt: value is empty`,
		m.Path + `: $.bindings["tool:w"].handler.credentials.hmac_secret: cannot resolve: secret file:hmac.key: open ` +
			filepath.Join(m.Dir, "hmac.key") + `: no such file or directory`,
	} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error:\n%s\nlacks:\n%s", msg, want)
		}
	}
	for _, value := range []string{"env-value", "credential-value"} {
		if strings.Contains(msg, value) {
			t.Fatalf("error %q contains a secret value", msg)
		}
	}
	if got, want := touba.ErrorCode(err), touba.ECONFIG; got != want {
		t.Fatalf("ErrorCode=%q, want %q", got, want)
	}
}

func TestResolve_MissingSources(t *testing.T) {
	m := WriteManifest(t, secretsManifest, map[string]string{"secrets/token.txt": "t", "hmac.key": "k"})
	_, err := m.Resolve(envOf(map[string]string{}))
	var ce *manifest.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *ConfigError", err)
	}
	for _, want := range []string{
		`$.bindings["tool:p"].secrets.FROM_CRED: cannot resolve: secret credential:api-key: CREDENTIALS_DIRECTORY is not set`,
		`$.bindings["tool:p"].secrets.FROM_ENV: cannot resolve: secret env:SRC_VAR: variable not set`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error:\n%s\nlacks:\n%s", err, want)
		}
	}
}
