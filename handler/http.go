package handler

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler/urltpl"
)

// The methods an http binding may use (SPEC §2.2): writes. POST is the
// default.
var HTTPMethods = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// DefaultIdempotencyHeader carries an http call's effect id unless the
// binding names another header, or none.
const DefaultIdempotencyHeader = "Idempotency-Key"

// HTTPSpec configures an http handler (SPEC §2.2 kind "http"): any HTTP API
// called directly, without an adapter.
type HTTPSpec struct {
	Method string // POST (the default), PUT, PATCH or DELETE
	// URL is the template: literal scheme, host and port; {/pointer}
	// placeholders into the input in path segments and query values.
	URL     string
	Headers []Header
	// Secrets are the binding's secret values by name, for Headers.
	Secrets map[string]string
	// BodyRef points at the body in the input; "" sends the whole input.
	// NoBody sends none.
	BodyRef string
	NoBody  bool
	// IdempotencyHeader carries the effect id (the call id without an
	// effect); "" sends none.
	IdempotencyHeader string
	// CA is the PEM of the roots that verify the server (the binding's
	// ca_file; nil: the system's); ClientCert and ClientKey, PEM, are
	// presented to it (mutual TLS).
	CA                    []byte
	ClientCert, ClientKey string

	Limits
	Outbound Outbound
	Log      zerolog.Logger
}

// Header is one header of an http binding: a literal value, or the value of
// the binding's secret Secret formatted by Format (one "%s", "%%" for a
// percent sign; "" is "%s").
type Header struct {
	Name    string
	Literal string
	Secret  string
	Format  string
}

// httpWire builds an http binding's request from the call's input and
// reads any answer as its output.
type httpWire struct {
	method  string
	tpl     *urltpl.Template
	header  http.Header       // the configured headers, values resolved
	masked  map[string]string // canonical name -> what shows instead of the value
	bodyRef string
	noBody  bool
	idem    string
}

// NewHTTP returns a Runner for spec. A secret value that cannot stand in a
// header, a CA file or client certificate that cannot be read, or a bad
// template refuses it (the messages never hold a secret value).
func NewHTTP(spec HTTPSpec) (Runner, error) {
	if spec.Method == "" {
		spec.Method = http.MethodPost
	}
	if !slices.Contains(HTTPMethods, spec.Method) {
		return nil, touba.Errorf(touba.ECONFIG, "http handler: method %q is not one of %s", spec.Method, strings.Join(HTTPMethods, ", "))
	}
	tpl, err := urltpl.Parse(spec.URL)
	if err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "http handler: url %v", err)
	}
	l, err := newLimits("http", spec.Limits)
	if err != nil {
		return nil, err
	}
	l.rejectCode, l.conflictRetried = touba.EHttpRejected, true
	w := &httpWire{method: spec.Method, tpl: tpl, header: http.Header{}, masked: map[string]string{},
		bodyRef: spec.BodyRef, noBody: spec.NoBody, idem: spec.IdempotencyHeader}
	for _, h := range spec.Headers {
		if err := w.addHeader(h, spec.Secrets); err != nil {
			return nil, err
		}
	}
	if w.idem != "" {
		w.masked[http.CanonicalHeaderKey(w.idem)] = "<effect id>"
	}
	ob := spec.Outbound
	if ob.TLS == nil && (spec.CA != nil || spec.ClientCert != "" || spec.ClientKey != "") {
		if ob.TLS, err = tlsConfig(spec.CA, spec.ClientCert, spec.ClientKey); err != nil {
			return nil, err
		}
	}
	o := &outbound{limits: l, wire: w,
		log: spec.Log.With().Str("handler", "http").Str("method", spec.Method).Str("url", RedactURL(spec.URL)).Logger()}
	o.client, o.ownClient = ob.client()
	return o, nil
}

// addHeader resolves one configured header.
func (w *httpWire) addHeader(h Header, secrets map[string]string) error {
	if !ValidHeaderName(h.Name) {
		return touba.Errorf(touba.ECONFIG, "http handler: header name %q is not a valid HTTP header name", h.Name)
	}
	name := http.CanonicalHeaderKey(h.Name)
	v := h.Literal
	if h.Secret != "" {
		s, ok := secrets[h.Secret]
		if !ok {
			return touba.Errorf(touba.ECONFIG, "http handler: header %s names secret %s, which the binding does not have", name, h.Secret)
		}
		v = formatSecret(h.Format, s)
		w.masked[name] = "<secret " + h.Secret + ">"
	}
	if !ValidHeaderValue(v) {
		// Never quoted: it may hold the secret.
		return touba.Errorf(touba.ECONFIG, "http handler: the value of header %s holds a line break or a control character", name)
	}
	w.header.Set(name, v)
	return nil
}

// formatSecret puts secret where format's %s is and a percent sign where
// it has %% ("" is "%s"), in one pass over format: the secret itself is
// never read as a format, so a "%%" in it stays "%%".
func formatSecret(format, secret string) string {
	if format == "" {
		return secret
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] == '%' && i+1 < len(format) {
			switch format[i+1] {
			case 's':
				b.WriteString(secret)
				i++
				continue
			case '%':
				b.WriteByte('%')
				i++
				continue
			}
		}
		b.WriteByte(format[i])
	}
	return b.String()
}

// tlsConfig is the TLS of an http binding: roots from ca, and the client
// certificate and key, all PEM.
func tlsConfig(ca []byte, cert, key string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != nil {
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(ca) {
			return nil, touba.Errorf(touba.ECONFIG, "http handler: ca_file holds no PEM certificate")
		}
	}
	if cert != "" || key != "" {
		pair, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			// The error of X509KeyPair never quotes the key.
			return nil, touba.Errorf(touba.ECONFIG, "http handler: client_certificate: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// ValidHeaderName tells whether s is an HTTP field name (RFC 9110 token).
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidHeaderValue tells whether s may stand as a field value: no control
// character but a tab, so no line break can start another header.
func ValidHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
