package manifest

import (
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/handler/urltpl"
	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// httpOptions are the fields options takes for an http handler.
var httpOptions = []string{"url", "method", "headers", "body", "idempotency_header", "timeout_sec", "ca_file", "allow_addresses"}

// managedHeaders are set by the client itself: a manifest must not.
var managedHeaders = []string{"Connection", "Content-Length", "Host", "Keep-Alive", "Proxy-Connection", "Te",
	"Trailer", "Transfer-Encoding", "Upgrade", "Traceparent"}

// http checks an http handler (SPEC §2.2): options and, optionally,
// credentials.client_certificate. Header secrets are checked against the
// binding's secrets later (httpSecrets), once those are read.
func (p *problems) http(path string, f strictjson.Fields, h *Handler) {
	n, ok := f["options"]
	if !ok {
		p.Fail(strictjson.Child(path, "options"), "required for an http handler")
	} else {
		at := strictjson.Child(path, "options")
		if of, _ := p.Object(at, n, httpOptions, "url"); of != nil {
			h.Options = p.httpOptions(at, of)
		}
	}
	if n, ok := f["credentials"]; ok {
		at := strictjson.Child(path, "credentials")
		if cf, _ := p.Object(at, n, []string{"client_certificate"}, "client_certificate"); cf != nil {
			if c, ok := cf["client_certificate"]; ok {
				cat := strictjson.Child(at, "client_certificate")
				if kf, _ := p.Object(cat, c, []string{"cert", "key"}, "cert", "key"); len(kf) == 2 {
					cert, ok1 := p.secretRef(strictjson.Child(cat, "cert"), kf["cert"])
					key, ok2 := p.secretRef(strictjson.Child(cat, "key"), kf["key"])
					if ok1 && ok2 {
						h.Credentials = &Credentials{ClientCertificate: &ClientCertificate{Cert: cert, Key: key}}
					}
				}
			}
		}
	}
}

// httpOptions checks an http handler's options and applies their defaults.
func (p *problems) httpOptions(at string, of strictjson.Fields) *Options {
	idem := handler.DefaultIdempotencyHeader
	o := &Options{TimeoutSec: DefaultWebhookTimeoutSec, Method: http.MethodPost, IdempotencyHeader: &idem}
	if u, ok := of["url"]; ok {
		uat := strictjson.Child(at, "url")
		if s, err := p.NonEmpty(uat, u); err == nil {
			// The rule only: the URL may hold a credential.
			if _, err := urltpl.Parse(s); err != nil {
				p.Fail(uat, "%s", err.Error())
			} else {
				o.URL = s
			}
		}
	}
	if m, ok := of["method"]; ok {
		if s, err := p.Str(strictjson.Child(at, "method"), m); err == nil {
			if !slices.Contains(handler.HTTPMethods, s) {
				p.Fail(strictjson.Child(at, "method"), "must be one of %s (got %s)", strings.Join(handler.HTTPMethods, ", "), strictjson.Quote(s))
			} else {
				o.Method = s
			}
		}
	}
	if i, ok := of["idempotency_header"]; ok {
		iat := strictjson.Child(at, "idempotency_header")
		if s, err := p.Str(iat, i); err == nil {
			if s != "" && !handler.ValidHeaderName(s) {
				p.Fail(iat, "must be a header name, or \"\" to send none")
			}
			o.IdempotencyHeader = &s
		}
	}
	if hn, ok := of["headers"]; ok {
		o.Headers = p.headers(strictjson.Child(at, "headers"), hn, *o.IdempotencyHeader)
	}
	if b, ok := of["body"]; ok {
		o.Body = p.body(strictjson.Child(at, "body"), b)
	}
	if c, ok := of["ca_file"]; ok {
		o.CAFile, _ = p.NonEmpty(strictjson.Child(at, "ca_file"), c)
	}
	p.callOptions(at, of, o)
	return o
}

// headers checks options.headers: valid names, none the client sets itself
// or the idempotency header, none twice (whatever the case), and each value
// a literal string or {"secret", "format"}.
func (p *problems) headers(path string, n *strictjson.Node, idem string) map[string]Header {
	if p.Is(path, n, strictjson.Object) != nil {
		return nil
	}
	out := map[string]Header{}
	seen := map[string]bool{}
	for i, name := range n.Keys {
		at := strictjson.Child(path, name)
		canon := http.CanonicalHeaderKey(name)
		switch {
		case !handler.ValidHeaderName(name):
			p.Fail(at, "must be a valid HTTP header name")
			continue
		case slices.Contains(managedHeaders, canon):
			p.Fail(at, "is set by the client itself")
			continue
		case idem != "" && canon == http.CanonicalHeaderKey(idem):
			p.Fail(at, "is the idempotency header, which carries the effect id")
			continue
		case seen[canon]:
			p.Fail(at, "is already set (header names are not case-sensitive)")
			continue
		}
		seen[canon] = true
		v := n.Vals[i]
		if v.Kind == strictjson.String {
			if !handler.ValidHeaderValue(v.Text) {
				p.Fail(at, "must not hold a line break or a control character")
				continue
			}
			out[name] = Header{Literal: v.Text}
			continue
		}
		f, _ := p.Object(at, v, []string{"secret", "format"}, "secret")
		if f == nil {
			continue
		}
		var h Header
		if s, ok := f["secret"]; ok {
			h.Secret, _ = p.NonEmpty(strictjson.Child(at, "secret"), s)
		}
		h.Format = "%s"
		if fm, ok := f["format"]; ok {
			fat := strictjson.Child(at, "format")
			if s, err := p.Str(fat, fm); err == nil {
				if !validFormat(s) {
					p.Fail(fat, `must hold one %%s where the secret goes (write %%%% for a percent sign)`)
				} else if !handler.ValidHeaderValue(s) {
					p.Fail(fat, "must not hold a line break or a control character")
				}
				h.Format = s
			}
		}
		if h.Secret != "" {
			out[name] = h
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// validFormat tells whether s holds exactly one %s and no other verb.
func validFormat(s string) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if i+1 == len(s) {
			return false
		}
		switch s[i+1] {
		case 's':
			n++
		case '%':
		default:
			return false
		}
		i++
	}
	return n == 1
}

// body checks options.body: {"$ref": pointer} or null (no body).
func (p *problems) body(path string, n *strictjson.Node) *Body {
	if n.Kind == strictjson.Null {
		return &Body{None: true}
	}
	f, _ := p.Object(path, n, []string{"$ref"}, "$ref")
	r, ok := f["$ref"]
	if !ok {
		return nil
	}
	at := strictjson.Child(path, "$ref")
	s, err := p.Str(at, r)
	if err != nil {
		return nil
	}
	if _, err := jsonptr.Parse(s); err != nil {
		p.Fail(at, "must be a JSON pointer into the input (\"\" or starting with /)")
		return nil
	}
	return &Body{Ref: s}
}

// httpSecrets checks that each header of an http binding names one of its
// secrets.
func (p *problems) httpSecrets(path string, b *Binding) {
	o := b.Handler.Options
	if b.Handler.Kind != KindHTTP || o == nil {
		return
	}
	at := strictjson.Child(strictjson.Child(strictjson.Child(path, "handler"), "options"), "headers")
	for _, name := range slices.Sorted(maps.Keys(o.Headers)) {
		if s := o.Headers[name].Secret; s != "" && b.Secrets[s] == (secret.Ref{}) {
			p.Fail(strictjson.Child(strictjson.Child(at, name), "secret"),
				"names %s, which is not one of the binding's secrets", strictjson.Quote(s))
		}
	}
}
