package manifest

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/secret"

	"github.com/touba/touba-trigger/internal/strictjson"
)

// Limits on durations, so that a millisecond count always fits a
// time.Duration and a typo of three extra zeros is caught: one day.
const (
	maxMS  = 24 * 60 * 60 * 1000
	maxSec = 24 * 60 * 60
	maxInt = 1<<31 - 1
)

// toolRef is the grammar of a binding's key (SPEC §2.1 uses the same for triggers).
var toolRef = regexp.MustCompile(`^tool:[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// Load reads and strictly checks the manifest at path.
func Load(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// A missing or unreadable manifest is bad configuration (exit 2),
		// not a runtime failure.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &ConfigError{File: path, Path: "$", Rule: "cannot read file: " + err.Error()}
	}
	return Parse(path, data)
}

// Parse strictly checks the manifest in data as if read from path, which
// names the file in messages and locates relative paths. It returns every
// refusal found (up to a bound), each a *ConfigError.
func Parse(path string, data []byte) (*Manifest, error) {
	p := newProblems(path)
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	m := &Manifest{Path: path, Dir: dir, Bindings: map[string]*Binding{}}
	root := p.Decode(data)
	if root != nil {
		p.manifest(m, root)
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

// manifest checks the top level.
func (p *problems) manifest(m *Manifest, root *strictjson.Node) {
	f, _ := p.Object("$", root, []string{"manifest_version", "bindings"}, "manifest_version", "bindings")
	if f == nil {
		return
	}
	if n, ok := f["manifest_version"]; ok {
		if v, err := p.Str("$.manifest_version", n); err == nil {
			if v != Version {
				p.Fail("$.manifest_version", "must be %s (got %s)", strictjson.Quote(Version), strictjson.Quote(v))
			}
			m.Version = v
		}
	}
	n, ok := f["bindings"]
	if !ok || p.Is("$.bindings", n, strictjson.Object) != nil {
		return
	}
	if len(n.Keys) == 0 {
		p.Fail("$.bindings", "must contain at least one binding")
	}
	for i, ref := range n.Keys {
		path := strictjson.Child("$.bindings", ref)
		if !toolRef.MatchString(ref) {
			p.Fail(path, "tool ref must be \"tool:\" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
		}
		if b := p.binding(path, n.Vals[i]); b != nil {
			b.Ref = ref
			m.Bindings[ref] = b
		}
	}
}

// binding checks one binding and applies its defaults.
func (p *problems) binding(path string, n *strictjson.Node) *Binding {
	f, _ := p.Object(path, n, []string{"handler", "grants", "timeout_ms", "max_payload_bytes",
		"secrets", "effect_contract", "compensation", "max_concurrency", "circuit"}, "handler", "effect_contract")
	if f == nil {
		return nil
	}
	b := &Binding{
		Grants:          []string{},
		TimeoutMS:       DefaultTimeoutMS,
		MaxPayloadBytes: DefaultMaxPayloadBytes,
		Secrets:         map[string]secret.Ref{},
	}
	if h, ok := f["handler"]; ok {
		p.handler(strictjson.Child(path, "handler"), h, &b.Handler)
	}
	if g, ok := f["grants"]; ok {
		b.Grants = p.grants(strictjson.Child(path, "grants"), g)
	}
	if t, ok := f["timeout_ms"]; ok {
		v, _ := p.Integer(strictjson.Child(path, "timeout_ms"), t, maxMS)
		b.TimeoutMS = int(v)
	}
	remote := ProtectsRemote(b.Handler.Kind)
	if c, ok := f["max_concurrency"]; ok {
		// 0 turns a remote kind's default off; other kinds have no
		// default to turn off (a process binding's bound is the
		// dispatcher's), so for them it stays refused.
		if !remote || c.Kind != strictjson.Number || c.Text != "0" {
			v, _ := p.Integer(strictjson.Child(path, "max_concurrency"), c, maxConcurrency)
			b.MaxConcurrency = int(v)
		}
	} else if remote {
		b.MaxConcurrency = DefaultMaxConcurrency(b.Handler.Kind)
	}
	if c, ok := f["circuit"]; ok {
		if c.Kind != strictjson.Null {
			b.Circuit = p.circuit(strictjson.Child(path, "circuit"), c)
		}
	} else if remote {
		def := DefaultRemoteCircuit
		b.Circuit = &def
	}
	if s, ok := f["max_payload_bytes"]; ok {
		b.MaxPayloadBytes, _ = p.Integer(strictjson.Child(path, "max_payload_bytes"), s, 1<<62)
	}
	if s, ok := f["secrets"]; ok {
		at := strictjson.Child(path, "secrets")
		if b.Handler.Kind != "" && b.Handler.Kind != KindProcess && b.Handler.Kind != KindHTTP {
			p.Fail(at, "only allowed for a process handler (as environment variables) or an http handler (in headers)")
		} else {
			p.secrets(at, s, b.Secrets)
		}
	}
	p.httpSecrets(path, b)
	if c, ok := f["effect_contract"]; ok {
		p.contract(strictjson.Child(path, "effect_contract"), c, &b.EffectContract)
	}
	defer p.brokerContract(path, b) // after compensation is read
	if c, ok := f["compensation"]; ok {
		at := strictjson.Child(path, "compensation")
		if cf, _ := p.Object(at, c, []string{"supported"}, "supported"); cf != nil {
			if s, ok := cf["supported"]; ok {
				v, _ := p.Boolean(strictjson.Child(at, "supported"), s)
				b.Compensation = &Compensation{Supported: v}
				if v && b.Handler.Kind == KindHTTP {
					// A compensate call would send the same request again.
					p.Fail(strictjson.Child(at, "supported"), "not allowed for an http handler: its one request has no compensating form")
				}
			}
		}
	}
	return b
}

// grants checks the grant list: known names, each at most once.
func (p *problems) grants(path string, n *strictjson.Node) []string {
	gs, _ := p.Strs(path, n)
	for i, g := range gs {
		switch {
		case !slices.Contains(KnownGrants, g):
			p.Fail(strictjson.Index(path, i), "unknown grant %s (known: %s)", strictjson.Quote(g), strings.Join(KnownGrants, ", "))
		case slices.Index(gs, g) < i:
			p.Fail(strictjson.Index(path, i), "duplicate grant %s", strictjson.Quote(g))
		}
	}
	if gs == nil {
		gs = []string{}
	}
	return gs
}

// contract checks an effect contract: a known kind, and a retry mode
// exactly when the kind is external_write.
func (p *problems) contract(path string, n *strictjson.Node, c *EffectContract) {
	f, _ := p.Object(path, n, []string{"kind", "retry_mode"}, "kind")
	if f == nil {
		return
	}
	if k, ok := f["kind"]; ok {
		if v, err := p.Str(strictjson.Child(path, "kind"), k); err == nil {
			c.Kind = v
			if v != touba.ContractNone && v != touba.ContractExternalWrite {
				p.Fail(strictjson.Child(path, "kind"), "unknown effect contract kind %s (known: %s, %s)",
					strictjson.Quote(v), touba.ContractExternalWrite, touba.ContractNone)
			}
		}
	}
	at := strictjson.Child(path, "retry_mode")
	r, has := f["retry_mode"]
	switch {
	case has && c.Kind == touba.ContractNone:
		p.Fail(at, "not allowed when kind is %s", strictjson.Quote(touba.ContractNone))
	case has:
		if v, err := p.Str(at, r); err == nil {
			c.RetryMode = v
			if v != touba.RetryIdempotencyKey && v != touba.RetryReconcile && v != touba.RetryNone {
				p.Fail(at, "unknown retry_mode %s (known: %s, %s, %s)", strictjson.Quote(v),
					touba.RetryIdempotencyKey, touba.RetryNone, touba.RetryReconcile)
			}
		}
	case c.Kind == touba.ContractExternalWrite:
		p.Fail(at, "required when kind is %s", strictjson.Quote(touba.ContractExternalWrite))
	}
}
