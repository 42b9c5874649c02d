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

// httpBinding is an http binding with every field set.
const httpBinding = `{"handler": {"kind": "http", "options": {"method": "PUT",
	"url": "https://orders.test:8443/orders/{/order/id}/payment?customer={/customer}",
	"headers": {"Authorization": {"secret": "ORDERS_TOKEN", "format": "Bearer %s"}, "X-Shop": "eu-1"},
	"body": {"$ref": "/order"}, "idempotency_header": "X-Request-Key", "timeout_sec": 5, "ca_file": "ca.pem",
	"allow_addresses": ["10.0.0.0/8", "169.254.10.1"]},
	"credentials": {"client_certificate": {"cert": {"file": "client.pem"}, "key": {"env": "CLIENT_KEY"}}}},
	"secrets": {"ORDERS_TOKEN": {"env": "ORDERS_TOKEN"}},
	"effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}`

func TestParse_HTTP(t *testing.T) {
	m := MustParse(t, `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/B":`+httpBinding+`,
		"tool:a/Min": {"handler": {"kind": "http", "options": {"url": "http://127.0.0.1:9/x"}}, `+none+`},
		"tool:a/NoBody": {"handler": {"kind": "http", "options": {"url": "http://h/x", "method": "DELETE", "body": null,
			"idempotency_header": ""}}, `+none+`}}}`)
	key := "X-Request-Key"
	want := manifest.Options{URL: "https://orders.test:8443/orders/{/order/id}/payment?customer={/customer}", TimeoutSec: 5,
		AllowAddresses: []string{"10.0.0.0/8", "169.254.10.1"}, Method: "PUT",
		Headers: map[string]manifest.Header{"Authorization": {Secret: "ORDERS_TOKEN", Format: "Bearer %s"}, "X-Shop": {Literal: "eu-1"}},
		Body:    &manifest.Body{Ref: "/order"}, IdempotencyHeader: &key, CAFile: "ca.pem"}
	b := m.Bindings["tool:a/B"]
	if !reflect.DeepEqual(*b.Handler.Options, want) {
		t.Fatalf("options %+v,\nwant    %+v", *b.Handler.Options, want)
	}
	if got := b.Handler.Credentials.ClientCertificate; got == nil || got.Cert != (secret.Ref{File: "client.pem"}) || got.Key != (secret.Ref{Env: "CLIENT_KEY"}) {
		t.Fatalf("client certificate %+v", got)
	}
	min := m.Bindings["tool:a/Min"].Handler.Options
	if min.Method != "POST" || *min.IdempotencyHeader != "Idempotency-Key" || min.TimeoutSec != 10 || min.Body != nil || min.Headers != nil {
		t.Fatalf("defaults %+v", min)
	}
	nb := m.Bindings["tool:a/NoBody"].Handler.Options
	if nb.Body == nil || !nb.Body.None || *nb.IdempotencyHeader != "" {
		t.Fatalf("body null / no idempotency header: %+v", nb)
	}
}

// Every refusal of an http binding names the file, the JSON path and the
// rule, and never quotes the URL.
func TestParse_HTTPBad(t *testing.T) {
	const B = `m.json: $.bindings["tool:a/B"]`
	h := func(options string) string {
		return one(`{"handler":{"kind":"http","options":` + options + `},"secrets":{"T":{"env":"T"}},` + none + `}`)
	}
	for _, tt := range []struct{ name, src, want string }{
		{"no options", one(`{"handler":{"kind":"http"},` + none + `}`), B + `.handler.options: required for an http handler`},
		{"no url", h(`{"method":"PUT"}`), B + `.handler.options.url: required field is missing`},
		{"unknown option", h(`{"url":"https://h/x","verb":"PUT"}`),
			B + `.handler.options.verb: unknown field (known: allow_addresses, body, ca_file, headers, idempotency_header, method, timeout_sec, url)`},
		{"GET", h(`{"url":"https://h/x","method":"GET"}`), B + `.handler.options.method: must be one of POST, PUT, PATCH, DELETE (got "GET")`},
		{"lower-case method", h(`{"url":"https://h/x","method":"put"}`), B + `.handler.options.method: must be one of POST, PUT, PATCH, DELETE (got "put")`},
		{"placeholder in host", h(`{"url":"https://{/tenant}.api.test/x"}`),
			B + `.handler.options.url: the scheme, host and port must be literal: a placeholder may only stand in a path segment or a query value`},
		{"placeholder in port", h(`{"url":"https://api.test:{/port}/x"}`), B + `.handler.options.url: the scheme, host and port must be literal`},
		{"placeholder in scheme", h(`{"url":"{/scheme}://api.test/x"}`), B + `.handler.options.url: must be an absolute http or https URL`},
		{"placeholder in query key", h(`{"url":"https://api.test/x?{/k}=1"}`), B + `.handler.options.url: a placeholder may only stand in a path segment or a query value, not in a query key`},
		{"bad pointer", h(`{"url":"https://api.test/x/{id}"}`), B + `.handler.options.url: placeholder {id} is not a JSON pointer starting with /`},
		{"user info", h(`{"url":"https://u:SECRETPW@api.test/x"}`), B + `.handler.options.url: must not contain user info`},
		{"bad header name", h(`{"url":"https://h/x","headers":{"X Shop":"1"}}`), B + `.handler.options.headers["X Shop"]: must be a valid HTTP header name`},
		{"managed header", h(`{"url":"https://h/x","headers":{"host":"evil.test"}}`), B + `.handler.options.headers.host: is set by the client itself`},
		{"idempotency header twice", h(`{"url":"https://h/x","headers":{"idempotency-key":"1"}}`),
			B + `.handler.options.headers["idempotency-key"]: is the idempotency header, which carries the effect id`},
		{"same header twice", h(`{"url":"https://h/x","headers":{"X-A":"1","x-a":"2"}}`),
			B + `.handler.options.headers["x-a"]: is already set (header names are not case-sensitive)`},
		{"header line break", h(`{"url":"https://h/x","headers":{"X-A":"1\r\nX-B: 2"}}`),
			B + `.handler.options.headers["X-A"]: must not hold a line break or a control character`},
		{"header number", h(`{"url":"https://h/x","headers":{"X-A":1}}`), B + `.handler.options.headers["X-A"]: must be an object (got number)`},
		{"header secret not among the binding's", h(`{"url":"https://h/x","headers":{"Authorization":{"secret":"OTHER"}}}`),
			B + `.handler.options.headers.Authorization.secret: names "OTHER", which is not one of the binding's secrets`},
		{"header format without %s", h(`{"url":"https://h/x","headers":{"Authorization":{"secret":"T","format":"Bearer"}}}`),
			B + `.handler.options.headers.Authorization.format: must hold one %s where the secret goes`},
		{"header format with %d", h(`{"url":"https://h/x","headers":{"Authorization":{"secret":"T","format":"%s %d"}}}`),
			B + `.handler.options.headers.Authorization.format: must hold one %s`},
		{"header unknown field", h(`{"url":"https://h/x","headers":{"Authorization":{"secret":"T","env":"T"}}}`),
			B + `.handler.options.headers.Authorization.env: unknown field (known: format, secret)`},
		{"body not a ref", h(`{"url":"https://h/x","body":{"order":1}}`), B + `.handler.options.body.order: unknown field (known: $ref)`},
		{"body bad pointer", h(`{"url":"https://h/x","body":{"$ref":"order"}}`), B + `.handler.options.body["$ref"]: must be a JSON pointer into the input`},
		{"bad idempotency header", h(`{"url":"https://h/x","idempotency_header":"Idem Key"}`),
			B + `.handler.options.idempotency_header: must be a header name, or "" to send none`},
		{"bad CIDR", h(`{"url":"https://h/x","allow_addresses":["10.0.0.1/8"]}`),
			B + `.handler.options.allow_addresses[0]: bad CIDR "10.0.0.1/8": host bits set (did you mean 10.0.0.0/8?)`},
		{"CIDR not a string", h(`{"url":"https://h/x","allow_addresses":[10]}`), B + `.handler.options.allow_addresses[0]: must be a string (got number)`},
		{"empty ca_file", h(`{"url":"https://h/x","ca_file":""}`), B + `.handler.options.ca_file: must not be empty`},
		{"client certificate without key", one(`{"handler":{"kind":"http","options":{"url":"https://h/x"},"credentials":{"client_certificate":{"cert":{"env":"C"}}}},` + none + `}`),
			B + `.handler.credentials.client_certificate.key: required field is missing`},
		{"hmac_secret on http", one(`{"handler":{"kind":"http","options":{"url":"https://h/x"},"credentials":{"hmac_secret":{"env":"C"}}},` + none + `}`),
			B + `.handler.credentials.hmac_secret: unknown field (known: client_certificate)`},
		{"http option on a webhook", one(`{"handler":{"kind":"webhook","options":{"url":"https://h/x","method":"PUT"},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.method: unknown field (known: allow_addresses, timeout_sec, url)`},
		{"bad CIDR on a webhook", one(`{"handler":{"kind":"webhook","options":{"url":"https://h/x","allow_addresses":["nope"]},"credentials":{"hmac_secret":{"env":"K"}}},` + none + `}`),
			B + `.handler.options.allow_addresses[0]: bad CIDR "nope"`},
		{"compensation", one(`{"handler":{"kind":"http","options":{"url":"https://h/x"}},"effect_contract":{"kind":"external_write","retry_mode":"reconcile"},"compensation":{"supported":true}}`),
			B + `.compensation.supported: not allowed for an http handler: its one request has no compensating form`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := manifest.Parse("m.json", []byte(tt.src))
			if err == nil {
				t.Fatalf("accepted, want %q", tt.want)
			}
			if got := err.Error(); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("error:\n %s\nwant:\n %s", got, tt.want)
			}
			if strings.Contains(err.Error(), "SECRETPW") {
				t.Fatalf("the refusal quotes the URL: %v", err)
			}
			var ce *manifest.ConfigError
			if !errors.As(err, &ce) || touba.ErrorCode(err) != touba.ECONFIG {
				t.Fatalf("%T %v is not a ConfigError", err, err)
			}
		})
	}
}

// Resolve reads an http binding's ca_file and client certificate, and
// refuses start-up, naming the path, when they cannot be used.
func TestResolve_HTTPTLS(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "not a certificate")
	write("client.pem", "not a certificate either")
	path := filepath.Join(dir, "m.json")
	write("m.json", `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/B":`+httpBinding+`}}`)
	m, err := manifest.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	env := func(name string) (string, bool) {
		return map[string]string{"ORDERS_TOKEN": "tok-123456", "CLIENT_KEY": "key-material"}[name], true
	}
	_, err = m.Resolve(env)
	for _, want := range []string{
		`$.bindings["tool:a/B"].handler.options.ca_file: holds no PEM certificate`,
		`$.bindings["tool:a/B"].handler.credentials.client_certificate: cert and key are not a usable pair`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve: %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "key-material") {
		t.Fatalf("the refusal quotes the key: %v", err)
	}
}
