package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check shows a webhook binding without its URL, and a refused URL
// without its path or query: either may be the credential.
func TestCheckDoesNotShowWebhookURLs(t *testing.T) {
	t.Setenv("CHECK_TEST_HOOK_KEY", "k-1234567890")
	dir := t.TempDir()
	program := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:t/Go", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:t/Hook"}]}]}`
	for _, tt := range []struct {
		url string
		ok  bool
	}{
		{"https://hooks.test/services/T0SECRET/XSECRETPATHx?token=XSECRETQUERYx", true},
		{"https://hooks.test:70000/services/T0SECRET/XSECRETPATHx?token=XSECRETQUERYx", false},
		{"https://user:XSECRETPW@hooks.test/services/T0SECRET/XSECRETPATHx?token=XSECRETQUERYx", false},
	} {
		manifest := `{"manifest_version": "touba-manifest-v1", "bindings": {
		  "tool:t/Hook": {"handler": {"kind": "webhook", "options": {"url": "` + tt.url + `"},
		    "credentials": {"hmac_secret": {"env": "CHECK_TEST_HOOK_KEY"}}}, "effect_contract": {"kind": "none"}}}}`
		pp, mp := filepath.Join(dir, "p.json"), filepath.Join(dir, "m.json")
		if err := os.WriteFile(pp, []byte(program), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mp, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		err := runCheck(context.Background(), []string{"--manifest", mp, pp}, &out, &errOut)
		if (err == nil) != tt.ok {
			t.Fatalf("check %s: %v, want ok=%v", tt.url, err, tt.ok)
		}
		shown := out.String() + errOut.String()
		if err != nil {
			shown += err.Error()
		}
		if strings.Contains(shown, "SECRET") {
			t.Errorf("check %s shows a secret part of the URL:\n%s", tt.url, shown)
		}
	}
}
