package trigger

import (
	"encoding/json"
	"net/http"

	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/verify"
)

func (w walker) source(path string, raw json.RawMessage) (Source, error) {
	s := Source{MaxBodyBytes: DefaultMaxBodyBytes}
	m, err := w.object(path, raw, []string{"kind", "event_id", "max_body_bytes", "verify", "allow_from", "rate_limit"}, "kind")
	if err != nil {
		return s, err
	}
	if s.Kind, err = w.str(path+".kind", m["kind"]); err != nil {
		return s, err
	}
	if s.Kind != "webhook" {
		return s, w.fail(path+".kind", `must be "webhook"`)
	}
	if v, ok := m["max_body_bytes"]; ok {
		if s.MaxBodyBytes, err = w.integer(path+".max_body_bytes", v, 1, maxBodyBytesUpperBound); err != nil {
			return s, err
		}
	}
	if v, ok := m["allow_from"]; ok {
		if s.AllowFrom, err = w.allowFrom(path+".allow_from", v); err != nil {
			return s, err
		}
	}
	if v, ok := m["rate_limit"]; ok {
		if s.RateLimit, err = w.rateLimit(path+".rate_limit", v); err != nil {
			return s, err
		}
	}
	if v, ok := m["verify"]; ok {
		vf, err := w.verify(path+".verify", v)
		if err != nil {
			return s, err
		}
		s.Verify = vf
	}
	if v, ok := m["event_id"]; ok {
		em, err := w.object(path+".event_id", v, []string{"header", "json_pointer"})
		if err != nil {
			return s, err
		}
		if len(em) != 1 {
			return s, w.fail(path+".event_id", `must have exactly one of "header", "json_pointer"`)
		}
		if h, ok := em["header"]; ok {
			if s.EventID.Header, err = w.str(path+".event_id.header", h); err != nil {
				return s, err
			}
			if !headerPattern.MatchString(s.EventID.Header) {
				return s, w.fail(path+".event_id.header", "must be an HTTP header name")
			}
			s.EventID.Header = http.CanonicalHeaderKey(s.EventID.Header)
		} else {
			if s.EventID.JSONPointer, err = w.str(path+".event_id.json_pointer", em["json_pointer"]); err != nil {
				return s, err
			}
			if toks, err := jsonptr.Parse(s.EventID.JSONPointer); err != nil || len(toks) == 0 {
				return s, w.fail(path+".event_id.json_pointer", "must be a non-empty JSON pointer")
			}
		}
	} else {
		s.EventID = defaultEventID(s.Verify)
	}
	return s, nil
}

// defaultEventID is where the identity comes from when the program names
// none: the scheme's own id where it has one (SPEC §2.1).
func defaultEventID(v *Verify) EventIDSource {
	if v != nil {
		switch v.Scheme {
		case verify.SchemeStandardWebhooks:
			return EventIDSource{Header: verify.StandardIDHeader}
		case verify.SchemeStripe:
			return EventIDSource{JSONPointer: "/id"}
		case verify.SchemeGitHub:
			return EventIDSource{Header: "X-Github-Delivery"}
		case verify.SchemeSlack:
			// Slack's Events API carries its id in the signed body.
			return EventIDSource{JSONPointer: "/event_id"}
		}
	}
	return EventIDSource{Header: http.CanonicalHeaderKey(DefaultEventIDHeader)}
}

func (w walker) verify(path string, raw json.RawMessage) (*Verify, error) {
	m, err := w.object(path, raw, []string{"scheme", "secret", "secrets", "header", "tolerance_sec"}, "scheme")
	if err != nil {
		return nil, err
	}
	v := &Verify{ToleranceSec: DefaultToleranceSec}
	if v.Scheme, err = w.str(path+".scheme", m["scheme"]); err != nil {
		return nil, err
	}
	if !verify.Known(v.Scheme) {
		return nil, w.fail(path+".scheme", "unknown scheme %q (want one of hmac-sha256, github, stripe, standard-webhooks, slack)", v.Scheme)
	}
	one, hasOne := m["secret"]
	many, hasMany := m["secrets"]
	switch {
	case hasOne == hasMany:
		return nil, w.fail(path, `must have exactly one of "secret", "secrets"`)
	case hasOne:
		var r secret.Ref
		if isNull(one) {
			return nil, w.fail(path+".secret", "must be a secret reference")
		}
		if err := json.Unmarshal(one, &r); err != nil {
			return nil, w.fail(path+".secret", "%v", err)
		}
		v.Secrets = []secret.Ref{r}
	default:
		list, err := w.array(path+".secrets", many)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, w.fail(path+".secrets", "must hold at least one secret reference")
		}
		for i, e := range list {
			var r secret.Ref
			if isNull(e) {
				return nil, w.fail(idx(path+".secrets", i), "must be a secret reference")
			}
			if err := json.Unmarshal(e, &r); err != nil {
				return nil, w.fail(idx(path+".secrets", i), "%v", err)
			}
			v.Secrets = append(v.Secrets, r)
		}
	}
	if h, ok := m["header"]; ok {
		if v.Scheme != verify.SchemeHMACSHA256 {
			return nil, w.fail(path+".header", "only the hmac-sha256 scheme takes a header name")
		}
		if v.Header, err = w.str(path+".header", h); err != nil {
			return nil, err
		}
		if !headerPattern.MatchString(v.Header) {
			return nil, w.fail(path+".header", "must be an HTTP header name")
		}
	}
	if t, ok := m["tolerance_sec"]; ok {
		if v.ToleranceSec, err = w.integer(path+".tolerance_sec", t, 1, 86400); err != nil {
			return nil, err
		}
	}
	return v, nil
}
