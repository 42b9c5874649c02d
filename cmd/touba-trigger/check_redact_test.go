package main

import (
	"strings"
	"testing"
)

// check shows a webhook binding without its URL, and a refused URL
// without its path or query: either may be the credential.
func TestCheckDoesNotShowWebhookURLs(t *testing.T) {
	t.Setenv("CHECK_TEST_HOOK_KEY", "k-1234567890")
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
		out, errOut, err := runCheckFiles(t, program, manifest)
		if (err == nil) != tt.ok {
			t.Fatalf("check %s: %v, want ok=%v", tt.url, err, tt.ok)
		}
		shown := out + errOut
		if err != nil {
			shown += err.Error()
		}
		if strings.Contains(shown, "SECRET") {
			t.Errorf("check %s shows a secret part of the URL:\n%s", tt.url, shown)
		}
	}
}
