// Package manifest loads touba.manifest.json (`touba-manifest-v1`, SPEC
// §2.2): the tool bindings that program steps call. Loading is strict: an
// unknown field, kind or mode, a missing or null contract, a bad value or
// trailing data is refused with a *ConfigError naming the file, the JSON
// path and the rule, before any handler runs. Resolve turns the bindings'
// secret references into values for start-up. The package runs nothing.
package manifest

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"

	"github.com/touba/touba-trigger/internal/strictjson"
)

// Version is the only manifest_version this package reads.
const Version = "touba-manifest-v1"

// Handler kinds.
const (
	KindProcess        = "process"
	KindWebhook        = "webhook"
	KindHTTP           = "http"
	KindAccountingStub = "accounting_stub"
)

// Grants a binding may list. Only GrantNetwork is enforced by the host (a
// process handler without it runs in its own network namespace where Linux
// allows); every grant is passed to the handler in context.grants so that a
// handler SDK can refuse a tool whose required grants are missing.
const (
	GrantNetwork    = "network"
	GrantFilesystem = "filesystem"
	GrantEnv        = "env"
)

// KnownGrants lists the accepted grants, sorted.
var KnownGrants = []string{GrantEnv, GrantFilesystem, GrantNetwork}

// Defaults applied when a field is absent.
const (
	DefaultTimeoutMS         = 30000
	maxConcurrency           = 10000
	DefaultMaxPayloadBytes   = 1048576
	DefaultWebhookTimeoutSec = 10
	DefaultMaxInFlight       = 16
	DefaultMaxCalls          = 100000
	DefaultIdleTimeoutMS     = 60000
	DefaultCwd               = "."
)

// Manifest is a loaded touba.manifest.json. Its JSON encoding is the
// manifest with every default written out, and loads back to the same value.
type Manifest struct {
	Path     string              `json:"-"` // the file as named to Load or Parse
	Dir      string              `json:"-"` // its folder, absolute; process cwd is relative to it
	Version  string              `json:"manifest_version"`
	Bindings map[string]*Binding `json:"bindings"` // key: tool ref "tool:..."
}

// Binding is what one tool ref runs and what it promises about effects.
type Binding struct {
	Ref             string                `json:"-"`
	Handler         Handler               `json:"handler"`
	Grants          []string              `json:"grants"` // never nil
	TimeoutMS       int                   `json:"timeout_ms"`
	MaxPayloadBytes int64                 `json:"max_payload_bytes"`
	Secrets         map[string]secret.Ref `json:"secrets,omitempty"` // env var name -> reference; never nil
	EffectContract  EffectContract        `json:"effect_contract"`
	Compensation    *Compensation         `json:"compensation,omitempty"`
	// MaxConcurrency bounds the calls of the binding in flight at once
	// across the daemon's workers; 0 is no bound. A binding of a kind
	// with remote defaults that does not set it gets
	// DefaultMaxConcurrency(kind).
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// Circuit is the binding's circuit breaker; nil is none. A webhook or
	// http binding that does not set it gets DefaultRemoteCircuit.
	Circuit *Circuit `json:"circuit,omitempty"`
}

// MarshalJSON writes the binding; for a kind with remote defaults
// (ProtectsRemote) it writes max_concurrency and circuit even when off (0,
// null), so that the encoding loads back without the defaults.
func (b Binding) MarshalJSON() ([]byte, error) {
	type plain Binding
	if !ProtectsRemote(b.Handler.Kind) {
		return json.Marshal(plain(b))
	}
	return json.Marshal(struct {
		plain
		MaxConcurrency int      `json:"max_concurrency"`
		Circuit        *Circuit `json:"circuit"`
	}{plain(b), b.MaxConcurrency, b.Circuit})
}

// Handler says how a binding is called. Which fields are set depends on Kind.
type Handler struct {
	Kind        string       `json:"kind"`
	Command     string       `json:"command,omitempty"`    // process
	Args        []string     `json:"args,omitempty"`       // process; never nil for a process handler
	Cwd         string       `json:"cwd,omitempty"`        // process; relative to Manifest.Dir; default "."
	Persistent  *Persistent  `json:"persistent,omitempty"` // process, optional (SPEC §4.1)
	Options     *Options     `json:"options,omitempty"`    // webhook and http, required
	Credentials *Credentials `json:"credentials,omitempty"`
	Token       *secret.Ref  `json:"token,omitempty"` // worker, required (SPEC §4.3)
}

// Defaults that protect a remote service (SPEC §2.2): a webhook, http or
// broker binding that sets no max_concurrency or circuit gets these, so a remote
// that fails or slows down sees a bounded number of calls. 16 calls in
// flight is the bound a process binding already gets
// (dispatcher.DefaultProcessConcurrency): far above what one order of a
// small API needs, far below the 256 workers a backlog could otherwise
// send at once. The circuit opens once at least 20 calls ended in the last
// 60 s and half of them failed (a few failures among steady traffic never
// open it; 20 is about four deliveries' worth of tries), and then lets one
// probe through every 30 s instead of 5 tries per delivery. A binding turns
// them off with "max_concurrency": 0 and "circuit": null.
const DefaultRemoteMaxConcurrency = 16

// DefaultNATSMaxConcurrency is the bound of a nats binding that sets none.
// A JetStream publish in flight costs the server one pending
// acknowledgement on a connection it already holds: the stream appends it
// and acknowledges without waiting for a disk (its file store syncs in the
// background), and nats.go itself lets 4,000 asynchronous publishes wait
// for their acknowledgements. What a nats binding's slot waited on at 16
// was the daemon's own journal and queue commits around each publish (a
// fsync each), not the broker: 16 held it to 0.5-0.76 of an in-process
// handler's rate where 64 keeps up with intake (issue 47,
// docs/performance.md "Broker destinations"). 64 still bounds what a
// broker that slows down sees, and the circuit is the same as for any
// remote. Kafka and RabbitMQ keep 16: a RabbitMQ confirm waits for the
// queue's fsync, and with 64 in flight a broker killed mid-load failed
// more publishes at once, whose backed-off retries outlasted its kill
// test's 2 minutes.
const DefaultNATSMaxConcurrency = 64

// DefaultMaxConcurrency is the max_concurrency of a binding of kind that
// sets none (0: no default).
func DefaultMaxConcurrency(kind string) int {
	switch {
	case kind == KindNATS:
		return DefaultNATSMaxConcurrency
	case ProtectsRemote(kind):
		return DefaultRemoteMaxConcurrency
	}
	return 0
}

// DefaultRemoteCircuit is the circuit of a webhook or http binding that
// sets none; see DefaultRemoteMaxConcurrency.
var DefaultRemoteCircuit = Circuit{FailureRatio: 0.5, MinCalls: 20, WindowMS: 60000, OpenMS: 30000}

// ProtectsRemote reports whether bindings of the handler kind call a
// remote service over the network and so get the remote defaults: the
// webhook and http kinds, and the brokers (SPEC §2.2 names them too: a
// broker that refuses or stops answering is a remote that fails).
func ProtectsRemote(kind string) bool {
	switch kind {
	case KindWebhook, KindHTTP, KindNATS, KindKafka, KindRabbitMQ, KindWorker:
		return true
	}
	return false
}

// Persistent asks for one long-lived process serving many calls (SPEC §4.1).
type Persistent struct {
	MaxInFlight   int `json:"max_in_flight"`
	MaxCalls      int `json:"max_calls"`
	IdleTimeoutMS int `json:"idle_timeout_ms"`
}

// Options are where and how an HTTP kind (webhook, http) calls. The fields
// after AllowAddresses are the http kind's (SPEC §2.2).
type Options struct {
	URL        string `json:"url,omitempty"` // absolute http or https; for http a template (handler/urltpl); nats:// or tls:// for nats; amqp:// or amqps:// for rabbitmq
	TimeoutSec int    `json:"timeout_sec"`
	// AllowAddresses are CIDRs the egress guard lets the calls reach
	// although it refuses them by default or by --egress-deny.
	AllowAddresses []string `json:"allow_addresses,omitempty"`

	Method  string            `json:"method,omitempty"`  // POST, PUT, PATCH or DELETE; default POST
	Headers map[string]Header `json:"headers,omitempty"` // name as written -> value
	// Body is nil for the whole input; see Body.
	Body *Body `json:"body,omitempty"`
	// IdempotencyHeader carries the effect id; "" sends none. Set for an
	// http handler (default Idempotency-Key), nil for a webhook.
	IdempotencyHeader *string `json:"idempotency_header,omitempty"`
	CAFile            string  `json:"ca_file,omitempty"` // relative to the manifest's folder

	// The broker kinds' options (SPEC §2.2 "Broker destinations", broker.go).
	Subject         string   `json:"subject,omitempty"`          // nats: a text template (handler/urltpl.Text)
	Stream          string   `json:"stream,omitempty"`           // nats: the JetStream stream
	Brokers         []string `json:"brokers,omitempty"`          // kafka: seed brokers, host:port
	Topic           string   `json:"topic,omitempty"`            // kafka
	Key             string   `json:"key,omitempty"`              // kafka: a text template; "" is the event id
	TransactionalID string   `json:"transactional_id,omitempty"` // kafka
	TLS             bool     `json:"tls,omitempty"`              // kafka: connect with TLS
	SASLMechanism   string   `json:"sasl_mechanism,omitempty"`   // kafka: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
	Exchange        string   `json:"exchange,omitempty"`         // rabbitmq: "" is the default exchange
	RoutingKey      string   `json:"routing_key,omitempty"`      // rabbitmq: a text template
}

// Header is one header of an http handler: a literal value, or a secret of
// the binding formatted by Format (one "%s"; default "%s").
type Header struct {
	Literal string
	Secret  string
	Format  string
}

// MarshalJSON writes a literal as a string, a secret as its object.
func (h Header) MarshalJSON() ([]byte, error) {
	if h.Secret == "" {
		return json.Marshal(h.Literal)
	}
	return json.Marshal(struct {
		Secret string `json:"secret"`
		Format string `json:"format"`
	}{h.Secret, h.Format})
}

// Body is an http handler's body: the input at Ref (a JSON pointer), or
// none at all (None, written null).
type Body struct {
	Ref  string
	None bool
}

// MarshalJSON writes {"$ref": Ref}, or null for None.
func (b Body) MarshalJSON() ([]byte, error) {
	if b.None {
		return []byte("null"), nil
	}
	return json.Marshal(map[string]string{"$ref": b.Ref})
}

// Credentials are the secret references of an HTTP kind: the key that
// signs a webhook's requests, the client certificate of an http handler.
type Credentials struct {
	HMACSecret        *secret.Ref        `json:"hmac_secret,omitempty"`        // webhook, required
	ClientCertificate *ClientCertificate `json:"client_certificate,omitempty"` // http and the brokers, optional
	// A broker's login: username and password (nats, kafka SASL) or a
	// token (nats).
	Username *secret.Ref `json:"username,omitempty"`
	Password *secret.Ref `json:"password,omitempty"`
	Token    *secret.Ref `json:"token,omitempty"`
}

// ClientCertificate is the certificate and key (PEM) an http handler
// presents to the server (mutual TLS).
type ClientCertificate struct {
	Cert secret.Ref `json:"cert"`
	Key  secret.Ref `json:"key"`
}

// EffectContract declares a binding's side effect (SPEC §2.2, §5).
type EffectContract struct {
	Kind      string `json:"kind"`                 // touba.ContractNone or touba.ContractExternalWrite
	RetryMode string `json:"retry_mode,omitempty"` // for external_write: idempotency_key, reconcile or none
}

// Compensation declares whether an operator may compensate an applied effect.
type Compensation struct {
	Supported bool `json:"supported"`
}

// Timeout is the binding's per-call limit.
func (b *Binding) Timeout() time.Duration {
	return time.Duration(b.TimeoutMS) * time.Millisecond
}

// ExternalWrite reports whether calls of b are journaled effects.
func (b *Binding) ExternalWrite() bool {
	return b.EffectContract.Kind == touba.ContractExternalWrite
}

// WorkDir is the directory a process handler of b runs in.
func (m *Manifest) WorkDir(b *Binding) string {
	if filepath.IsAbs(b.Handler.Cwd) {
		return filepath.Clean(b.Handler.Cwd)
	}
	return filepath.Join(m.Dir, b.Handler.Cwd)
}

// Refs returns the bound tool refs, sorted.
func (m *Manifest) Refs() []string {
	refs := slices.Sorted(maps.Keys(m.Bindings))
	return refs
}

// ExternalWrites returns the refs of external_write bindings, sorted: if
// there is any, start-up needs an effect journal.
func (m *Manifest) ExternalWrites() []string {
	var refs []string
	for _, ref := range m.Refs() {
		if m.Bindings[ref].ExternalWrite() {
			refs = append(refs, ref)
		}
	}
	return refs
}

// NeedNetworkIsolation returns the refs of the process bindings without
// the network grant, sorted: their handlers must run without network
// (SPEC §2.2).
func (m *Manifest) NeedNetworkIsolation() []string {
	var refs []string
	for _, ref := range m.Refs() {
		if b := m.Bindings[ref]; b.Handler.Kind == KindProcess && !slices.Contains(b.Grants, GrantNetwork) {
			refs = append(refs, ref)
		}
	}
	return refs
}

// CheckUsage refuses a binding that no program step uses; used holds the
// tool refs the program's steps name. A step naming an unbound tool is the
// program loader's refusal, since the path to report is in the program.
func (m *Manifest) CheckUsage(used []string) error {
	p := newProblems(m.Path)
	for _, ref := range m.Refs() {
		if !slices.Contains(used, ref) {
			p.Fail(strictjson.Child("$.bindings", ref), "binding is not used by any program step")
		}
	}
	return p.Err()
}
