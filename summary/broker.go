package summary

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/handler/urltpl"
	"github.com/touba/touba-trigger/manifest"
)

// checkWindowTimeout bounds check's read of a stream's duplicate_window.
const checkWindowTimeout = 3 * time.Second

// brokerSummary is what `check` prints of a broker binding (SPEC §2.2
// "Broker destinations"): where it publishes, what the subject or key
// reads, and the dedupe window in force, with what it means for an
// unknown publish. For nats the window is read from the stream now; a
// stream that cannot be read is said so (the daemon reads it again at
// start and on every reconnect).
func brokerSummary(b *manifest.Binding, res *manifest.Resolved) []string {
	o := b.Handler.Options
	if o == nil || !manifest.IsBroker(b.Handler.Kind) {
		return nil
	}
	body := "the whole input"
	if o.Body != nil && o.Body.None {
		body = "none"
	} else if o.Body != nil {
		body = "the input at " + o.Body.Ref
	}
	timeout := time.Duration(o.TimeoutSec) * time.Second
	keyed := b.EffectContract.RetryMode == "idempotency_key"
	var out []string
	switch b.Handler.Kind {
	case manifest.KindNATS:
		reads := "nothing"
		if t, err := urltpl.ParseText(o.Subject); err == nil && len(t.Pointers()) > 0 {
			reads = strings.Join(t.Pointers(), ", ")
		}
		out = append(out, fmt.Sprintf("PUBLISH %s subject %s stream %s", o.URL, o.Subject, o.Stream),
			"subject reads: "+reads+"  body: "+body+"  Nats-Msg-Id: the effect id")
		spec := handler.NATSSpec{URL: o.URL, Stream: o.Stream, Timeout: checkWindowTimeout}
		if res != nil {
			if l := res.Login[b.Ref]; l != nil {
				spec.Username, spec.Password, spec.Token = l.Username, l.Password, l.Token
			}
			if t := res.TLS[b.Ref]; t != nil {
				spec.CA, spec.ClientCert, spec.ClientKey = t.CA, t.Cert, t.Key
			}
		}
		w, err := handler.ReadNATSWindow(context.Background(), spec)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("dedupe window: not read now (%v); the daemon reads the stream's duplicate_window at start", err))
		case !keyed:
			out = append(out, fmt.Sprintf("dedupe window: %s (duplicate_window); retry_mode %s: an unknown publish is parked", w, b.EffectContract.RetryMode))
		case w <= timeout:
			out = append(out, fmt.Sprintf("dedupe window: %s (duplicate_window), not longer than timeout_sec %s: every unknown publish is parked", w, timeout))
		default:
			out = append(out, fmt.Sprintf("dedupe window: %s (duplicate_window): an unknown publish is re-sent with the same id until first dispatch + %s, then parked", w, w-timeout))
		}
	case manifest.KindKafka:
		key := "the event id"
		if o.Key != "" {
			key = o.Key
		}
		out = append(out, fmt.Sprintf("PRODUCE %s topic %s key %s", strings.Join(o.Brokers, ","), o.Topic, key),
			"body: "+body+"  headers: touba-effect-id, touba-event-id, touba-trigger  acks=all, idempotent")
		if o.TransactionalID != "" {
			out = append(out, "transactional_id: "+o.TransactionalID+" (one transaction per publish)")
		}
		out = append(out, "dedupe window: none across producer sessions: an unknown publish is parked")
	case manifest.KindRabbitMQ:
		reads := "nothing"
		if t, err := urltpl.ParseText(o.RoutingKey); err == nil && len(t.Pointers()) > 0 {
			reads = strings.Join(t.Pointers(), ", ")
		}
		exchange := o.Exchange
		if exchange == "" {
			exchange = `"" (the default exchange)`
		}
		code := "EffectReconciliationRequired"
		if b.EffectContract.RetryMode == "none" {
			code = "EffectOutcomeUnknown"
		}
		out = append(out, fmt.Sprintf("PUBLISH %s exchange %s routing key %s", o.URL, exchange, o.RoutingKey),
			"routing key reads: "+reads+"  body: "+body+"  message_id: the effect id  persistent, mandatory, publisher confirms",
			"dedupe window: none (RabbitMQ never drops a message published again): an unknown publish is parked "+code)
	}
	return out
}
