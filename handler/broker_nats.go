package handler

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/handler/urltpl"
)

// NATSSpec configures a nats handler (SPEC §2.2 "Broker destinations"): a
// JetStream publish whose Nats-Msg-Id is the effect id.
type NATSSpec struct {
	URL     string // nats://host:port or tls://host:port
	Subject string // a text template: {/pointer} placeholders, each value one token
	Stream  string // the stream the subject belongs to; its duplicate_window is read
	// BodyRef points at the body in the input; "" publishes the whole
	// input. NoBody publishes an empty message.
	BodyRef string
	NoBody  bool
	// Username and Password, or Token, log in (secret values).
	Username, Password, Token string
	// CA, ClientCert and ClientKey (PEM) are the TLS roots and client
	// certificate; TLS is used for a tls:// URL or when any is set.
	CA                    []byte
	ClientCert, ClientKey string

	Timeout    time.Duration // one publish, until the acknowledgement; 0 is DefaultBrokerTimeout
	MaxPayload int64         // bounds the input; 0 is DefaultMaxPayload
	Guard      *egress.Guard // nil: the default refused ranges only
	Log        zerolog.Logger
}

// natsPub is the Runner of a nats binding: one connection, shared by every
// worker, that reconnects with backoff by itself.
type natsPub struct {
	spec    NATSSpec
	subject *urltpl.Text
	dialer  *guardDialer
	nc      *nats.Conn
	js      jetstream.JetStream
	log     zerolog.Logger
	stats   BrokerStats
	closed  atomic.Bool

	window     atomic.Int64 // the stream's duplicate_window, ns; valid when windowRead
	windowRead atomic.Bool
	reading    sync.Mutex  // one read of the window at a time
	probing    atomic.Bool // a probe of the connection is under way (broker_nats_probe.go)
}

// NewNATS returns a Runner for spec. It connects in the background: a
// broker that cannot be reached at start is tried again with backoff, and
// calls made meanwhile are not_applied, unsent.
func NewNATS(spec NATSSpec) (Runner, error) {
	subject, err := urltpl.ParseText(spec.Subject)
	if err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "nats handler: subject %v", err)
	}
	u, err := url.Parse(spec.URL)
	if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Hostname() == "" {
		return nil, touba.Errorf(touba.ECONFIG, "nats handler: url must be nats://host:port or tls://host:port")
	}
	orDefault(&spec.Timeout, DefaultBrokerTimeout)
	orDefault(&spec.MaxPayload, DefaultMaxPayload)
	p := &natsPub{spec: spec, subject: subject, dialer: newGuardDialer(spec.Guard, spec.Timeout),
		log: spec.Log.With().Str("handler", "nats").Str("url", u.Scheme+"://"+u.Host).Str("stream", spec.Stream).Logger()}
	opts := []nats.Option{
		nats.Name("touba-trigger"),
		nats.SetCustomDialer(p.dialer),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			return min(100*time.Millisecond<<min(attempts, 6), 5*time.Second)
		}),
		// No buffering while reconnecting: a publish made then fails at
		// once and certainly never left (not_applied), instead of leaving
		// later, after its call has ended.
		nats.ReconnectBufSize(-1),
		nats.Timeout(spec.Timeout),
		// A connection that answers nothing (black-holed: no reset) is
		// found by pings; nats.go's default (2 min, two outstanding) left
		// publishes timing out for 4-6 min. A publish that times out
		// probes at once (broker_nats_probe.go).
		nats.PingInterval(natsPingInterval),
		nats.MaxPingsOutstanding(2),
		nats.ConnectHandler(func(*nats.Conn) { p.connected("connected") }),
		nats.ReconnectHandler(func(*nats.Conn) { p.connected("reconnected") }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				p.log.Warn().Err(err).Msg("nats connection lost; reconnecting")
			}
		}),
	}
	if spec.Username != "" {
		opts = append(opts, nats.UserInfo(spec.Username, spec.Password))
	}
	if spec.Token != "" {
		opts = append(opts, nats.Token(spec.Token))
	}
	if u.Scheme == "tls" || spec.CA != nil || spec.ClientCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if spec.CA != nil || spec.ClientCert != "" {
			if cfg, err = tlsConfig(spec.CA, spec.ClientCert, spec.ClientKey); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.Secure(cfg))
	}
	server := u.Host
	if u.Port() == "" {
		server += ":4222"
	}
	scheme := "nats://"
	if u.Scheme == "tls" {
		scheme = "tls://"
	}
	// The connect callback may run (readWindow, on nats.go's goroutine)
	// before Connect returns: it waits on reading until p.nc and p.js
	// are set.
	p.reading.Lock()
	nc, err := nats.Connect(scheme+server, opts...)
	if err != nil {
		p.reading.Unlock()
		return nil, touba.Errorf(touba.ECONFIG, "nats handler: %v", err)
	}
	p.nc = nc
	p.js, err = jetstream.New(nc)
	p.reading.Unlock()
	if err != nil {
		nc.Close()
		return nil, touba.Errorf(touba.ECONFIG, "nats handler: %v", err)
	}
	if nc.IsConnected() {
		p.connected("connected")
	}
	return p, nil
}

// connected reads the stream's duplicate_window after a connect or a
// reconnect (the stream may have been changed meanwhile), in the
// background: a connection callback must not wait on a request.
func (p *natsPub) connected(how string) {
	p.log.Info().Msg("nats " + how)
	go p.readWindow()
}

// readWindow asks the stream for its duplicate_window.
func (p *natsPub) readWindow() {
	p.reading.Lock()
	defer p.reading.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.spec.Timeout)
	defer cancel()
	s, err := p.js.Stream(ctx, p.spec.Stream)
	if err != nil {
		p.log.Warn().Err(err).Msg("cannot read the stream's duplicate_window; an unknown publish is parked until it is read")
		return
	}
	w := s.CachedInfo().Config.Duplicates
	old := time.Duration(p.window.Swap(int64(w)))
	if !p.windowRead.Swap(true) || old != w {
		p.log.Info().Dur("duplicate_window", w).Msg("nats stream duplicate_window read")
	}
}

// DedupeWindow is the stream's duplicate_window as last read.
func (p *natsPub) DedupeWindow() (time.Duration, bool) {
	if !p.windowRead.Load() && !p.closed.Load() && p.nc.IsConnected() {
		p.readWindow()
	}
	return time.Duration(p.window.Load()), p.windowRead.Load()
}

// Where names the stream.
func (p *natsPub) Where() string { return "stream " + p.spec.Stream }

// BrokerStats are the binding's counters.
func (p *natsPub) BrokerStats() *BrokerStats { return &p.stats }

// Close closes the connection; later calls fail unsent.
func (p *natsPub) Close() error {
	if !p.closed.Swap(true) {
		p.nc.Close()
	}
	return nil
}

// message builds a call's message: the subject from the template, the body,
// the headers.
func (p *natsPub) message(req *Request) (*nats.Msg, *touba.Error) {
	body, doc, terr := brokerBody(req, p.spec.BodyRef, p.spec.NoBody)
	if terr != nil {
		return nil, terr
	}
	subj, err := p.subject.Expand(doc, urltpl.EscapeToken)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "subject of %s: %v", req.ToolRef, err)
	}
	m := nats.NewMsg(subj)
	m.Data = body
	id := effectID(req)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(HeaderEffectID, id)
	m.Header.Set(HeaderEventID, req.Context.EventID)
	m.Header.Set(HeaderTrigger, req.Context.TriggerRef)
	return m, nil
}

// Describe is the publish a call of req would send, for the journal.
func (p *natsPub) Describe(req *Request) (string, *touba.Error) {
	m, err := p.message(req)
	if err != nil {
		return "", err
	}
	return "NATS PUBLISH " + m.Subject + " stream " + p.spec.Stream + " Nats-Msg-Id: <effect id>", nil
}

// Call publishes req's message and waits for the stream's acknowledgement
// (SPEC §2.2): applied on an ack (a duplicate ack too), not_applied
// BrokerRejected when the broker refuses it, not_applied unsent when there
// is no connection, unknown when the connection is lost after publishing or
// no ack comes within the timeout.
func (p *natsPub) Call(ctx context.Context, req *Request, dispatched func() error) *Result {
	if res := refuseUnsent(req, p.closed.Load(), p.spec.MaxPayload); res != nil {
		return res
	}
	m, terr := p.message(req)
	if terr != nil {
		return fail(req, touba.EffectNotApplied, false, terr)
	}
	log := p.log.With().Str("call_id", req.Context.CallID).Str("subject", m.Subject).Logger()
	if !p.nc.IsConnected() {
		if fe := p.dialer.forbidden(); fe != nil {
			p.stats.Rejected.Add(1)
			return unsent(req, touba.EEgressForbidden, "nats %s: %v", p.spec.Stream, fe)
		}
		if err := p.nc.LastError(); errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) {
			p.stats.Rejected.Add(1)
			return unsent(req, touba.EBrokerRejected, "nats refused the login: %v", err)
		}
		why := "not connected"
		if err := p.dialer.lastError(); err != nil {
			why += ": " + err.Error()
		}
		return unsent(req, touba.EHandlerFailed, "nats %s", why)
	}
	if err := context.Cause(ctx); err != nil {
		return unsent(req, touba.EHandlerTimeout, "call cancelled before sending: %v", err)
	}
	if err := dispatched(); err != nil {
		return fail(req, touba.EffectNotApplied, false, hookError(err))
	}
	pctx, cancel := context.WithTimeout(ctx, p.spec.Timeout)
	defer cancel()
	ack, err := p.js.PublishMsg(pctx, m, jetstream.WithExpectStream(p.spec.Stream), jetstream.WithRetryAttempts(2),
		jetstream.WithRetryWait(250*time.Millisecond))
	if err == nil {
		p.stats.Published.Add(1)
		if ack.Duplicate {
			p.stats.Duplicates.Add(1)
			log.Info().Str("effect_id", effectID(req)).Uint64("seq", ack.Sequence).
				Msg("nats acknowledged a duplicate: the stream already held this effect id")
		}
		return brokerApplied(req, "nats:"+ack.Stream+":"+strconv.FormatUint(ack.Sequence, 10), map[string]any{
			"stream": ack.Stream, "seq": ack.Sequence, "duplicate": ack.Duplicate, "subject": m.Subject})
	}
	res := p.judge(req, err)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		go p.probe()
	}
	if res.Outcome == touba.EffectUnknown || req.Context.Effect == nil && res.Err.Code == touba.EHandlerTimeout {
		p.stats.Unknown.Add(1)
	} else {
		p.stats.Rejected.Add(1)
	}
	log.Warn().Str("code", res.Err.Code).Str("outcome", res.Outcome).Msg("nats publish failed")
	return res
}

// judge turns a failed publish into its Result.
func (p *natsPub) judge(req *Request, err error) *Result {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// Nothing listens on the subject: no stream took the message.
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected,
			"nats: no stream for subject (stream %s): %v", p.spec.Stream, err))
	case errors.As(err, &apiErr):
		// The stream answered with an error: it did not store the message.
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected,
			"nats stream %s refused the message: %s (err_code %d)", p.spec.Stream, apiErr.Description, apiErr.ErrorCode))
	case errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrInvalidMsg), errors.Is(err, nats.ErrHeadersNotSupported):
		// Refused by the client before writing anything.
		code := touba.EHandlerFailed
		if !errors.Is(err, nats.ErrReconnectBufExceeded) {
			code = touba.EBrokerRejected
		}
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(code, "nats: not sent: %v", err))
	case errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrAuthorization):
		return fail(req, touba.EffectNotApplied, true, touba.Errorf(touba.EBrokerRejected, "nats: %v", err))
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerTimeout,
			"nats: no acknowledgement from stream %s within %s", p.spec.Stream, p.spec.Timeout))
	}
	return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EHandlerFailed,
		"nats: publish to stream %s ended without an acknowledgement: %v", p.spec.Stream, err))
}

// Ready tells whether the connection is up, so a publish can leave now.
func (p *natsPub) Ready() bool { return !p.closed.Load() && p.nc.IsConnected() }

// PublishTimeout bounds one publish until its acknowledgement.
func (p *natsPub) PublishTimeout() time.Duration { return p.spec.Timeout }

// ReadNATSWindow connects once to spec's server (through the egress guard,
// without retrying), reads the duplicate_window of spec.Stream and
// disconnects: what `check` prints.
func ReadNATSWindow(ctx context.Context, spec NATSSpec) (time.Duration, error) {
	orDefault(&spec.Timeout, DefaultBrokerTimeout)
	u, err := url.Parse(spec.URL)
	if err != nil || u.Hostname() == "" {
		return 0, errors.New("bad url")
	}
	d := newGuardDialer(spec.Guard, spec.Timeout)
	opts := []nats.Option{nats.Name("touba-trigger check"), nats.SetCustomDialer(d), nats.NoReconnect(), nats.Timeout(spec.Timeout)}
	if spec.Username != "" {
		opts = append(opts, nats.UserInfo(spec.Username, spec.Password))
	}
	if spec.Token != "" {
		opts = append(opts, nats.Token(spec.Token))
	}
	if u.Scheme == "tls" || spec.CA != nil || spec.ClientCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if spec.CA != nil || spec.ClientCert != "" {
			if cfg, err = tlsConfig(spec.CA, spec.ClientCert, spec.ClientKey); err != nil {
				return 0, err
			}
		}
		opts = append(opts, nats.Secure(cfg))
	}
	server := u.Host
	if u.Port() == "" {
		server += ":4222"
	}
	nc, err := nats.Connect(u.Scheme+"://"+server, opts...)
	if err != nil {
		if fe := d.forbidden(); fe != nil {
			return 0, fe
		}
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	s, err := js.Stream(ctx, spec.Stream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().Config.Duplicates, nil
}
