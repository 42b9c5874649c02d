package handler

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/handler/urltpl"
)

// KafkaSpec configures a kafka handler (SPEC §2.2 "Broker destinations"):
// an idempotent producer (acks=all) that writes one record per call.
type KafkaSpec struct {
	Brokers []string // seed brokers, host:port
	Topic   string
	// Key is a text template; "" keys each record by the event id.
	Key string
	// BodyRef points at the body in the input; "" publishes the whole
	// input. NoBody publishes an empty record.
	BodyRef string
	NoBody  bool
	// TransactionalID makes each publish a transaction of its own (one at a
	// time per binding).
	TransactionalID string
	// TLS connects with TLS; CA, ClientCert and ClientKey (PEM) are its
	// roots and client certificate (either implies TLS).
	TLS                   bool
	CA                    []byte
	ClientCert, ClientKey string
	// SASLMechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) logs in with
	// Username and Password (secret values).
	SASLMechanism, Username, Password string

	Timeout    time.Duration // one publish, until the acknowledgement; 0 is DefaultBrokerTimeout
	MaxPayload int64         // bounds the input; 0 is DefaultMaxPayload
	Guard      *egress.Guard // nil: the default refused ranges only
	Log        zerolog.Logger
}

// kafkaPub is the Runner of a kafka binding: one client, shared by every
// worker; franz-go reconnects with backoff by itself.
type kafkaPub struct {
	spec   KafkaSpec
	key    *urltpl.Text // nil: the event id
	dialer *guardDialer
	cl     *kgo.Client
	log    zerolog.Logger
	stats  BrokerStats
	closed atomic.Bool
	txn    sync.Mutex // a transactional client runs one transaction at a time

	dialled atomic.Bool // some dial to a broker succeeded
	seeds   sync.Once
	seedErr error // the guard's refusal of every seed broker
}

// NewKafka returns a Runner for spec. The client connects at the first
// call.
func NewKafka(spec KafkaSpec) (Runner, error) {
	if len(spec.Brokers) == 0 || spec.Topic == "" {
		return nil, touba.Errorf(touba.ECONFIG, "kafka handler: brokers and topic are required")
	}
	p := &kafkaPub{spec: spec}
	if spec.Key != "" {
		k, err := urltpl.ParseText(spec.Key)
		if err != nil {
			return nil, touba.Errorf(touba.ECONFIG, "kafka handler: key %v", err)
		}
		p.key = k
	}
	orDefault(&p.spec.Timeout, DefaultBrokerTimeout)
	orDefault(&p.spec.MaxPayload, DefaultMaxPayload)
	p.dialer = newGuardDialer(spec.Guard, p.spec.Timeout)
	p.log = spec.Log.With().Str("handler", "kafka").Str("topic", spec.Topic).Logger()
	var tcfg *tls.Config
	if spec.TLS || spec.CA != nil || spec.ClientCert != "" {
		tcfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if spec.CA != nil || spec.ClientCert != "" {
			var err error
			if tcfg, err = tlsConfig(spec.CA, spec.ClientCert, spec.ClientKey); err != nil {
				return nil, err
			}
		}
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(spec.Brokers...),
		kgo.ClientID("touba-trigger"),
		kgo.Dialer(p.dial(tcfg)),
		kgo.DefaultProduceTopic(spec.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordDeliveryTimeout(p.spec.Timeout),
		kgo.UnknownTopicRetries(2),
		kgo.RetryBackoffFn(func(tries int) time.Duration {
			return min(100*time.Millisecond<<min(tries, 5), 2*time.Second)
		}),
	}
	if spec.TransactionalID != "" {
		opts = append(opts, kgo.TransactionalID(spec.TransactionalID))
	}
	switch spec.SASLMechanism {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: spec.Username, Pass: spec.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: spec.Username, Pass: spec.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: spec.Username, Pass: spec.Password}.AsSha512Mechanism()))
	default:
		return nil, touba.Errorf(touba.ECONFIG, "kafka handler: unknown sasl_mechanism %q", spec.SASLMechanism)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "kafka handler: %v", err)
	}
	p.cl = cl
	return p, nil
}

// dial is the client's dialer: through the egress guard, then TLS when set.
func (p *kafkaPub) dial(tcfg *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		c, err := p.dialer.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		if tcfg != nil {
			cfg := tcfg.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName, _, _ = net.SplitHostPort(host)
			}
			tc := tls.Client(c, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			c = tc
		}
		p.dialled.Store(true)
		return c, nil
	}
}

// DedupeWindow is none: Kafka's idempotent producer deduplicates only
// within one producer session, so an unknown publish is always parked.
func (p *kafkaPub) DedupeWindow() (time.Duration, bool) { return 0, true }

// Where names the topic and the header to look for.
func (p *kafkaPub) Where() string {
	return "topic " + p.spec.Topic + " (record header " + HeaderEffectID + ")"
}

// PublishTimeout bounds one publish until its acknowledgement.
func (p *kafkaPub) PublishTimeout() time.Duration { return p.spec.Timeout }

// BrokerStats are the binding's counters.
func (p *kafkaPub) BrokerStats() *BrokerStats { return &p.stats }

// Close closes the client; later calls fail unsent.
func (p *kafkaPub) Close() error {
	if !p.closed.Swap(true) {
		p.cl.Close()
	}
	return nil
}

// record builds a call's record: key, body, headers.
func (p *kafkaPub) record(req *Request) (*kgo.Record, *touba.Error) {
	body, doc, terr := brokerBody(req, p.spec.BodyRef, p.spec.NoBody)
	if terr != nil {
		return nil, terr
	}
	key := req.Context.EventID
	if p.key != nil {
		k, err := p.key.Expand(doc, nil)
		if err != nil {
			return nil, touba.Errorf(touba.EStepInputUnresolved, "key of %s: %v", req.ToolRef, err)
		}
		key = k
	}
	return &kgo.Record{Topic: p.spec.Topic, Key: []byte(key), Value: body, Headers: []kgo.RecordHeader{
		{Key: HeaderEffectID, Value: []byte(effectID(req))},
		{Key: HeaderEventID, Value: []byte(req.Context.EventID)},
		{Key: HeaderTrigger, Value: []byte(req.Context.TriggerRef)},
	}}, nil
}

// Describe is the record a call of req would write, for the journal.
func (p *kafkaPub) Describe(req *Request) (string, *touba.Error) {
	if _, err := p.record(req); err != nil {
		return "", err
	}
	return "KAFKA PRODUCE topic " + p.spec.Topic + " " + HeaderEffectID + ": <effect id>", nil
}

// seedsForbidden is the guard's refusal when it refuses every seed broker
// (checked once, before the first dial), else nil.
func (p *kafkaPub) seedsForbidden(ctx context.Context) error {
	p.seeds.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.spec.Timeout)
		defer cancel()
		var first error
		for _, b := range p.spec.Brokers {
			host, _, _ := net.SplitHostPort(b)
			err := p.dialer.guard.CheckHost(ctx, "tcp", host)
			var fe *egress.ForbiddenError
			if !errors.As(err, &fe) {
				return
			}
			if first == nil {
				first = err
			}
		}
		p.seedErr = first
	})
	return p.seedErr
}

// Call writes req's record and waits for its acknowledgement by all
// in-sync replicas (SPEC §2.2): applied on the ack, not_applied
// BrokerRejected when the broker refuses it, not_applied unsent when no
// broker was ever reached, unknown otherwise.
func (p *kafkaPub) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	if res := refuseUnsent(req, p.closed.Load(), p.spec.MaxPayload); res != nil {
		return res
	}
	rec, terr := p.record(req)
	if terr != nil {
		return fail(req, touba.EffectNotApplied, false, terr)
	}
	if err := p.seedsForbidden(ctx); err != nil {
		p.stats.Rejected.Add(1)
		return unsent(req, touba.EEgressForbidden, "kafka: %v", err)
	}
	if err := context.Cause(ctx); err != nil {
		return unsent(req, touba.EHandlerTimeout, "call cancelled before sending: %v", err)
	}
	if p.spec.TransactionalID != "" {
		p.txn.Lock()
		defer p.txn.Unlock()
		if err := p.cl.BeginTransaction(); err != nil {
			return unsent(req, touba.EHandlerFailed, "kafka: begin transaction: %v", err)
		}
	}
	if err := dispatched(); err != nil {
		if p.spec.TransactionalID != "" {
			p.abort(ctx)
		}
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}
	pctx, cancel := context.WithTimeout(ctx, p.spec.Timeout)
	defer cancel()
	r, err := p.produce(pctx, rec)
	if err == nil && p.spec.TransactionalID != "" {
		err = p.cl.EndTransaction(pctx, kgo.TryCommit)
	}
	if err == nil {
		p.stats.Published.Add(1)
		return brokerApplied(req, "kafka:"+r.Topic+":"+strconv.Itoa(int(r.Partition))+":"+strconv.FormatInt(r.Offset, 10),
			map[string]any{"topic": r.Topic, "partition": r.Partition, "offset": r.Offset})
	}
	if p.spec.TransactionalID != "" {
		p.abort(ctx)
	}
	res := p.judge(req, err)
	if res.Outcome == touba.EffectUnknown {
		p.stats.Unknown.Add(1)
	} else {
		p.stats.Rejected.Add(1)
	}
	p.log.Warn().Str("call_id", req.Context.CallID).Str("code", res.Err.Code).Str("outcome", res.Outcome).Msg("kafka publish failed")
	return res
}

// judge turns a failed produce into its Result.
func (p *kafkaPub) judge(req *Request, err error) *Result {
	var ke *kerr.Error
	switch {
	case !p.dialled.Load():
		// No connection to any broker was ever made: nothing left.
		code := touba.EHandlerFailed
		if fe := p.dialer.forbidden(); fe != nil {
			code, err = touba.EEgressForbidden, fe
		}
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(code, "kafka: no broker reached: %v", err))
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected, "kafka: topic %s does not exist: %v", p.spec.Topic, err))
	case errors.As(err, &ke) && !ke.Retriable:
		// The broker answered with an error that a retry cannot change
		// (authorization, a record too large, an invalid record): not stored.
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected, "kafka refused the record: %v", err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, kgo.ErrRecordTimeout):
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
			"kafka: no acknowledgement within %s", p.spec.Timeout))
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		msg = strings.ReplaceAll(msg, "\n", " ")
	}
	return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed, "kafka: produce ended without an acknowledgement: %s", msg))
}

// produce writes rec and waits for its acknowledgement until ctx ends. An
// idempotent producer keeps retrying a record whose request may have been
// written (failing it could break its sequence), so the call does not wait
// on the client for its end: when ctx ends first, the outcome is unknown
// (the client may still deliver it, deduplicated within its session).
func (p *kafkaPub) produce(ctx context.Context, rec *kgo.Record) (*kgo.Record, error) {
	done := make(chan error, 1)
	p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return rec, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// abort ends a transaction that failed, within the publish timeout: its
// records, if any reached the broker, are then invisible to read_committed
// consumers.
func (p *kafkaPub) abort(ctx context.Context) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.spec.Timeout)
	defer cancel()
	if err := p.cl.AbortBufferedRecords(actx); err != nil {
		p.log.Warn().Err(err).Msg("kafka: cannot abort the buffered records")
	}
	if err := p.cl.EndTransaction(actx, kgo.TryAbort); err != nil {
		p.log.Warn().Err(err).Msg("kafka: cannot abort the transaction")
	}
}
