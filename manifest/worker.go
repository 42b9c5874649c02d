package manifest

import (
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// KindWorker is a binding whose calls are taken by workers that connect
// out to the daemon (SPEC §4.3): the handler has no address, only the
// token its workers present.
const KindWorker = "worker"

// worker checks a worker handler's token (a secret reference).
func (p *problems) worker(path string, f strictjson.Fields, h *Handler) {
	n, ok := f["token"]
	if !ok {
		p.Fail(strictjson.Child(path, "token"), "required for a worker handler")
		return
	}
	if r, ok := p.secretRef(strictjson.Child(path, "token"), n); ok {
		h.Token = &r
	}
}

// resolveToken reads a worker binding's token (an empty value is refused
// by Resolve like any secret).
func (m *Manifest) resolveToken(p *problems, path string, b *Binding, env secret.Env, values *secret.Set) (string, bool) {
	if b.Handler.Kind != KindWorker || b.Handler.Token == nil {
		return "", false
	}
	v, err := b.Handler.Token.Resolve(env, m.Dir)
	if err != nil {
		p.Fail(path+".handler.token", "cannot resolve: %s", err.Error())
		return "", false
	}
	values.Add(v)
	return v, true
}
