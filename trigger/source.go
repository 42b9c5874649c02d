package trigger

import (
	"encoding/json"
	"net/http"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/internal/strictjson"
	"github.com/touba/touba-trigger/verify"
)

func (w walker) source(path string, raw *strictjson.Node) (Source, error) {
	s := Source{MaxBodyBytes: DefaultMaxBodyBytes}
	allowed := webhookFields
	switch sourceKind(raw) {
	case KindSchedule:
		// Every field, so that a webhook-only one is refused by name
		// (schedule) rather than as unknown.
		allowed = sourceFields
	case KindRoute:
		allowed = append(append([]string{}, sourceFields...), "trigger")
	}
	m, err := w.Object(path, raw, allowed, "kind")
	if err != nil {
		return s, err
	}
	if s.Kind, err = w.Str(path+".kind", m["kind"]); err != nil {
		return s, err
	}
	switch s.Kind {
	case KindSchedule:
		s.Redelivery = touba.RedeliveryAcknowledge
		s.Schedule, err = w.schedule(path, m)
		return s, err
	case KindRoute:
		s.Redelivery = touba.RedeliveryAcknowledge
		return s, w.route(path, m, &s)
	case KindWebhook:
	default:
		return s, w.Fail(path+".kind", `must be "webhook", "schedule" or "trigger"`)
	}
	if v, ok := m["max_body_bytes"]; ok {
		if s.MaxBodyBytes, err = w.Integer(path+".max_body_bytes", v, maxBodyBytesUpperBound); err != nil {
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
	if v, ok := m["redelivery"]; ok {
		if s.Redelivery, err = w.Str(path+".redelivery", v); err != nil {
			return s, err
		}
		if s.Redelivery != touba.RedeliveryAcknowledge && s.Redelivery != touba.RedeliveryReject {
			return s, w.Fail(path+".redelivery", `must be "acknowledge" or "reject"`)
		}
	} else {
		s.Redelivery = touba.RedeliveryAcknowledge
	}
	if s.EventID, err = w.eventID(path+".event_id", m["event_id"], s.Verify); err != nil {
		return s, err
	}
	return s, nil
}

// eventID reads source.event_id (raw is nil when the program names none).
// Without "header" or "json_pointer" the source is the scheme's default id
// (defaultEventID). Without "required", an id is required exactly when its
// source is the one the trigger's scheme names (see requiredByDefault).
func (w walker) eventID(path string, raw *strictjson.Node, v *Verify) (EventIDSource, error) {
	var src EventIDSource
	var em map[string]*strictjson.Node
	if raw != nil {
		var err error
		if em, err = w.Object(path, raw, []string{"header", "json_pointer", "required"}); err != nil {
			return src, err
		}
		if len(em) == 0 {
			return src, w.Fail(path, `must have one of "header", "json_pointer", or "required"`)
		}
	}
	h, hasHeader := em["header"]
	p, hasPointer := em["json_pointer"]
	switch {
	case hasHeader && hasPointer:
		return src, w.Fail(path, `must have exactly one of "header", "json_pointer"`)
	case hasHeader:
		name, err := w.Str(path+".header", h)
		if err != nil {
			return src, err
		}
		if !headerPattern.MatchString(name) {
			return src, w.Fail(path+".header", "must be an HTTP header name")
		}
		src.Header = http.CanonicalHeaderKey(name)
	case hasPointer:
		ptr, err := w.Str(path+".json_pointer", p)
		if err != nil {
			return src, err
		}
		if toks, err := jsonptr.Parse(ptr); err != nil || len(toks) == 0 {
			return src, w.Fail(path+".json_pointer", "must be a non-empty JSON pointer")
		}
		src.JSONPointer = ptr
	default:
		src = defaultEventID(v)
	}
	if r, ok := em["required"]; ok {
		var err error
		if src.Required, err = w.Boolean(path+".required", r); err != nil {
			return src, err
		}
	} else {
		src.Required = requiredByDefault(v, src)
	}
	return src, nil
}

// requiredByDefault: an id is required when src is the id source the
// trigger's scheme names (whether the program spelled it out or left it to
// the default: writing a default down must not change an answer), because
// those senders put one on every delivery (SPEC §2.1). Any other source,
// and a trigger with no scheme or a scheme naming no id, is optional.
// Slack is the exception: its url_verification challenge carries no
// event_id, and refusing it would keep the app from being installed.
func requiredByDefault(v *Verify, src EventIDSource) bool {
	if v == nil || v.Scheme == verify.SchemeSlack {
		return false
	}
	def := defaultEventID(v)
	if def == (EventIDSource{Header: http.CanonicalHeaderKey(DefaultEventIDHeader)}) {
		return false // the scheme names no id of its own
	}
	return def.Header == src.Header && def.JSONPointer == src.JSONPointer
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
		case verify.SchemeShopify:
			return EventIDSource{Header: verify.ShopifyWebhookIDHeader}
		}
	}
	return EventIDSource{Header: http.CanonicalHeaderKey(DefaultEventIDHeader)}
}

func (w walker) verify(path string, raw *strictjson.Node) (*Verify, error) {
	m, err := w.Object(path, raw, []string{"scheme", "secret", "secrets", "header", "encoding", "prefix", "tolerance_sec"}, "scheme")
	if err != nil {
		return nil, err
	}
	v := &Verify{ToleranceSec: DefaultToleranceSec}
	if v.Scheme, err = w.Str(path+".scheme", m["scheme"]); err != nil {
		return nil, err
	}
	if !verify.Known(v.Scheme) {
		return nil, w.Fail(path+".scheme", "unknown scheme %q (want one of %s)", v.Scheme, verify.SchemeList)
	}
	one, hasOne := m["secret"]
	many, hasMany := m["secrets"]
	switch {
	case hasOne == hasMany:
		return nil, w.Fail(path, `must have exactly one of "secret", "secrets"`)
	case hasOne:
		var r secret.Ref
		if one.Kind == strictjson.Null {
			return nil, w.Fail(path+".secret", "must be a secret reference")
		}
		if err := json.Unmarshal(one.Raw, &r); err != nil {
			return nil, w.Fail(path+".secret", "%v", err)
		}
		v.Secrets, v.Single = []secret.Ref{r}, true
	default:
		list, err := w.Array(path+".secrets", many)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			return nil, w.Fail(path+".secrets", "must hold at least one secret reference")
		}
		for i, e := range list {
			var r secret.Ref
			if e.Kind == strictjson.Null {
				return nil, w.Fail(strictjson.Index(path+".secrets", i), "must be a secret reference")
			}
			if err := json.Unmarshal(e.Raw, &r); err != nil {
				return nil, w.Fail(strictjson.Index(path+".secrets", i), "%v", err)
			}
			v.Secrets = append(v.Secrets, r)
		}
	}
	if h, ok := m["header"]; ok {
		if v.Scheme != verify.SchemeHMACSHA256 {
			return nil, w.Fail(path+".header", "only the hmac-sha256 scheme takes a header name")
		}
		if v.Header, err = w.Str(path+".header", h); err != nil {
			return nil, err
		}
		if !headerPattern.MatchString(v.Header) {
			return nil, w.Fail(path+".header", "must be an HTTP header name")
		}
	}
	if err := w.format(path, m, v); err != nil {
		return nil, err
	}
	if t, ok := m["tolerance_sec"]; ok {
		if v.ToleranceSec, err = w.Integer(path+".tolerance_sec", t, 86400); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// format reads hmac-sha256's encoding and prefix. Both are refused on the
// other schemes, whose formats are fixed: there they would be a mistake
// that changes nothing.
func (w walker) format(path string, m strictjson.Fields, v *Verify) error {
	var err error
	if e, ok := m["encoding"]; ok {
		if v.Scheme != verify.SchemeHMACSHA256 {
			return w.Fail(path+".encoding", "only the hmac-sha256 scheme takes an encoding")
		}
		if v.Encoding, err = w.Str(path+".encoding", e); err != nil {
			return err
		}
		if v.Encoding != verify.EncodingHex && v.Encoding != verify.EncodingBase64 {
			return w.Fail(path+".encoding", `unknown encoding %q (want "hex" or "base64")`, v.Encoding)
		}
	}
	if p, ok := m["prefix"]; ok {
		if v.Scheme != verify.SchemeHMACSHA256 {
			return w.Fail(path+".prefix", "only the hmac-sha256 scheme takes a prefix")
		}
		prefix, err := w.Str(path+".prefix", p)
		if err != nil {
			return err
		}
		if err := verify.CheckPrefix(prefix); err != nil {
			return w.Fail(path+".prefix", "%v", err)
		}
		v.Prefix = &prefix
	}
	return nil
}
