package dispatcher

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/manifest"
)

// guarded is the outbound side of a webhook or http binding: the egress
// guard with the daemon's deny list and the binding's allow list.
func (o Outbound) guarded(opts *manifest.Options) handler.Outbound {
	g := &egress.Guard{Deny: o.EgressDeny}
	for _, s := range opts.AllowAddresses {
		// The manifest loader checked each one.
		if p, err := egress.ParsePrefix(s); err == nil {
			g.Allow = append(g.Allow, p)
		}
	}
	return handler.Outbound{Guard: g}
}

// httpSpec is an http binding as its runner needs it: secrets holds the
// binding's secret values by name, tls its roots and client certificate
// (nil: neither).
func httpSpec(b *manifest.Binding, secrets map[string]string, tls *manifest.TLS, out handler.Outbound, log zerolog.Logger) handler.HTTPSpec {
	o := b.Handler.Options
	spec := handler.HTTPSpec{Method: o.Method, URL: o.URL, Secrets: secrets, Limits: callLimits(b), Outbound: out, Log: log}
	for name, h := range o.Headers {
		spec.Headers = append(spec.Headers, handler.Header{Name: name, Literal: h.Literal, Secret: h.Secret, Format: h.Format})
	}
	if o.IdempotencyHeader != nil {
		spec.IdempotencyHeader = *o.IdempotencyHeader
	}
	if o.Body != nil {
		spec.BodyRef, spec.NoBody = o.Body.Ref, o.Body.None
	}
	if tls != nil {
		spec.CA, spec.ClientCert, spec.ClientKey = tls.CA, tls.Cert, tls.Key
	}
	return spec
}

// callLimits are the bounds of a webhook or http binding's calls: its
// timeout_sec per try, its max_payload_bytes.
func callLimits(b *manifest.Binding) handler.Limits {
	return handler.Limits{Timeout: time.Duration(b.Handler.Options.TimeoutSec) * time.Second, MaxPayload: b.MaxPayloadBytes}
}
