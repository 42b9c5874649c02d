package handler

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/rs/zerolog"
	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/protocol"
	"github.com/touba/touba-trigger/verify"
)

// WebhookSpec configures a webhook handler (SPEC §2.2 kind "webhook").
type WebhookSpec struct {
	URL        string
	HMACSecret []byte // signs the body as X-Signature when set
	Limits
	// Outbound is the guard, proxy and TLS of the calls.
	Outbound Outbound
	Log      zerolog.Logger
}

// webhookWire POSTs the protocol request (§4), signed.
type webhookWire struct {
	url    string
	secret []byte
}

// NewWebhook returns a Runner that POSTs each request to spec.URL.
func NewWebhook(spec WebhookSpec) (Runner, error) {
	u, err := url.Parse(spec.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, touba.Errorf(touba.ECONFIG, "webhook handler: url must be an absolute http or https URL")
	}
	l, err := newLimits("webhook", spec.Limits)
	if err != nil {
		return nil, err
	}
	l.rejectCode = touba.EWebhookRejected
	o := &outbound{limits: l, wire: &webhookWire{url: spec.URL, secret: spec.HMACSecret},
		log: spec.Log.With().Str("handler", "webhook").Str("url", RedactURL(spec.URL)).Logger()}
	o.client, o.ownClient = spec.Outbound.client()
	return o, nil
}

func (w *webhookWire) request(req *Request, deadline time.Time, shown bool) (*outRequest, *touba.Error) {
	var body requestBody
	if !shown {
		var err error
		if body, err = encodeRequestBody(req, deadline); err != nil {
			return nil, touba.Errorf(touba.EINTERNAL, "%v", err)
		}
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "User-Agent": {"touba-trigger"}}
	if key := effectID(req); key != "" {
		hdr.Set("Idempotency-Key", key)
	}
	if len(w.secret) > 0 {
		// Shown as webhookMasked says, never computed for the description.
		hdr.Set(verify.OutboundHeader, "")
		if !shown {
			hdr.Set(verify.OutboundHeader, verify.Sign(w.secret, body...))
		}
	}
	return &outRequest{method: http.MethodPost, url: w.url, header: hdr, parts: body, label: "webhook", masked: webhookMasked}, nil
}

// webhookMasked is what a webhook request's description shows for the
// values that change with each call.
var webhookMasked = map[string]string{"Idempotency-Key": "<effect id>", "X-Signature": "sha256=<HMAC of the body>"}

// answer reads a 2xx answer: with the header Touba-Protocol (our SDKs set
// it, §4.2) the body is a protocol response, judged like a process
// handler's; without it the write was applied whatever the body says
// (`{"ok": true}` included), and the body is the output, as JSON when it is
// JSON and as a JSON string otherwise.
func (w *webhookWire) answer(req *Request, t tryResult) *Result {
	if t.header.Get(protocol.Header) == protocol.Name {
		return interpret(req, t.body)
	}
	res := &Result{OK: true, Output: bodyJSON(t.body), Dispatched: true}
	if req.Context.Effect != nil {
		res.Outcome = touba.EffectApplied
	}
	return cleanAnswer(res)
}

// bodyJSON is an answer's body as JSON: compacted when it is JSON, else
// the body as a JSON string.
func bodyJSON(body []byte) json.RawMessage {
	var out bytes.Buffer
	if err := json.Compact(&out, body); err != nil || out.Len() == 0 {
		s, _ := json.Marshal(string(body))
		return s
	}
	return out.Bytes()
}
