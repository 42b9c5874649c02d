package manifest

import (
	"net/url"
	"slices"
	"strconv"

	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// kindFields are the handler fields, besides "kind", that each kind takes.
var kindFields = map[string][]string{
	KindProcess:        {"command", "args", "cwd", "persistent"},
	KindWebhook:        {"options", "credentials"},
	KindHTTP:           {"options", "credentials"},
	KindAccountingStub: {},
	KindNATS:           {"options", "credentials"},
	KindKafka:          {"options", "credentials"},
	KindRabbitMQ:       {"options", "credentials"},
	KindWorker:         {"token"},
}

// handler checks a binding's handler. Kind is set only when it is known, so
// later checks of the binding do not pile up refusals on an unknown kind.
func (p *problems) handler(path string, n *strictjson.Node, h *Handler) {
	f, _ := p.Object(path, n, []string{"kind", "command", "args", "cwd", "persistent", "options", "credentials", "token"}, "kind")
	k, ok := f["kind"]
	if !ok {
		return
	}
	kind, err := p.Str(strictjson.Child(path, "kind"), k)
	if err != nil {
		return
	}
	own, known := kindFields[kind]
	if !known {
		p.Fail(strictjson.Child(path, "kind"), "unknown handler kind %s (known: %s, %s, %s, %s, %s, %s, %s, %s)",
			strictjson.Quote(kind), KindAccountingStub, KindHTTP, KindKafka, KindNATS, KindProcess, KindRabbitMQ, KindWebhook, KindWorker)
		return
	}
	h.Kind = kind
	art := "a"
	if kind == KindAccountingStub {
		art = "an"
	}
	for _, key := range n.Keys {
		if _, ok := f[key]; !ok || key == "kind" || slices.Contains(own, key) {
			continue
		}
		if key == "persistent" {
			p.Fail(strictjson.Child(path, key), "only allowed for a process handler")
		} else {
			p.Fail(strictjson.Child(path, key), "not allowed for %s %s handler", art, kind)
		}
	}
	switch kind {
	case KindProcess:
		p.process(path, f, h)
	case KindWebhook:
		p.webhook(path, f, h)
	case KindHTTP:
		p.http(path, f, h)
	case KindNATS:
		p.nats(path, f, h)
	case KindKafka:
		p.kafka(path, f, h)
	case KindRabbitMQ:
		p.rabbitmq(path, f, h)
	case KindWorker:
		p.worker(path, f, h)
	}
}

// process checks command, args, cwd and persistent.
func (p *problems) process(path string, f strictjson.Fields, h *Handler) {
	if c, ok := f["command"]; ok {
		h.Command, _ = p.NonEmpty(strictjson.Child(path, "command"), c)
	} else {
		p.Fail(strictjson.Child(path, "command"), "required for a process handler")
	}
	h.Args = []string{}
	if a, ok := f["args"]; ok {
		if args, err := p.Strs(strictjson.Child(path, "args"), a); err == nil {
			h.Args = args
		}
	}
	h.Cwd = DefaultCwd
	if c, ok := f["cwd"]; ok {
		h.Cwd, _ = p.NonEmpty(strictjson.Child(path, "cwd"), c)
	}
	if n, ok := f["persistent"]; ok {
		at := strictjson.Child(path, "persistent")
		pf, _ := p.Object(at, n, []string{"max_in_flight", "max_calls", "idle_timeout_ms"})
		if pf == nil {
			return
		}
		ps := &Persistent{MaxInFlight: DefaultMaxInFlight, MaxCalls: DefaultMaxCalls, IdleTimeoutMS: DefaultIdleTimeoutMS}
		if v, ok := pf["max_in_flight"]; ok {
			n, _ := p.Integer(strictjson.Child(at, "max_in_flight"), v, maxInt)
			ps.MaxInFlight = int(n)
		}
		if v, ok := pf["max_calls"]; ok {
			n, _ := p.Integer(strictjson.Child(at, "max_calls"), v, maxInt)
			ps.MaxCalls = int(n)
		}
		if v, ok := pf["idle_timeout_ms"]; ok {
			n, _ := p.Integer(strictjson.Child(at, "idle_timeout_ms"), v, maxMS)
			ps.IdleTimeoutMS = int(n)
		}
		h.Persistent = ps
	}
}

// webhook checks options (url, timeout_sec, allow_addresses) and
// credentials (hmac_secret).
func (p *problems) webhook(path string, f strictjson.Fields, h *Handler) {
	if n, ok := f["options"]; ok {
		at := strictjson.Child(path, "options")
		if of, _ := p.Object(at, n, []string{"url", "timeout_sec", "allow_addresses"}); of != nil {
			o := &Options{TimeoutSec: DefaultWebhookTimeoutSec}
			if u, ok := of["url"]; ok {
				o.URL = p.webhookURL(strictjson.Child(at, "url"), u)
			} else {
				p.Fail(strictjson.Child(at, "url"), "required for a webhook handler")
			}
			p.callOptions(at, of, o)
			h.Options = o
		}
	} else {
		p.Fail(strictjson.Child(path, "options"), "required for a webhook handler")
	}
	if n, ok := f["credentials"]; ok {
		at := strictjson.Child(path, "credentials")
		if cf, _ := p.Object(at, n, []string{"hmac_secret"}); cf != nil {
			if s, ok := cf["hmac_secret"]; ok {
				if r, ok := p.secretRef(strictjson.Child(at, "hmac_secret"), s); ok {
					h.Credentials = &Credentials{HMACSecret: &r}
				}
			} else {
				p.Fail(strictjson.Child(at, "hmac_secret"), "required for a webhook handler")
			}
		}
	} else {
		p.Fail(strictjson.Child(path, "credentials"), "required for a webhook handler")
	}
}

// callOptions checks the options both HTTP kinds take besides url:
// timeout_sec and allow_addresses.
func (p *problems) callOptions(at string, of strictjson.Fields, o *Options) {
	if t, ok := of["timeout_sec"]; ok {
		n, _ := p.Integer(strictjson.Child(at, "timeout_sec"), t, maxSec)
		o.TimeoutSec = int(n)
	}
	if a, ok := of["allow_addresses"]; ok {
		aat := strictjson.Child(at, "allow_addresses")
		list, _ := p.Strs(aat, a)
		for i, s := range list {
			if _, err := egress.ParsePrefix(s); err != nil {
				p.Fail(strictjson.Index(aat, i), "%s", err.Error())
			}
		}
		if len(list) > 0 {
			o.AllowAddresses = list
		}
	}
}

// webhookURL checks an outbound URL: absolute, http or https, with a host,
// and without user info, which would put a secret in the manifest itself.
func (p *problems) webhookURL(path string, n *strictjson.Node) string {
	s, err := p.NonEmpty(path, n)
	if err != nil {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		// The URL is not echoed: it may hold user info, that is a password.
		p.Fail(path, "must be an absolute http or https URL")
	case u.User != nil:
		p.Fail(path, "must not contain user info; sign with credentials.hmac_secret instead")
	case !validPort(u.Port()):
		p.Fail(path, "has a port out of range 1-65535")
	default:
		return s
	}
	return ""
}

// validPort tells whether a URL's port is absent or 1-65535 (url.Parse
// checks only that it is digits).
func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}
