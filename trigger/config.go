package trigger

import (
	"path/filepath"
	"time"

	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/strictjson"
	"github.com/touba/touba-trigger/verify"
)

// NewConfig resolves the program's verification secrets and builds one
// verifier per trigger that has a scheme. Every resolved value is added to
// secrets so that nothing stored later can hold it. An unresolvable secret
// is a config error: the daemon must not start accepting unverifiable
// deliveries.
func NewConfig(p *Program, env secret.Env, secrets *secret.Set) (*Config, error) {
	c := &Config{Program: p, Verifiers: map[string]Verifier{}, Secrets: secrets}
	w := newWalker(p.Path)
	base := filepath.Dir(p.Path)
	for i, t := range p.Triggers {
		v := t.Source.Verify
		if v == nil {
			continue
		}
		path := strictjson.Index("$.triggers", i) + ".source.verify"
		cfg := verify.Config{Scheme: v.Scheme, Header: v.Header, Encoding: v.Encoding, Prefix: v.Prefix, Tolerance: time.Duration(v.ToleranceSec) * time.Second}
		for j, ref := range v.Secrets {
			val, err := ref.Resolve(env, base)
			if err != nil {
				return nil, w.Fail(path+"."+v.SecretPath(j), "%v", err)
			}
			secrets.Add(val)
			cfg.Secrets = append(cfg.Secrets, val)
		}
		vf, err := verify.New(cfg)
		if err != nil {
			return nil, w.Fail(path, "%v", err)
		}
		c.Verifiers[t.Name] = vf
	}
	return c, nil
}
