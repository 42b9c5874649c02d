package main

import (
	"strings"
	"testing"
)

// check prints an http binding's method, URL template and the input
// pointers it reads, its body and headers (a secret by name, never its
// value), and refuses a bad binding naming file, path and rule.
func TestCheckPrintsHTTPBindings(t *testing.T) {
	t.Setenv("CHECK_TEST_ORDERS_TOKEN", "tok-check-9f8e7d")
	program := `{"air_version": "touba-air-v1", "triggers": [
	  {"ref": "trigger:t/Go", "source": {"kind": "webhook"}, "steps": [{"id": "s", "tool": "tool:t/Put"}]}]}`
	manifest := `{"manifest_version": "touba-manifest-v1", "bindings": {
	  "tool:t/Put": {"handler": {"kind": "http", "options": {"method": "PUT",
	    "url": "http://127.0.0.1:8787/orders/{/order_id}/payment?customer={/customer/id}&key=XSECRETQUERYx",
	    "headers": {"Authorization": {"secret": "ORDERS_API_TOKEN", "format": "Bearer %s"}},
	    "allow_addresses": ["169.254.10.0/24"]}},
	    "secrets": {"ORDERS_API_TOKEN": {"env": "CHECK_TEST_ORDERS_TOKEN"}},
	    "effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}}}`
	out, errOut, err := runCheckFiles(t, program, manifest)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, errOut)
	}
	for _, want := range []string{
		"  tool:t/Put  http  effect=external_write/idempotency_key  max_concurrency=16 (default)\n",
		"    circuit: opens when 0.5 of at least 20 calls ended in 60000 ms failed, for 30000 ms; then one call probes (default)\n",
		"    PUT http://127.0.0.1:8787/orders/{/order_id}/payment?customer={/customer/id}&key=…\n",
		"    url reads: /order_id, /customer/id\n",
		"    body: the whole input  idempotency header: Idempotency-Key (the effect id)\n",
		"    headers: Authorization (secret ORDERS_API_TOKEN)\n",
		"    egress also allowed to: 169.254.10.0/24\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tok-check-9f8e7d") || strings.Contains(out, "XSECRETQUERYx") {
		t.Fatalf("check shows the token or a literal query value:\n%s", out)
	}

	// The defaults turned off (SPEC §2.2): check says so.
	off := strings.Replace(manifest, `"secrets":`, `"max_concurrency": 0, "circuit": null, "secrets":`, 1)
	out, errOut, err = runCheckFiles(t, program, off)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, errOut)
	}
	for _, want := range []string{
		"  tool:t/Put  http  effect=external_write/idempotency_key  max_concurrency=off\n",
		"    circuit: off\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	bad := strings.Replace(manifest, `"secret": "ORDERS_API_TOKEN"`, `"secret": "OTHER"`, 1)
	bad = strings.Replace(bad, `"method": "PUT"`, `"method": "GET"`, 1)
	_, _, err = runCheckFiles(t, program, bad)
	for _, want := range []string{
		`m.json: $.bindings["tool:t/Put"].handler.options.method: must be one of POST, PUT, PATCH, DELETE (got "GET")`,
		`m.json: $.bindings["tool:t/Put"].handler.options.headers.Authorization.secret: names "OTHER", which is not one of the binding's secrets`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check of a bad binding: %v\nwant %s", err, want)
		}
	}
}
