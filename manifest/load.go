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
	p := &problems{file: path}
	dir := filepath.Dir(path)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	m := &Manifest{Path: path, Dir: dir, Bindings: map[string]*Binding{}}
	root := decodeTree(data, p)
	if root != nil {
		p.manifest(m, root)
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return m, nil
}

// manifest checks the top level.
func (p *problems) manifest(m *Manifest, root *node) {
	f, ok := p.object("$", root, "manifest_version", "bindings")
	if !ok {
		return
	}
	if n, ok := p.required("$", f, "manifest_version"); ok {
		if v, ok := p.str("$.manifest_version", n); ok {
			if v != Version {
				p.add("$.manifest_version", "must be %s (got %s)", quote(Version), quote(v))
			}
			m.Version = v
		}
	}
	n, ok := p.required("$", f, "bindings")
	if !ok || !p.is("$.bindings", n, kindObject) {
		return
	}
	if len(n.keys) == 0 {
		p.add("$.bindings", "must contain at least one binding")
	}
	for i, ref := range n.keys {
		path := child("$.bindings", ref)
		if !toolRef.MatchString(ref) {
			p.add(path, "tool ref must be \"tool:\" followed by [A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
		}
		if b := p.binding(path, n.vals[i]); b != nil {
			b.Ref = ref
			m.Bindings[ref] = b
		}
	}
}

// binding checks one binding and applies its defaults.
func (p *problems) binding(path string, n *node) *Binding {
	f, ok := p.object(path, n, "handler", "grants", "timeout_ms", "max_payload_bytes",
		"secrets", "effect_contract", "compensation", "max_concurrency")
	if !ok {
		return nil
	}
	b := &Binding{
		Grants:          []string{},
		TimeoutMS:       DefaultTimeoutMS,
		MaxPayloadBytes: DefaultMaxPayloadBytes,
		Secrets:         map[string]secret.Ref{},
	}
	if h, ok := p.required(path, f, "handler"); ok {
		p.handler(child(path, "handler"), h, &b.Handler)
	}
	if g, ok := f["grants"]; ok {
		b.Grants = p.grants(child(path, "grants"), g)
	}
	if t, ok := f["timeout_ms"]; ok {
		v, _ := p.integer(child(path, "timeout_ms"), t, maxMS)
		b.TimeoutMS = int(v)
	}
	if c, ok := f["max_concurrency"]; ok {
		v, _ := p.integer(child(path, "max_concurrency"), c, maxConcurrency)
		b.MaxConcurrency = int(v)
	}
	if s, ok := f["max_payload_bytes"]; ok {
		b.MaxPayloadBytes, _ = p.integer(child(path, "max_payload_bytes"), s, 1<<62)
	}
	if s, ok := f["secrets"]; ok {
		at := child(path, "secrets")
		if b.Handler.Kind != "" && b.Handler.Kind != KindProcess {
			p.add(at, "only allowed for a process handler (secrets reach a handler as environment variables)")
		} else {
			p.secrets(at, s, b.Secrets)
		}
	}
	if c, ok := p.required(path, f, "effect_contract"); ok {
		p.contract(child(path, "effect_contract"), c, &b.EffectContract)
	}
	if c, ok := f["compensation"]; ok {
		at := child(path, "compensation")
		if cf, ok := p.object(at, c, "supported"); ok {
			if s, ok := p.required(at, cf, "supported"); ok {
				v, _ := p.boolean(child(at, "supported"), s)
				b.Compensation = &Compensation{Supported: v}
			}
		}
	}
	return b
}

// grants checks the grant list: known names, each at most once.
func (p *problems) grants(path string, n *node) []string {
	gs, _ := p.strs(path, n)
	for i, g := range gs {
		switch {
		case !slices.Contains(KnownGrants, g):
			p.add(index(path, i), "unknown grant %s (known: %s)", quote(g), strings.Join(KnownGrants, ", "))
		case slices.Index(gs, g) < i:
			p.add(index(path, i), "duplicate grant %s", quote(g))
		}
	}
	if gs == nil {
		gs = []string{}
	}
	return gs
}

// contract checks an effect contract: a known kind, and a retry mode
// exactly when the kind is external_write.
func (p *problems) contract(path string, n *node, c *EffectContract) {
	f, ok := p.object(path, n, "kind", "retry_mode")
	if !ok {
		return
	}
	if k, ok := p.required(path, f, "kind"); ok {
		if v, ok := p.str(child(path, "kind"), k); ok {
			c.Kind = v
			if v != touba.ContractNone && v != touba.ContractExternalWrite {
				p.add(child(path, "kind"), "unknown effect contract kind %s (known: %s, %s)",
					quote(v), touba.ContractExternalWrite, touba.ContractNone)
			}
		}
	}
	at := child(path, "retry_mode")
	r, has := f["retry_mode"]
	switch {
	case has && c.Kind == touba.ContractNone:
		p.add(at, "not allowed when kind is %s", quote(touba.ContractNone))
	case has:
		if v, ok := p.str(at, r); ok {
			c.RetryMode = v
			if v != touba.RetryIdempotencyKey && v != touba.RetryReconcile && v != touba.RetryNone {
				p.add(at, "unknown retry_mode %s (known: %s, %s, %s)", quote(v),
					touba.RetryIdempotencyKey, touba.RetryNone, touba.RetryReconcile)
			}
		}
	case c.Kind == touba.ContractExternalWrite:
		p.add(at, "required when kind is %s", quote(touba.ContractExternalWrite))
	}
}
