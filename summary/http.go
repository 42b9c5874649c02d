package summary

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/touba/touba-trigger/handler/urltpl"
	"github.com/touba/touba-trigger/manifest"
)

// httpSummary is what `check` prints of an http binding (SPEC §2.2): its
// method and URL template (literal query values hidden), the input
// pointers the URL reads, the body, the headers (a secret by its name,
// never a value) and the idempotency header; and, for a webhook or http
// binding, the addresses its allow list lets it reach.
func httpSummary(b *manifest.Binding) []string {
	o := b.Handler.Options
	if o == nil {
		return nil
	}
	var out []string
	if b.Handler.Kind == manifest.KindHTTP {
		tpl, err := urltpl.Parse(o.URL)
		if err != nil { // the loader parsed it
			return nil
		}
		reads := "nothing"
		if ptrs := tpl.Pointers(); len(ptrs) > 0 {
			reads = strings.Join(ptrs, ", ")
		}
		out = append(out, fmt.Sprintf("%s %s", o.Method, tpl.Shown()), "url reads: "+reads)
		body := "the whole input"
		if o.Body != nil && o.Body.None {
			body = "none"
		} else if o.Body != nil {
			body = "the input at " + o.Body.Ref
		}
		idem := "none"
		if o.IdempotencyHeader != nil && *o.IdempotencyHeader != "" {
			idem = *o.IdempotencyHeader + " (the effect id)"
		}
		out = append(out, "body: "+body+"  idempotency header: "+idem)
		if len(o.Headers) > 0 {
			var hs []string
			for _, name := range slices.Sorted(maps.Keys(o.Headers)) {
				if s := o.Headers[name].Secret; s != "" {
					hs = append(hs, name+" (secret "+s+")")
				} else {
					hs = append(hs, name)
				}
			}
			out = append(out, "headers: "+strings.Join(hs, ", "))
		}
	}
	if len(o.AllowAddresses) > 0 {
		out = append(out, "egress also allowed to: "+strings.Join(o.AllowAddresses, ", "))
	}
	return out
}
