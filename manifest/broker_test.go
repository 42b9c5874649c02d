package manifest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
)

const (
	natsBinding = `{"handler": {"kind": "nats", "options": {"url": "tls://nats.test:4222", "subject": "orders.{/event/body/shop_domain}",
		"stream": "ORDERS", "body": {"$ref": "/event/body"}, "timeout_sec": 3, "allow_addresses": ["10.0.0.0/8"]},
		"credentials": {"username": {"env": "NATS_USER"}, "password": {"env": "NATS_PASSWORD"}}},
		"effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}`
	kafkaBinding = `{"handler": {"kind": "kafka", "options": {"brokers": ["k1.test:9092", "k2.test:9092"], "topic": "orders",
		"key": "{/shop}", "transactional_id": "touba-orders", "sasl_mechanism": "SCRAM-SHA-256", "tls": true},
		"credentials": {"username": {"env": "K_USER"}, "password": {"file": "kpw"}}},
		"effect_contract": {"kind": "external_write", "retry_mode": "idempotency_key"}}`
	rabbitBinding = `{"handler": {"kind": "rabbitmq", "options": {"url": "amqps://rabbit.test:5671/orders", "exchange": "orders",
		"routing_key": "orders.{/shop}", "body": null, "timeout_sec": 4, "ca_file": "ca.pem"},
		"credentials": {"username": {"env": "R_USER"}, "password": {"env": "R_PASSWORD"}}},
		"effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}}`
)

func TestParse_Brokers(t *testing.T) {
	src := `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/N":` + natsBinding + `,"tool:a/K":` + kafkaBinding + `,
		"tool:a/R":` + rabbitBinding + `,
		"tool:a/RDefault": {"handler": {"kind": "rabbitmq", "options": {"url": "amqp://127.0.0.1", "routing_key": "orders"}},
		"effect_contract": {"kind": "external_write", "retry_mode": "none"}},
		"tool:a/KMin": {"handler": {"kind": "kafka", "options": {"brokers": ["127.0.0.1:9092"], "topic": "t"}},
		"effect_contract": {"kind": "external_write", "retry_mode": "reconcile"}}}}`
	m := MustParse(t, src)
	n := m.Bindings["tool:a/N"]
	want := manifest.Options{URL: "tls://nats.test:4222", Subject: "orders.{/event/body/shop_domain}", Stream: "ORDERS",
		Body: &manifest.Body{Ref: "/event/body"}, TimeoutSec: 3, AllowAddresses: []string{"10.0.0.0/8"}}
	if !reflect.DeepEqual(*n.Handler.Options, want) {
		t.Fatalf("nats options %+v", *n.Handler.Options)
	}
	if c := n.Handler.Credentials; c == nil || *c.Username != (secret.Ref{Env: "NATS_USER"}) || *c.Password != (secret.Ref{Env: "NATS_PASSWORD"}) {
		t.Fatalf("nats credentials %+v", c)
	}
	k := m.Bindings["tool:a/K"].Handler.Options
	if k.Topic != "orders" || k.Key != "{/shop}" || k.TransactionalID != "touba-orders" || !k.TLS || k.SASLMechanism != "SCRAM-SHA-256" ||
		len(k.Brokers) != 2 {
		t.Fatalf("kafka options %+v", k)
	}
	r := m.Bindings["tool:a/R"]
	wantR := manifest.Options{URL: "amqps://rabbit.test:5671/orders", Exchange: "orders", RoutingKey: "orders.{/shop}",
		Body: &manifest.Body{None: true}, TimeoutSec: 4, CAFile: "ca.pem"}
	if !reflect.DeepEqual(*r.Handler.Options, wantR) || r.Handler.Credentials == nil || *r.Handler.Credentials.Username != (secret.Ref{Env: "R_USER"}) {
		t.Fatalf("rabbitmq options %+v credentials %+v", *r.Handler.Options, r.Handler.Credentials)
	}
	if o := m.Bindings["tool:a/RDefault"].Handler.Options; o.Exchange != "" || o.RoutingKey != "orders" || o.TimeoutSec != 10 {
		t.Fatalf("rabbitmq on the default exchange %+v", o)
	}
	if o := m.Bindings["tool:a/KMin"].Handler.Options; o.TimeoutSec != 10 || o.Key != "" {
		t.Fatalf("kafka defaults %+v", o)
	}
	// The broker kinds protect their broker as http does (SPEC §2.2); a
	// nats binding with a wider bound (DefaultNATSMaxConcurrency).
	for ref, b := range m.Bindings {
		want := manifest.DefaultRemoteMaxConcurrency
		if b.Handler.Kind == manifest.KindNATS {
			want = manifest.DefaultNATSMaxConcurrency
		}
		if b.MaxConcurrency != want || b.Circuit == nil || *b.Circuit != manifest.DefaultRemoteCircuit {
			t.Errorf("%s: max_concurrency %d, circuit %+v; want the remote defaults", ref, b.MaxConcurrency, b.Circuit)
		}
	}
	// The manifest's JSON, defaults written out, loads back to the same.
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back := MustParse(t, string(data))
	for ref, b := range m.Bindings {
		if !reflect.DeepEqual(b.Handler, back.Bindings[ref].Handler) {
			t.Errorf("%s does not load back: %s", ref, data)
		}
	}
}

func TestResolve_BrokerLogin(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kpw"), []byte("kafka-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `{"manifest_version":"touba-manifest-v1","bindings":{"tool:a/K":` + kafkaBinding + `}}`
	m, err := manifest.Parse(filepath.Join(dir, "m.json"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Resolve(func(k string) (string, bool) { return map[string]string{"K_USER": "alice"}[k], k == "K_USER" })
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Login["tool:a/K"]; l == nil || l.Username != "alice" || l.Password != "kafka-secret" || !res.Values.Contains("kafka-secret") {
		t.Fatalf("login %+v", l)
	}
}

func TestParse_BrokersBad(t *testing.T) {
	const B = `m.json: $.bindings["tool:a/B"]`
	n := func(options string) string {
		return one(`{"handler":{"kind":"nats","options":` + options + `},` + none + `}`)
	}
	k := func(options, mode string) string {
		return one(`{"handler":{"kind":"kafka","options":` + options + `},"effect_contract":{"kind":"external_write","retry_mode":"` + mode + `"}}`)
	}
	r := func(options, mode string) string {
		return one(`{"handler":{"kind":"rabbitmq","options":` + options + `},"effect_contract":{"kind":"external_write","retry_mode":"` + mode + `"}}`)
	}
	for _, tt := range []struct{ name, src, want string }{
		{"nats no stream", n(`{"url":"nats://h:4222","subject":"a.b"}`), B + `.handler.options.stream: required field is missing`},
		{"nats http url", n(`{"url":"http://h:4222","subject":"a.b","stream":"S"}`), B + `.handler.options.url: must be a nats://host:port or tls://host:port URL`},
		{"nats user info", n(`{"url":"nats://u:SECRETPW@h:4222","subject":"a.b","stream":"S"}`), B + `.handler.options.url: must not contain user info`},
		{"nats wildcard", n(`{"url":"nats://h","subject":"a.*","stream":"S"}`), B + `.handler.options.subject: must not hold white space or the wildcards`},
		{"nats empty token", n(`{"url":"nats://h","subject":"a..{/x}","stream":"S"}`), B + `.handler.options.subject: has an empty token`},
		{"nats bad placeholder", n(`{"url":"nats://h","subject":"a.{x}","stream":"S"}`), B + `.handler.options.subject: placeholder {x} is not a JSON pointer`},
		{"nats bad stream", n(`{"url":"nats://h","subject":"a.b","stream":"S.1"}`), B + `.handler.options.stream: must be a JetStream stream name`},
		{"kafka idempotency_key without transactional_id", k(`{"brokers":["h:9092"],"topic":"t"}`, "idempotency_key"),
			B + `.effect_contract.retry_mode: idempotency_key is refused for a kafka binding without options.transactional_id`},
		{"kafka broker without port", k(`{"brokers":["h"],"topic":"t"}`, "reconcile"), B + `.handler.options.brokers[0]: must be host:port`},
		{"kafka no brokers", k(`{"brokers":[],"topic":"t"}`, "reconcile"), B + `.handler.options.brokers: must name at least one broker`},
		{"kafka bad topic", k(`{"brokers":["h:1"],"topic":"a b"}`, "reconcile"), B + `.handler.options.topic: must be a Kafka topic name`},
		{"kafka sasl without login", k(`{"brokers":["h:1"],"topic":"t","sasl_mechanism":"PLAIN"}`, "reconcile"),
			B + `.handler.credentials: sasl_mechanism PLAIN needs credentials.username and credentials.password`},
		{"kafka token", one(`{"handler":{"kind":"kafka","options":{"brokers":["h:1"],"topic":"t"},"credentials":{"token":{"env":"T"}}},` + none + `}`),
			B + `.handler.credentials.token: unknown field`},
		{"rabbitmq idempotency_key", r(`{"url":"amqp://h","exchange":"x","routing_key":"k"}`, "idempotency_key"),
			B + `.effect_contract.retry_mode: idempotency_key is refused for a rabbitmq binding: RabbitMQ never drops a message published again`},
		{"rabbitmq no url", r(`{"exchange":"x"}`, "reconcile"), B + `.handler.options.url: required field is missing`},
		{"rabbitmq http url", r(`{"url":"http://h","exchange":"x"}`, "reconcile"), B + `.handler.options.url: must be an amqp://host:port/vhost or amqps://host:port/vhost URL`},
		{"rabbitmq user info", r(`{"url":"amqp://guest:SECRETPW@h/","exchange":"x"}`, "reconcile"), B + `.handler.options.url: must not contain user info`},
		{"rabbitmq query", r(`{"url":"amqp://h/?heartbeat=5","exchange":"x"}`, "reconcile"), B + `.handler.options.url: must not have a query`},
		{"rabbitmq two segments", r(`{"url":"amqp://h/a/b","exchange":"x"}`, "reconcile"), B + `.handler.options.url: has a path of more than one segment`},
		{"rabbitmq bad exchange", r(`{"url":"amqp://h","exchange":"a b"}`, "reconcile"), B + `.handler.options.exchange: must be a RabbitMQ exchange name`},
		{"rabbitmq nowhere", r(`{"url":"amqp://h"}`, "reconcile"), B + `.handler.options: names neither an exchange nor a routing_key`},
		{"rabbitmq bad placeholder", r(`{"url":"amqp://h","exchange":"x","routing_key":"a.{x}"}`, "reconcile"),
			B + `.handler.options.routing_key: placeholder {x} is not a JSON pointer`},
		{"rabbitmq ca_file on amqp", r(`{"url":"amqp://h","exchange":"x","ca_file":"ca.pem"}`, "reconcile"),
			B + `.handler.options.url: must be amqps:// with a ca_file or a client certificate`},
		{"rabbitmq token", one(`{"handler":{"kind":"rabbitmq","options":{"url":"amqp://h","exchange":"x"},"credentials":{"token":{"env":"T"}}},` + none + `}`),
			B + `.handler.credentials.token: unknown field`},
		{"broker compensation", one(`{"handler":{"kind":"nats","options":{"url":"nats://h","subject":"a","stream":"S"}},"effect_contract":{"kind":"external_write","retry_mode":"reconcile"},"compensation":{"supported":true}}`),
			B + `.compensation.supported: not allowed for a nats handler`},
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
		})
	}
}
