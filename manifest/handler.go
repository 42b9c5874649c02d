package manifest

import (
	"net/url"
	"slices"
)

// kindFields are the handler fields, besides "kind", that each kind takes.
var kindFields = map[string][]string{
	KindProcess:        {"command", "args", "cwd", "persistent"},
	KindWebhook:        {"options", "credentials"},
	KindAccountingStub: {},
}

// handler checks a binding's handler. Kind is set only when it is known, so
// later checks of the binding do not pile up refusals on an unknown kind.
func (p *problems) handler(path string, n *node, h *Handler) {
	f, ok := p.object(path, n, "kind", "command", "args", "cwd", "persistent", "options", "credentials")
	if !ok {
		return
	}
	k, ok := p.required(path, f, "kind")
	if !ok {
		return
	}
	kind, ok := p.str(child(path, "kind"), k)
	if !ok {
		return
	}
	own, known := kindFields[kind]
	if !known {
		p.add(child(path, "kind"), "unknown handler kind %s (known: %s, %s, %s)",
			quote(kind), KindAccountingStub, KindProcess, KindWebhook)
		return
	}
	h.Kind = kind
	art := "a"
	if kind == KindAccountingStub {
		art = "an"
	}
	for _, key := range n.keys {
		if _, ok := f[key]; !ok || key == "kind" || slices.Contains(own, key) {
			continue
		}
		if key == "persistent" {
			p.add(child(path, key), "only allowed for a process handler")
		} else {
			p.add(child(path, key), "not allowed for %s %s handler", art, kind)
		}
	}
	switch kind {
	case KindProcess:
		p.process(path, f, h)
	case KindWebhook:
		p.webhook(path, f, h)
	}
}

// process checks command, args, cwd and persistent.
func (p *problems) process(path string, f fields, h *Handler) {
	if c, ok := f["command"]; ok {
		h.Command, _ = p.nonEmpty(child(path, "command"), c)
	} else {
		p.add(child(path, "command"), "required for a process handler")
	}
	h.Args = []string{}
	if a, ok := f["args"]; ok {
		if args, ok := p.strs(child(path, "args"), a); ok {
			h.Args = args
		}
	}
	h.Cwd = DefaultCwd
	if c, ok := f["cwd"]; ok {
		h.Cwd, _ = p.nonEmpty(child(path, "cwd"), c)
	}
	if n, ok := f["persistent"]; ok {
		at := child(path, "persistent")
		pf, ok := p.object(at, n, "max_in_flight", "max_calls", "idle_timeout_ms")
		if !ok {
			return
		}
		ps := &Persistent{MaxInFlight: DefaultMaxInFlight, MaxCalls: DefaultMaxCalls, IdleTimeoutMS: DefaultIdleTimeoutMS}
		if v, ok := pf["max_in_flight"]; ok {
			n, _ := p.integer(child(at, "max_in_flight"), v, maxInt)
			ps.MaxInFlight = int(n)
		}
		if v, ok := pf["max_calls"]; ok {
			n, _ := p.integer(child(at, "max_calls"), v, maxInt)
			ps.MaxCalls = int(n)
		}
		if v, ok := pf["idle_timeout_ms"]; ok {
			n, _ := p.integer(child(at, "idle_timeout_ms"), v, maxMS)
			ps.IdleTimeoutMS = int(n)
		}
		h.Persistent = ps
	}
}

// webhook checks options (url, timeout_sec) and credentials (hmac_secret).
func (p *problems) webhook(path string, f fields, h *Handler) {
	if n, ok := f["options"]; ok {
		at := child(path, "options")
		if of, ok := p.object(at, n, "url", "timeout_sec"); ok {
			o := &WebhookOptions{TimeoutSec: DefaultWebhookTimeoutSec}
			if u, ok := of["url"]; ok {
				o.URL = p.webhookURL(child(at, "url"), u)
			} else {
				p.add(child(at, "url"), "required for a webhook handler")
			}
			if t, ok := of["timeout_sec"]; ok {
				n, _ := p.integer(child(at, "timeout_sec"), t, maxSec)
				o.TimeoutSec = int(n)
			}
			h.Options = o
		}
	} else {
		p.add(child(path, "options"), "required for a webhook handler")
	}
	if n, ok := f["credentials"]; ok {
		at := child(path, "credentials")
		if cf, ok := p.object(at, n, "hmac_secret"); ok {
			if s, ok := cf["hmac_secret"]; ok {
				if r, ok := p.secretRef(child(at, "hmac_secret"), s); ok {
					h.Credentials = &WebhookCredentials{HMACSecret: r}
				}
			} else {
				p.add(child(at, "hmac_secret"), "required for a webhook handler")
			}
		}
	} else {
		p.add(child(path, "credentials"), "required for a webhook handler")
	}
}

// webhookURL checks an outbound URL: absolute, http or https, with a host,
// and without user info, which would put a secret in the manifest itself.
func (p *problems) webhookURL(path string, n *node) string {
	s, ok := p.nonEmpty(path, n)
	if !ok {
		return ""
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		// The URL is not echoed: it may hold user info, that is a password.
		p.add(path, "must be an absolute http or https URL")
	case u.User != nil:
		p.add(path, "must not contain user info; sign with credentials.hmac_secret instead")
	default:
		return s
	}
	return ""
}
