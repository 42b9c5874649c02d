package manifest

import (
	"net"
	"net/url"
	"regexp"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/urltpl"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// The broker kinds (SPEC §2.2 "Broker destinations"): each publishes the
// step's input, or the part of it at options.body, as one message.
const (
	KindNATS     = "nats"
	KindKafka    = "kafka"
	KindRabbitMQ = "rabbitmq"
)

// DefaultNATSPort is the port of a nats:// or tls:// URL that names none.
const DefaultNATSPort = "4222"

// IsBroker tells whether kind is a broker destination.
func IsBroker(kind string) bool { return kind == KindNATS || kind == KindKafka || kind == KindRabbitMQ }

// The options each broker kind takes.
var (
	natsOptions  = []string{"url", "subject", "stream", "body", "timeout_sec", "ca_file", "allow_addresses"}
	kafkaOptions = []string{"brokers", "topic", "key", "transactional_id", "tls", "sasl_mechanism", "body",
		"timeout_sec", "ca_file", "allow_addresses"}
	rabbitOptions     = []string{"url", "exchange", "routing_key", "body", "timeout_sec", "ca_file", "allow_addresses"}
	brokerCredentials = []string{"username", "password", "token", "client_certificate"}
)

// SASL mechanisms a kafka binding may name.
var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

var (
	// streamName: a JetStream stream name (no white space, ".", "*", ">", or path separators).
	streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	// kafkaTopic: Kafka's topic names.
	kafkaTopic = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
	// exchangeName: a RabbitMQ exchange name (what the broker accepts in a
	// declaration: letters, digits, -, _, . and :, at most 255 bytes).
	exchangeName = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,255}$`)
)

// nats checks a nats handler: options (url, subject, stream, body, ...)
// and credentials.
func (p *problems) nats(path string, f strictjson.Fields, h *Handler) {
	n, ok := f["options"]
	if !ok {
		p.Fail(strictjson.Child(path, "options"), "required for a nats handler")
	} else {
		at := strictjson.Child(path, "options")
		if of, _ := p.Object(at, n, natsOptions, "url", "subject", "stream"); of != nil {
			o := &Options{TimeoutSec: DefaultWebhookTimeoutSec}
			if u, ok := of["url"]; ok {
				o.URL = p.natsURL(strictjson.Child(at, "url"), u)
			}
			if s, ok := of["subject"]; ok {
				o.Subject = p.subject(strictjson.Child(at, "subject"), s)
			}
			if s, ok := of["stream"]; ok {
				sat := strictjson.Child(at, "stream")
				if v, err := p.NonEmpty(sat, s); err == nil {
					if !streamName.MatchString(v) {
						p.Fail(sat, "must be a JetStream stream name (letters, digits, - and _)")
					} else {
						o.Stream = v
					}
				}
			}
			p.brokerCommon(at, of, o)
			h.Options = o
		}
	}
	p.brokerCredentials(path, f, h, true)
}

// kafka checks a kafka handler: options (brokers, topic, key, ...) and
// credentials.
func (p *problems) kafka(path string, f strictjson.Fields, h *Handler) {
	n, ok := f["options"]
	if !ok {
		p.Fail(strictjson.Child(path, "options"), "required for a kafka handler")
	} else {
		at := strictjson.Child(path, "options")
		if of, _ := p.Object(at, n, kafkaOptions, "brokers", "topic"); of != nil {
			o := &Options{TimeoutSec: DefaultWebhookTimeoutSec}
			if b, ok := of["brokers"]; ok {
				bat := strictjson.Child(at, "brokers")
				list, _ := p.Strs(bat, b)
				if b.Kind == strictjson.Array && len(list) == 0 {
					p.Fail(bat, "must name at least one broker")
				}
				for i, s := range list {
					if host, port, err := net.SplitHostPort(s); err != nil || host == "" || !validPort(port) || port == "" {
						p.Fail(strictjson.Index(bat, i), "must be host:port")
					}
				}
				o.Brokers = list
			}
			if t, ok := of["topic"]; ok {
				tat := strictjson.Child(at, "topic")
				if v, err := p.NonEmpty(tat, t); err == nil {
					if !kafkaTopic.MatchString(v) {
						p.Fail(tat, "must be a Kafka topic name (letters, digits, ., _ and -; at most 249)")
					} else {
						o.Topic = v
					}
				}
			}
			if k, ok := of["key"]; ok {
				kat := strictjson.Child(at, "key")
				if v, err := p.NonEmpty(kat, k); err == nil {
					if _, err := urltpl.ParseText(v); err != nil {
						p.Fail(kat, "%s", err.Error())
					} else {
						o.Key = v
					}
				}
			}
			if t, ok := of["transactional_id"]; ok {
				o.TransactionalID, _ = p.NonEmpty(strictjson.Child(at, "transactional_id"), t)
			}
			if t, ok := of["tls"]; ok {
				o.TLS, _ = p.Boolean(strictjson.Child(at, "tls"), t)
			}
			if s, ok := of["sasl_mechanism"]; ok {
				sat := strictjson.Child(at, "sasl_mechanism")
				if v, err := p.Str(sat, s); err == nil {
					if !containsString(saslMechanisms, v) {
						p.Fail(sat, "must be one of %s (got %s)", strings.Join(saslMechanisms, ", "), strictjson.Quote(v))
					} else {
						o.SASLMechanism = v
					}
				}
			}
			p.brokerCommon(at, of, o)
			h.Options = o
		}
	}
	p.brokerCredentials(path, f, h, false)
	if o, c := h.Options, h.Credentials; o != nil && o.SASLMechanism != "" && (c == nil || c.Username == nil || c.Password == nil) {
		p.Fail(strictjson.Child(path, "credentials"), "sasl_mechanism %s needs credentials.username and credentials.password", o.SASLMechanism)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// brokerCommon checks what every broker kind takes: body, timeout_sec,
// ca_file, allow_addresses.
func (p *problems) brokerCommon(at string, of strictjson.Fields, o *Options) {
	if b, ok := of["body"]; ok {
		o.Body = p.body(strictjson.Child(at, "body"), b)
	}
	if c, ok := of["ca_file"]; ok {
		o.CAFile, _ = p.NonEmpty(strictjson.Child(at, "ca_file"), c)
	}
	p.callOptions(at, of, o)
}

// brokerCredentials checks a broker's credentials: username and password
// (both or neither), a token (nats only), a client certificate.
func (p *problems) brokerCredentials(path string, f strictjson.Fields, h *Handler, token bool) {
	n, ok := f["credentials"]
	if !ok {
		return
	}
	at := strictjson.Child(path, "credentials")
	allowed := brokerCredentials
	if !token {
		allowed = []string{"username", "password", "client_certificate"}
	}
	cf, _ := p.Object(at, n, allowed)
	if cf == nil {
		return
	}
	c := &Credentials{}
	for _, x := range []struct {
		name string
		dst  **secret.Ref
	}{{"username", &c.Username}, {"password", &c.Password}, {"token", &c.Token}} {
		if v, ok := cf[x.name]; ok {
			if r, ok := p.secretRef(strictjson.Child(at, x.name), v); ok {
				*x.dst = &r
			}
		}
	}
	if (c.Username == nil) != (c.Password == nil) {
		p.Fail(at, "username and password go together")
	}
	if c.Token != nil && c.Username != nil {
		p.Fail(strictjson.Child(at, "token"), "not allowed with username and password")
	}
	if cc, ok := cf["client_certificate"]; ok {
		cat := strictjson.Child(at, "client_certificate")
		if kf, _ := p.Object(cat, cc, []string{"cert", "key"}, "cert", "key"); len(kf) == 2 {
			cert, ok1 := p.secretRef(strictjson.Child(cat, "cert"), kf["cert"])
			key, ok2 := p.secretRef(strictjson.Child(cat, "key"), kf["key"])
			if ok1 && ok2 {
				c.ClientCertificate = &ClientCertificate{Cert: cert, Key: key}
			}
		}
	}
	h.Credentials = c
}

// natsURL checks a nats binding's url: nats:// or tls://, a host, no user
// info (credentials come from secrets), no path.
func (p *problems) natsURL(path string, n *strictjson.Node) string {
	s, err := p.NonEmpty(path, n)
	if err != nil {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Hostname() == "" || u.Opaque != "":
		p.Fail(path, "must be a nats://host:port or tls://host:port URL")
	case u.User != nil:
		p.Fail(path, "must not contain user info; use credentials.username and credentials.password from secrets")
	case !validPort(u.Port()):
		p.Fail(path, "has a port out of range 1-65535")
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		p.Fail(path, "must not have a path, a query or a fragment")
	default:
		return s
	}
	return ""
}

// subject checks a nats subject template: {/pointer} placeholders (each
// value one token, see urltpl.EscapeToken), literal tokens without white
// space or wildcards, no empty token.
func (p *problems) subject(path string, n *strictjson.Node) string {
	s, err := p.NonEmpty(path, n)
	if err != nil {
		return ""
	}
	t, err := urltpl.ParseText(s)
	if err != nil {
		p.Fail(path, "%s", err.Error())
		return ""
	}
	// The literal text is checked with each placeholder standing as one
	// token (the value is escaped into one at each call).
	for _, tok := range strings.Split(sample(t), ".") {
		switch {
		case tok == "":
			p.Fail(path, "has an empty token (a leading, trailing or doubled \".\")")
			return ""
		case strings.ContainsAny(tok, " \t\r\n*>"):
			p.Fail(path, "must not hold white space or the wildcards * and > (a publish subject is literal)")
			return ""
		}
	}
	return s
}

// sample is the subject with each placeholder replaced by "x".
func sample(t *urltpl.Text) string {
	doc := map[string]any{}
	var fill func(m map[string]any, toks []string)
	fill = func(m map[string]any, toks []string) {
		if len(toks) == 1 {
			m[toks[0]] = "x"
			return
		}
		next, ok := m[toks[0]].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[toks[0]] = next
		}
		fill(next, toks[1:])
	}
	for _, ptr := range t.Pointers() {
		toks := strings.Split(ptr[1:], "/")
		for i, tok := range toks {
			toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		fill(doc, toks)
	}
	s, err := t.Expand(doc, nil)
	if err != nil {
		// Two pointers, one the prefix of the other: the shape is checked
		// on the literal text alone.
		return strings.NewReplacer("{", "x", "}", "x").Replace(t.String())
	}
	return s
}

// brokerContract applies the dedupe window rule at load (SPEC §2.2): a
// kafka binding may declare retry_mode idempotency_key only with a
// transactional_id, a rabbitmq binding never (RabbitMQ has no dedupe
// window); a broker binding has no compensating call.
func (p *problems) brokerContract(path string, b *Binding) {
	if !IsBroker(b.Handler.Kind) || b.Handler.Options == nil {
		return
	}
	if b.Handler.Kind == KindKafka && b.EffectContract.RetryMode == touba.RetryIdempotencyKey && b.Handler.Options.TransactionalID == "" {
		p.Fail(strictjson.Child(strictjson.Child(path, "effect_contract"), "retry_mode"),
			"idempotency_key is refused for a kafka binding without options.transactional_id: Kafka's idempotent producer "+
				"deduplicates only within one producer session")
	}
	if b.Handler.Kind == KindRabbitMQ && b.EffectContract.RetryMode == touba.RetryIdempotencyKey {
		p.Fail(strictjson.Child(strictjson.Child(path, "effect_contract"), "retry_mode"),
			"idempotency_key is refused for a rabbitmq binding: RabbitMQ never drops a message published again, so an "+
				"unknown publish cannot be re-sent safely; use reconcile (parked for an operator) or none")
	}
	if b.Compensation != nil && b.Compensation.Supported {
		p.Fail(strictjson.Child(strictjson.Child(path, "compensation"), "supported"),
			"not allowed for a %s handler: a published message has no compensating form", b.Handler.Kind)
	}
}

// Login is a broker binding's login, read at start-up: a username and a
// password, or a token. It must never be logged or stored.
type Login struct {
	Username, Password, Token string
}

// resolveLogin reads a broker binding's credentials.username, password and
// token; nil when it has none.
func (m *Manifest) resolveLogin(p *problems, path string, b *Binding, env secret.Env, values *secret.Set) *Login {
	c := b.Handler.Credentials
	if !IsBroker(b.Handler.Kind) || c == nil || (c.Username == nil && c.Token == nil) {
		return nil
	}
	l := &Login{}
	ok := true
	for _, x := range []struct {
		name string
		ref  *secret.Ref
		dst  *string
	}{{"username", c.Username, &l.Username}, {"password", c.Password, &l.Password}, {"token", c.Token, &l.Token}} {
		if x.ref == nil {
			continue
		}
		v, err := x.ref.Resolve(env, m.Dir)
		if err != nil {
			p.Fail(path+".handler.credentials."+x.name, "cannot resolve: %s", err.Error())
			ok = false
			continue
		}
		*x.dst = v
		if x.name != "username" {
			values.Add(v)
		}
	}
	if !ok {
		return nil
	}
	return l
}
