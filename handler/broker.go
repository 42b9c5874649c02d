package handler

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/egress"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// The broker kinds (SPEC §2.2 "Broker destinations": nats, kafka) publish a
// call's input as one message. What they share is here: the message body,
// the egress-guarded dialer, the counters the metrics read, and the dedupe
// window a broker reports to the dispatcher.

// Headers every broker message carries besides the broker's own
// deduplication id (NATS's Nats-Msg-Id).
const (
	HeaderEffectID = "touba-effect-id"
	HeaderEventID  = "touba-event-id"
	HeaderTrigger  = "touba-trigger"
)

// DefaultBrokerTimeout bounds one publish, from sending to the broker's
// acknowledgement, when a spec names none.
const DefaultBrokerTimeout = 10 * time.Second

// rabbitHeartbeat is the AMQP heartbeat a rabbitmq connection asks for.
const rabbitHeartbeat = 5 * time.Second

// DedupeWindower is a broker runner that knows how long its broker drops a
// message published again with the same id (SPEC §2.2 "Dedupe windows"):
// the dispatcher re-sends an unknown publish only while first dispatch +
// window − Timeout has not passed. known is false while the window has not
// been read (the broker not reached yet); a window of 0 is a broker with
// none across sessions (Kafka): every unknown is parked.
type DedupeWindower interface {
	DedupeWindow() (window time.Duration, known bool)
	// Where is what an operator looks in for a parked publish ("stream
	// ORDERS", "topic orders").
	Where() string
}

// BrokerStats counts one broker binding's publishes (SPEC §7 metrics).
type BrokerStats struct {
	Published  atomic.Int64 // acknowledged, duplicates included
	Duplicates atomic.Int64 // acknowledged as a duplicate of an earlier publish
	Rejected   atomic.Int64 // refused by the broker (BrokerRejected) or the guard
	Unknown    atomic.Int64 // sent, no acknowledgement
}

// BrokerStatser is a broker runner whose counters the metrics read.
type BrokerStatser interface {
	BrokerStats() *BrokerStats
}

// brokerBody is the message body of a call: the whole input, or the value at
// ref (JSON), or none.
func brokerBody(req *Request, ref string, none bool) ([]byte, any, *touba.Error) {
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, touba.Errorf(touba.EStepInputUnresolved, "input of %s is not JSON: %v", req.ToolRef, err)
	}
	switch {
	case none:
		return []byte{}, doc, nil
	case ref == "":
		return []byte(input), doc, nil
	}
	v, err := jsonptr.Get(doc, ref)
	if err != nil {
		return nil, nil, touba.Errorf(touba.EStepInputUnresolved, "body of %s: $ref %q resolves to nothing", req.ToolRef, ref)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, nil, touba.Errorf(touba.EStepInputUnresolved, "body of %s: %v", req.ToolRef, err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), doc, nil
}

// guardDialer dials through the egress guard (SPEC §2.2: the guard applies
// to a broker's addresses): the name is resolved here, every address is
// checked, and only a checked address is dialled. It keeps the last dial
// error, so a call made while the client cannot connect can say why
// (EgressForbidden for a refused address).
type guardDialer struct {
	guard   *egress.Guard
	timeout time.Duration
	mu      sync.Mutex
	last    error
}

func newGuardDialer(g *egress.Guard, timeout time.Duration) *guardDialer {
	if g == nil {
		g = &egress.Guard{}
	}
	return &guardDialer{guard: g, timeout: timeout}
}

// DialContext dials address through the guard.
func (d *guardDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	c, err := d.guard.DialContext(ctx, network, address)
	d.mu.Lock()
	d.last = err
	d.mu.Unlock()
	return c, err
}

// Dial is DialContext without a context (nats.CustomDialer).
func (d *guardDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// forbidden is the last dial's refusal by the guard, or nil.
func (d *guardDialer) forbidden() *egress.ForbiddenError {
	d.mu.Lock()
	defer d.mu.Unlock()
	var fe *egress.ForbiddenError
	if errors.As(d.last, &fe) {
		return fe
	}
	return nil
}

// lastError is the last dial's error, or nil.
func (d *guardDialer) lastError() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// unsent is the Result of a publish that was refused before anything was
// sent.
func unsent(req *Request, code, format string, args ...any) *Result {
	return fail(req, touba.EffectNotApplied, false, touba.Errorf(code, format, args...))
}

// brokerApplied is the Result of an acknowledged publish.
func brokerApplied(req *Request, receipt string, output any) *Result {
	out, err := json.Marshal(output)
	if err != nil {
		return fail(req, touba.EffectUnknown, true, touba.Errorf(touba.EINTERNAL, "encode the acknowledgement: %v", err))
	}
	res := &Result{OK: true, Output: out, Dispatched: true, ReceiptRef: receipt}
	if req.Context.Effect != nil {
		res.Outcome = touba.EffectApplied
	}
	return cleanAnswer(res)
}
