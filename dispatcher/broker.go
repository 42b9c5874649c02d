package dispatcher

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/manifest"
)

// natsSpec is a nats binding as its runner needs it: login its username,
// password or token (nil: none), tls its roots and client certificate.
func natsSpec(b *manifest.Binding, login *manifest.Login, tls *manifest.TLS, out handler.Outbound, log zerolog.Logger) handler.NATSSpec {
	o := b.Handler.Options
	spec := handler.NATSSpec{URL: o.URL, Subject: o.Subject, Stream: o.Stream,
		Timeout: time.Duration(o.TimeoutSec) * time.Second, MaxPayload: b.MaxPayloadBytes, Guard: out.Guard, Log: log}
	if o.Body != nil {
		spec.BodyRef, spec.NoBody = o.Body.Ref, o.Body.None
	}
	if login != nil {
		spec.Username, spec.Password, spec.Token = login.Username, login.Password, login.Token
	}
	if tls != nil {
		spec.CA, spec.ClientCert, spec.ClientKey = tls.CA, tls.Cert, tls.Key
	}
	return spec
}

// kafkaSpec is a kafka binding as its runner needs it.
func kafkaSpec(b *manifest.Binding, login *manifest.Login, tls *manifest.TLS, out handler.Outbound, log zerolog.Logger) handler.KafkaSpec {
	o := b.Handler.Options
	spec := handler.KafkaSpec{Brokers: o.Brokers, Topic: o.Topic, Key: o.Key, TransactionalID: o.TransactionalID, TLS: o.TLS,
		SASLMechanism: o.SASLMechanism, Timeout: time.Duration(o.TimeoutSec) * time.Second, MaxPayload: b.MaxPayloadBytes,
		Guard: out.Guard, Log: log}
	if o.Body != nil {
		spec.BodyRef, spec.NoBody = o.Body.Ref, o.Body.None
	}
	if login != nil {
		spec.Username, spec.Password = login.Username, login.Password
	}
	if tls != nil {
		spec.CA, spec.ClientCert, spec.ClientKey = tls.CA, tls.Cert, tls.Key
	}
	return spec
}

// rabbitSpec is a rabbitmq binding as its runner needs it.
func rabbitSpec(b *manifest.Binding, login *manifest.Login, tls *manifest.TLS, out handler.Outbound, log zerolog.Logger) handler.RabbitMQSpec {
	o := b.Handler.Options
	spec := handler.RabbitMQSpec{URL: o.URL, Exchange: o.Exchange, RoutingKey: o.RoutingKey,
		Timeout: time.Duration(o.TimeoutSec) * time.Second, MaxPayload: b.MaxPayloadBytes, Guard: out.Guard, Log: log}
	if o.Body != nil {
		spec.BodyRef, spec.NoBody = o.Body.Ref, o.Body.None
	}
	if login != nil {
		spec.Username, spec.Password = login.Username, login.Password
	}
	if tls != nil {
		spec.CA, spec.ClientCert, spec.ClientKey = tls.CA, tls.Cert, tls.Key
	}
	return spec
}

// BrokerStats are the counters of c's broker bindings, by tool ref.
func (c *Config) BrokerStats() map[string]*handler.BrokerStats {
	out := map[string]*handler.BrokerStats{}
	if c == nil {
		return out
	}
	for ref, b := range c.Bindings {
		if s, ok := b.Runner.(handler.BrokerStatser); ok {
			out[ref] = s.BrokerStats()
		}
	}
	return out
}
