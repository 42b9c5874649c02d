package manifest

import (
	"maps"
	"regexp"
	"slices"

	"github.com/touba/touba-trigger/internal/secret"

	"github.com/touba/touba-trigger/internal/strictjson"
)

// envName is a portable environment variable name (POSIX: letters, digits
// and underscore, not starting with a digit).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are the variables the host itself sets in a process handler's
// environment (SPEC §2.2, §4.1); a secret must not replace them.
var reservedEnv = []string{"LANG", "PATH", "TOUBA_HANDLER_MODE", "TZ"}

// secrets checks a binding's secrets: environment variable names mapped to
// secret references.
func (p *problems) secrets(path string, n *strictjson.Node, out map[string]secret.Ref) {
	if p.Is(path, n, strictjson.Object) != nil {
		return
	}
	for i, name := range n.Keys {
		at := strictjson.Child(path, name)
		switch {
		case !envName.MatchString(name):
			p.Fail(at, "must be a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
		case slices.Contains(reservedEnv, name):
			p.Fail(at, "name is reserved by the host (reserved: LANG, PATH, TOUBA_HANDLER_MODE, TZ)")
		}
		if r, ok := p.secretRef(at, n.Vals[i]); ok {
			out[name] = r
		}
	}
}

// secretRef checks one reference: {"env"}, {"file"} or {"credential"},
// exactly one, non-empty.
func (p *problems) secretRef(path string, n *strictjson.Node) (secret.Ref, bool) {
	f, _ := p.Object(path, n, []string{"env", "file", "credential"})
	if f == nil {
		return secret.Ref{}, false
	}
	var r secret.Ref
	dst := map[string]*string{"env": &r.Env, "file": &r.File, "credential": &r.Credential}
	good := true
	for _, key := range []string{"env", "file", "credential"} {
		v, has := f[key]
		if !has {
			continue
		}
		s, err := p.NonEmpty(strictjson.Child(path, key), v)
		ok := err == nil
		if ok && key == "env" && !envName.MatchString(s) {
			p.Fail(strictjson.Child(path, key), "must be a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
			ok = false
		}
		good = good && ok
		*dst[key] = s
	}
	if !good {
		return secret.Ref{}, false
	}
	if err := r.Validate(); err != nil {
		p.Fail(path, "%s", err.Error())
		return secret.Ref{}, false
	}
	return r, true
}

// Resolved holds the secret values of a manifest, for start-up. It must
// never be logged or stored.
type Resolved struct {
	Env    map[string]map[string]string // binding ref -> env var name -> value (process handlers)
	HMAC   map[string]string            // binding ref -> signing key (webhook handlers)
	Values *secret.Set                  // every value, to refuse storing one
}

// Resolve reads every secret of the manifest: environment variables from
// env (os.LookupEnv when nil), files relative to the manifest's folder, and
// credentials from env's CREDENTIALS_DIRECTORY. Any secret that cannot be
// resolved refuses start-up; the errors name the binding, the variable and
// the reference, never a value.
func (m *Manifest) Resolve(env secret.Env) (*Resolved, error) {
	res := &Resolved{
		Env:    map[string]map[string]string{},
		HMAC:   map[string]string{},
		Values: &secret.Set{},
	}
	p := newProblems(m.Path)
	for _, ref := range m.Refs() {
		b := m.Bindings[ref]
		path := strictjson.Child("$.bindings", ref)
		vars := map[string]string{}
		names := slices.Sorted(maps.Keys(b.Secrets))
		for _, name := range names {
			r := b.Secrets[name]
			v, err := r.Resolve(env, m.Dir)
			if err != nil {
				p.Fail(strictjson.Child(strictjson.Child(path, "secrets"), name), "cannot resolve: %s", err.Error())
				continue
			}
			vars[name] = v
			res.Values.Add(v)
		}
		res.Env[ref] = vars
		if c := b.Handler.Credentials; c != nil {
			v, err := c.HMACSecret.Resolve(env, m.Dir)
			if err != nil {
				p.Fail(path+".handler.credentials.hmac_secret", "cannot resolve: %s", err.Error())
				continue
			}
			res.HMAC[ref] = v
			res.Values.Add(v)
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return res, nil
}
