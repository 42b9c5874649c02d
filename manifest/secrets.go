package manifest

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"os"
	"path/filepath"
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
	// Env: binding ref -> secret name -> value: a process handler's
	// environment, an http handler's header values.
	Env    map[string]map[string]string
	HMAC   map[string]string // binding ref -> signing key (webhook handlers)
	TLS    map[string]*TLS   // binding ref -> roots and client certificate (http handlers with either)
	Values *secret.Set       // every value, to refuse storing one

	// Login: binding ref -> a broker binding's username, password or
	// token (broker.go).
	Login map[string]*Login

	// Worker: binding ref -> a worker binding's token (SPEC §4.3).
	Worker map[string]string
}

// TLS is what an http handler's TLS needs, read at start-up.
type TLS struct {
	CA        []byte // PEM of ca_file; nil: the system's roots
	Cert, Key string // PEM of credentials.client_certificate; "" for none
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
		TLS:    map[string]*TLS{},
		Values: &secret.Set{},
		Login:  map[string]*Login{},
		Worker: map[string]string{},
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
		if c := b.Handler.Credentials; c != nil && c.HMACSecret != nil {
			v, err := c.HMACSecret.Resolve(env, m.Dir)
			if err != nil {
				p.Fail(path+".handler.credentials.hmac_secret", "cannot resolve: %s", err.Error())
				continue
			}
			res.HMAC[ref] = v
			res.Values.Add(v)
		}
		if l := m.resolveLogin(p, path, b, env, res.Values); l != nil {
			res.Login[ref] = l
		}
		if v, ok := m.resolveToken(p, path, b, env, res.Values); ok {
			res.Worker[ref] = v
		}
		if t := m.resolveTLS(p, path, b, env, res.Values); t != nil {
			res.TLS[ref] = t
		}
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	return res, nil
}

// resolveTLS reads an http binding's ca_file and client certificate, and
// checks that they can be used: a file without a PEM certificate, or a
// certificate and key that are not a pair, refuses start-up.
func (m *Manifest) resolveTLS(p *problems, path string, b *Binding, env secret.Env, values *secret.Set) *TLS {
	o, c := b.Handler.Options, b.Handler.Credentials
	var t TLS
	if o != nil && o.CAFile != "" {
		at := path + ".handler.options.ca_file"
		file := o.CAFile
		if !filepath.IsAbs(file) {
			file = filepath.Join(m.Dir, file)
		}
		pem, err := os.ReadFile(file)
		switch {
		case err != nil:
			p.Fail(at, "cannot read: %s", err.Error())
		case !x509.NewCertPool().AppendCertsFromPEM(pem):
			p.Fail(at, "holds no PEM certificate")
		default:
			t.CA = pem
		}
	}
	if c != nil && c.ClientCertificate != nil {
		at := path + ".handler.credentials.client_certificate"
		cert, err1 := c.ClientCertificate.Cert.Resolve(env, m.Dir)
		if err1 != nil {
			p.Fail(at+".cert", "cannot resolve: %s", err1.Error())
		}
		key, err2 := c.ClientCertificate.Key.Resolve(env, m.Dir)
		if err2 != nil {
			p.Fail(at+".key", "cannot resolve: %s", err2.Error())
		}
		if err1 == nil && err2 == nil {
			values.Add(key)
			// The error of X509KeyPair never quotes the key.
			if _, err := tls.X509KeyPair([]byte(cert), []byte(key)); err != nil {
				p.Fail(at, "cert and key are not a usable pair: %s", err.Error())
			} else {
				t.Cert, t.Key = cert, key
			}
		}
	}
	if t.CA == nil && t.Key == "" {
		return nil
	}
	return &t
}
