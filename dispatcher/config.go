package dispatcher

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/manifest"
	"github.com/touba/touba-trigger/trigger"
	"github.com/touba/touba-trigger/worker"
)

// Binding is one tool binding ready to call.
type Binding struct {
	Ref          string
	Contract     manifest.EffectContract
	Grants       []string
	Timeout      time.Duration
	Runner       handler.Runner
	Compensation bool // the binding declares compensation support
	// MaxConcurrency bounds the binding's calls in flight across workers;
	// 0 is no bound (slots.go).
	MaxConcurrency int
	// Circuit is the binding's circuit breaker; zero is none (circuit.go).
	Circuit CircuitConfig
	// OneCommit: the journal writes prepared and dispatched in one commit
	// (step.go, docs/performance.md "Prepared and dispatched in one
	// commit"). For the daemon's own code (accounting_stub), where no
	// process starts and no request leaves between them; and for a nats
	// binding under idempotency_key, where a crash between them reads
	// unknown and is published again under the same message id inside the
	// stream's duplicate window (window.go): no availability cost, and one
	// fsync wait fewer inside the binding's max_concurrency slot (issue 47).
	OneCommit bool
}

// ExternalWrite reports whether calls of b go through the journal.
func (b *Binding) ExternalWrite() bool { return b.Contract.Kind == touba.ContractExternalWrite }

// Config is the program and its bindings, swapped whole on reload.
type Config struct {
	Program  *trigger.Program
	Bindings map[string]*Binding
	Secrets  *secret.Set // values nothing stored may hold

	templates sync.Map // templateKey -> *template
}

// Stubs keeps accounting_stub instances across reloads, so their
// in-memory dedupe and counts survive a SIGHUP.
type Stubs struct {
	byRef map[string]*handler.AccountingStub
	// Workers is where worker bindings' calls wait for the workers that
	// connect out (SPEC §4.3); nil where no worker can connect (the CLI
	// without a daemon): their calls are then refused unsent.
	Workers *worker.Hub
}

// Stub returns the stub of ref, creating it once.
func (s *Stubs) Stub(ref string) *handler.AccountingStub {
	if s.byRef == nil {
		s.byRef = map[string]*handler.AccountingStub{}
	}
	if st, ok := s.byRef[ref]; ok {
		return st
	}
	st := handler.NewAccountingStub()
	s.byRef[ref] = st
	return st
}

// Outbound is the daemon-wide policy of the webhook and http bindings'
// calls.
type Outbound struct {
	// EgressDeny adds ranges the egress guard refuses (--egress-deny).
	EgressDeny []netip.Prefix
}

// NewConfig builds a runner for every binding of m. It fails, before
// anything runs, when an external_write binding exists and journaled is
// false (SPEC §2.2, EffectJournalRequired).
func NewConfig(p *trigger.Program, m *manifest.Manifest, res *manifest.Resolved, journaled bool, stubs *Stubs, out Outbound,
	log zerolog.Logger) (*Config, error) {
	if ew := m.ExternalWrites(); len(ew) > 0 && !journaled {
		return nil, touba.Errorf(touba.EEffectJournalRequired,
			"binding %s is an external_write and no --effect-journal is set", strings.Join(ew, ", "))
	}
	c := &Config{Program: p, Bindings: map[string]*Binding{}, Secrets: res.Values}
	refs := slices.Sorted(maps.Keys(m.Bindings))
	for _, ref := range refs {
		b := m.Bindings[ref]
		bl := log.With().Str("tool_ref", ref).Logger()
		var r handler.Runner
		var err error
		switch b.Handler.Kind {
		case manifest.KindProcess:
			spec := handler.ProcessSpec{Command: b.Handler.Command, Args: b.Handler.Args,
				Dir: m.WorkDir(b), Secrets: res.Env[ref], Grants: b.Grants, Timeout: b.Timeout(),
				MaxPayload: b.MaxPayloadBytes, Log: bl}
			if ps := b.Handler.Persistent; ps != nil {
				r, err = handler.NewPersistent(spec, handler.PersistentOptions{MaxInFlight: ps.MaxInFlight,
					MaxCalls: ps.MaxCalls, IdleTimeout: time.Duration(ps.IdleTimeoutMS) * time.Millisecond})
			} else {
				r, err = handler.NewProcess(spec)
			}
		case manifest.KindWebhook:
			r, err = handler.NewWebhook(handler.WebhookSpec{URL: b.Handler.Options.URL, HMACSecret: []byte(res.HMAC[ref]),
				Limits: callLimits(b), Outbound: out.guarded(b.Handler.Options), Log: bl})
		case manifest.KindHTTP:
			r, err = handler.NewHTTP(httpSpec(b, res.Env[ref], res.TLS[ref], out.guarded(b.Handler.Options), bl))
		case manifest.KindNATS:
			r, err = handler.NewNATS(natsSpec(b, res.Login[ref], res.TLS[ref], out.guarded(b.Handler.Options), bl))
		case manifest.KindKafka:
			r, err = handler.NewKafka(kafkaSpec(b, res.Login[ref], res.TLS[ref], out.guarded(b.Handler.Options), bl))
		case manifest.KindRabbitMQ:
			r, err = handler.NewRabbitMQ(rabbitSpec(b, res.Login[ref], res.TLS[ref], out.guarded(b.Handler.Options), bl))
		case manifest.KindAccountingStub:
			r = stubs.Stub(ref)
		case manifest.KindWorker:
			r = worker.NewRunner(stubs.Workers, worker.Spec{Ref: ref, Token: res.Worker[ref], Timeout: b.Timeout(),
				MaxPayload: b.MaxPayloadBytes})
		default:
			err = fmt.Errorf("unknown handler kind %q", b.Handler.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("binding %s: %w", ref, err)
		}
		maxConc := b.MaxConcurrency
		if maxConc == 0 && b.Handler.Kind == manifest.KindProcess && b.Handler.Persistent == nil {
			maxConc = DefaultProcessConcurrency
		}
		c.Bindings[ref] = &Binding{Ref: ref, Contract: b.EffectContract, Grants: b.Grants, Timeout: b.Timeout(),
			Runner: r, Compensation: b.Compensation != nil && b.Compensation.Supported, MaxConcurrency: maxConc,
			OneCommit: b.Handler.Kind == manifest.KindAccountingStub ||
				b.Handler.Kind == manifest.KindNATS && b.EffectContract.RetryMode == touba.RetryIdempotencyKey,
			Circuit: circuitOf(b.Circuit)}
	}
	return c, nil
}

// trigger returns the trigger of ref in c.
func (c *Config) trigger(ref string) (*trigger.Trigger, bool) {
	return c.Program.Lookup(strings.TrimPrefix(ref, "trigger:"))
}

// CloseRunners closes the runners of c that next does not use any more,
// after a reload swapped next in (persistent handler processes of the old
// configuration then exit instead of lingering until their idle timeout).
// A run still using the old configuration has its in-flight calls
// answered; a later call on a closed runner is refused unsent and retried.
// With next nil every runner is closed, at shutdown.
func (c *Config) CloseRunners(next *Config) {
	if c == nil {
		return
	}
	kept := map[any]bool{}
	if next != nil {
		for _, b := range next.Bindings {
			kept[b.Runner] = true
		}
	}
	for _, b := range c.Bindings {
		if !kept[b.Runner] {
			b.Runner.Close()
		}
	}
}

// circuitOf is a manifest circuit as the dispatcher counts it.
func circuitOf(c *manifest.Circuit) CircuitConfig {
	if c == nil {
		return CircuitConfig{}
	}
	return CircuitConfig{FailureRatio: c.FailureRatio, MinCalls: c.MinCalls,
		Window: time.Duration(c.WindowMS) * time.Millisecond, Open: time.Duration(c.OpenMS) * time.Millisecond}
}
