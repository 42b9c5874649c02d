package handler

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/handler/urltpl"
)

// RabbitMQSpec configures a rabbitmq handler (SPEC §2.2 "Broker
// destinations"): a persistent, mandatory publish on a channel in confirm
// mode, whose message_id is the effect id.
type RabbitMQSpec struct {
	URL string // amqp://host:port/vhost or amqps://...; no user info
	// Exchange is the exchange published to; "" is the default exchange
	// (the routing key is then a queue's name).
	Exchange string
	// RoutingKey is a text template: {/pointer} placeholders, each value one
	// word (see urltpl.EscapeToken).
	RoutingKey string
	// BodyRef points at the body in the input; "" publishes the whole
	// input. NoBody publishes an empty message.
	BodyRef string
	NoBody  bool
	// Username and Password log in (PLAIN; secret values). Without them a
	// client certificate logs in with EXTERNAL, and with neither the
	// broker's default guest login is sent.
	Username, Password string
	// CA, ClientCert and ClientKey (PEM) are the TLS roots and client
	// certificate; TLS is used for an amqps:// URL.
	CA                    []byte
	ClientCert, ClientKey string

	Timeout    time.Duration // one publish, until the broker's confirm; 0 is DefaultBrokerTimeout
	MaxPayload int64         // bounds the input; 0 is DefaultMaxPayload
	Guard      *egress.Guard // nil: the default refused ranges only
	Log        zerolog.Logger
}

// maxRoutingKey is AMQP 0-9-1's bound on a routing key (a short string).
const maxRoutingKey = 255

// rabbitPub is the Runner of a rabbitmq binding: one connection, shared by
// every worker, kept up by a goroutine that reconnects with backoff. Each
// publish takes a channel of its own from a pool (channels are cheap on one
// connection): one message in flight per channel, so its confirm, its
// mandatory return or the channel's closing by the broker is certainly
// this message's, and a channel whose publish did not end cleanly is
// closed, not reused.
type rabbitPub struct {
	spec   RabbitMQSpec
	key    *urltpl.Text
	dialer *guardDialer
	uri    string // the URL dialled (no user info)
	cfg    amqp.Config
	where  string // exchange and routing key, for messages
	log    zerolog.Logger
	stats  BrokerStats
	closed atomic.Bool
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	conn    *amqp.Connection // nil while not connected
	idle    []*pubChannel
	blocked string // the broker's reason while it blocks publishers (a resource alarm)
	lastErr error  // the last connect's error
	refused error  // the broker's refusal of the login or the vhost, at the last connect
}

// pubChannel is one channel in confirm mode and its listeners.
type pubChannel struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	returns  chan amqp.Return
	confirms chan amqp.Confirmation
	closes   chan *amqp.Error
}

// NewRabbitMQ returns a Runner for spec. It tries to connect once before
// returning, then keeps trying in the background with backoff: calls made
// while it is not connected are not_applied, unsent.
func NewRabbitMQ(spec RabbitMQSpec) (Runner, error) {
	key, err := urltpl.ParseText(spec.RoutingKey)
	if err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "rabbitmq handler: routing_key %v", err)
	}
	u, err := url.Parse(spec.URL)
	if err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Hostname() == "" || u.User != nil {
		return nil, touba.Errorf(touba.ECONFIG, "rabbitmq handler: url must be amqp://host:port/vhost or amqps://host:port/vhost")
	}
	if _, err := amqp.ParseURI(spec.URL); err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "rabbitmq handler: url: %v", err)
	}
	orDefault(&spec.Timeout, DefaultBrokerTimeout)
	orDefault(&spec.MaxPayload, DefaultMaxPayload)
	p := &rabbitPub{spec: spec, key: key, dialer: newGuardDialer(spec.Guard, spec.Timeout), uri: spec.URL,
		done: make(chan struct{}), where: rabbitWhere(spec.Exchange, spec.RoutingKey)}
	p.log = spec.Log.With().Str("handler", "rabbitmq").Str("url", u.Scheme+"://"+u.Host+u.EscapedPath()).
		Str("exchange", spec.Exchange).Logger()
	p.cfg = amqp.Config{
		Dial: p.dial,
		// A connection that carries nothing (black-holed: no reset) ends
		// after three heartbeats unheard: 15 s at 5 s, the floor RabbitMQ's
		// guide advises, where amqp091's 10 s took 30-40 s, every publish
		// meanwhile unconfirmed.
		Heartbeat:  rabbitHeartbeat,
		Properties: amqp.Table{"connection_name": "touba-trigger", "product": "touba-trigger"},
	}
	switch {
	case spec.Username != "":
		p.cfg.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: spec.Username, Password: spec.Password}}
	case spec.ClientCert != "":
		p.cfg.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	}
	if u.Scheme == "amqps" || spec.CA != nil || spec.ClientCert != "" {
		if u.Scheme != "amqps" {
			return nil, touba.Errorf(touba.ECONFIG, "rabbitmq handler: ca_file and a client certificate need an amqps:// url")
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if spec.CA != nil || spec.ClientCert != "" {
			if cfg, err = tlsConfig(spec.CA, spec.ClientCert, spec.ClientKey); err != nil {
				return nil, err
			}
		}
		p.cfg.TLSClientConfig = cfg
	}
	first := make(chan struct{})
	p.wg.Add(1)
	go p.keep(first)
	select {
	case <-first:
	case <-time.After(spec.Timeout + time.Second):
	}
	return p, nil
}

// rabbitWhere names an exchange (the default one by its AMQP name) and a
// routing key, for messages and check.
func rabbitWhere(exchange, key string) string {
	if exchange == "" {
		exchange = "(default)"
	}
	return "exchange " + exchange + " routing key " + key
}

// dial is the connection's dialer: through the egress guard, with a
// deadline for the TLS and AMQP handshakes (the library clears it once the
// connection is open).
func (p *rabbitPub) dial(network, addr string) (net.Conn, error) {
	c, err := p.dialer.DialContext(context.Background(), network, addr)
	if err != nil {
		return nil, err
	}
	if err := c.SetDeadline(time.Now().Add(p.spec.Timeout)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// DedupeWindow is none: RabbitMQ never drops a message published again, so
// an unknown publish is always parked (SPEC §2.2).
func (p *rabbitPub) DedupeWindow() (time.Duration, bool) { return 0, true }

// Where names the exchange, the routing key and what to look for.
func (p *rabbitPub) Where() string {
	return "the queues bound to " + p.where + " (message_id, header " + HeaderEffectID + ")"
}

// PublishTimeout bounds one publish until its confirm.
func (p *rabbitPub) PublishTimeout() time.Duration { return p.spec.Timeout }

// BrokerStats are the binding's counters.
func (p *rabbitPub) BrokerStats() *BrokerStats { return &p.stats }

// Ready tells whether the connection is up and not blocked.
func (p *rabbitPub) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed.Load() && p.conn != nil && p.blocked == ""
}

// Close closes the connection and stops reconnecting; later calls fail
// unsent.
func (p *rabbitPub) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	close(p.done)
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	p.wg.Wait()
	return nil
}

// message builds a call's message: the routing key from the template, the
// body, the properties.
func (p *rabbitPub) message(req *Request) (string, amqp.Publishing, *touba.Error) {
	body, doc, terr := brokerBody(req, p.spec.BodyRef, p.spec.NoBody)
	if terr != nil {
		return "", amqp.Publishing{}, terr
	}
	key, err := p.key.Expand(doc, urltpl.EscapeToken)
	if err != nil {
		return "", amqp.Publishing{}, touba.Errorf(touba.EStepInputUnresolved, "routing key of %s: %v", req.ToolRef, err)
	}
	if len(key) > maxRoutingKey {
		return "", amqp.Publishing{}, touba.Errorf(touba.EStepInputUnresolved, "routing key of %s is %d bytes, over AMQP's %d",
			req.ToolRef, len(key), maxRoutingKey)
	}
	id := effectID(req)
	m := amqp.Publishing{
		Headers:      amqp.Table{HeaderEffectID: id, HeaderEventID: req.Context.EventID, HeaderTrigger: req.Context.TriggerRef},
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		AppId:        "touba-trigger",
		Body:         body,
	}
	if !p.spec.NoBody {
		m.ContentType = "application/json"
	}
	return key, m, nil
}

// Describe is the publish a call of req would send, for the journal.
func (p *rabbitPub) Describe(req *Request) (string, *touba.Error) {
	key, _, err := p.message(req)
	if err != nil {
		return "", err
	}
	return "AMQP PUBLISH " + rabbitWhere(p.spec.Exchange, key) + " mandatory persistent message_id: <effect id>", nil
}
