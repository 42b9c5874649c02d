package handler

import (
	"maps"
	"slices"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
)

// Describer is a Runner that can tell, before a call, what request the call
// will send, for the journal to record beside dispatched and the console
// to show: never a secret value. The webhook and http runners are
// Describers.
type Describer interface {
	Describe(req *Request) (string, *touba.Error)
}

// Describe is the request a call of req would send, as the journal records
// it and the console shows it: the method, the URL without its path and
// query, and each header with its value, but a secret's name for a secret's
// value and "…" for a literal value whose name says it is a credential. An
// input the request cannot be built from is StepInputUnresolved: the call
// is refused before anything is journaled.
func (o *outbound) Describe(req *Request) (string, *touba.Error) {
	out, err := o.wire.request(req, time.Time{}, true)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(out.method + " " + RedactURL(out.url))
	sep := " "
	for _, name := range slices.Sorted(maps.Keys(out.header)) {
		if name == "User-Agent" {
			continue
		}
		v, ok := out.masked[name]
		if !ok {
			v = out.header.Get(name)
			if credentialName(name) {
				v = elided
			}
		}
		b.WriteString(sep + name + ": " + v)
		sep = ", "
	}
	return b.String(), nil
}

// credentialName tells whether a header's name says it carries a
// credential, so that even a literal value of it is not shown.
func credentialName(name string) bool {
	n := strings.ToLower(name)
	if n == "idempotency-key" {
		return false
	}
	for _, w := range []string{"auth", "cookie", "token", "secret", "key", "signature", "password", "session"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}
