package manifest

import (
	"net/url"
	"strings"

	"github.com/touba/touba-trigger/handler/urltpl"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// rabbitmq checks a rabbitmq handler: options (url, exchange,
// routing_key, ...) and credentials (username and password, a client
// certificate; no token).
func (p *problems) rabbitmq(path string, f strictjson.Fields, h *Handler) {
	n, ok := f["options"]
	if !ok {
		p.Fail(strictjson.Child(path, "options"), "required for a rabbitmq handler")
	} else {
		at := strictjson.Child(path, "options")
		if of, _ := p.Object(at, n, rabbitOptions, "url"); of != nil {
			o := &Options{TimeoutSec: DefaultWebhookTimeoutSec}
			if u, ok := of["url"]; ok {
				o.URL = p.amqpURL(strictjson.Child(at, "url"), u)
			}
			if e, ok := of["exchange"]; ok {
				eat := strictjson.Child(at, "exchange")
				if v, err := p.Str(eat, e); err == nil {
					if v != "" && !exchangeName.MatchString(v) {
						p.Fail(eat, "must be a RabbitMQ exchange name (letters, digits, -, _, . and :), or \"\" for the default exchange")
					} else {
						o.Exchange = v
					}
				}
			}
			if k, ok := of["routing_key"]; ok {
				kat := strictjson.Child(at, "routing_key")
				if v, err := p.Str(kat, k); err == nil {
					if t, err := urltpl.ParseText(v); err != nil {
						p.Fail(kat, "%s", err.Error())
					} else if len(sample(t)) > 255 {
						p.Fail(kat, "is longer than AMQP's 255 bytes")
					} else {
						o.RoutingKey = v
					}
				}
			}
			if o.Exchange == "" && o.RoutingKey == "" {
				p.Fail(at, "names neither an exchange nor a routing_key (the default exchange needs a queue's name as routing_key)")
			}
			p.brokerCommon(at, of, o)
			h.Options = o
		}
	}
	p.brokerCredentials(path, f, h, false)
	if o, c := h.Options, h.Credentials; o != nil && strings.HasPrefix(o.URL, "amqp://") &&
		(o.CAFile != "" || c != nil && c.ClientCertificate != nil) {
		p.Fail(strictjson.Child(strictjson.Child(path, "options"), "url"), "must be amqps:// with a ca_file or a client certificate")
	}
}

// amqpURL checks a rabbitmq binding's url: amqp:// or amqps://, a host, no
// user info (credentials come from secrets), at most a vhost as its path,
// no query.
func (p *problems) amqpURL(path string, n *strictjson.Node) string {
	s, err := p.NonEmpty(path, n)
	if err != nil {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Hostname() == "" || u.Opaque != "":
		p.Fail(path, "must be an amqp://host:port/vhost or amqps://host:port/vhost URL")
	case u.User != nil:
		p.Fail(path, "must not contain user info; use credentials.username and credentials.password from secrets")
	case !validPort(u.Port()):
		p.Fail(path, "has a port out of range 1-65535")
	case strings.Count(u.EscapedPath(), "/") > 1:
		p.Fail(path, "has a path of more than one segment (the path is the vhost; write / in a vhost's name as %%2F)")
	case u.RawQuery != "" || u.Fragment != "":
		p.Fail(path, "must not have a query or a fragment")
	default:
		return s
	}
	return ""
}
