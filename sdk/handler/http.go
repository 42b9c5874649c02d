package handler

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/touba/touba-trigger/protocol"
)

// SecretEnv is the environment variable HTTPHandler reads the shared
// secret from when no WithSecret option is given.
const SecretEnv = "TOUBA_WEBHOOK_SECRET"

// IdempotencyKeyHeader is the header in which touba-trigger sends a webhook
// call's effect_id (its call_id for a binding without an effect).
const IdempotencyKeyHeader = "Idempotency-Key"

// DefaultMaxBodyBytes bounds a request body HTTPHandler reads when no
// WithMaxBodyBytes option is given: the daemon's default max_payload_bytes.
const DefaultMaxBodyBytes = 1 << 20

// Error codes of the answers HTTPHandler makes before the protocol
// request is read. The daemon records any 4xx as not_applied with code
// WebhookRejected, which is true: the tool did not run.
const (
	// CodeSignatureInvalid answers 401 a request whose X-Signature is
	// missing, malformed or wrong.
	CodeSignatureInvalid = "SignatureInvalid"
	// CodePayloadTooLarge answers 413 a body over the limit.
	CodePayloadTooLarge = "HandlerPayloadTooLarge"
	// CodeMethodNotAllowed answers 405 any method but POST.
	CodeMethodNotAllowed = "MethodNotAllowed"
)

type httpConfig struct {
	secret    string
	secretSet bool
	maxBody   int64
}

// HTTPOption configures HTTPHandler.
type HTTPOption func(*httpConfig)

// WithSecret sets the shared secret (the binding's credentials.hmac_secret)
// instead of reading SecretEnv.
func WithSecret(secret string) HTTPOption {
	return func(c *httpConfig) { c.secret, c.secretSet = secret, true }
}

// WithMaxBodyBytes bounds the request body; a larger one is answered 413
// without running the tool. Zero or less means DefaultMaxBodyBytes.
func WithMaxBodyBytes(n int64) HTTPOption {
	return func(c *httpConfig) { c.maxBody = n }
}

// HTTPHandler serves tool as the target of a webhook binding (SPEC §2.2,
// §4.2): the same Tool that Main serves as a process. For each request it
//
//   - answers 405 to any method but POST;
//   - reads at most the body limit (413 beyond it);
//   - checks X-Signature against the raw body with Verify, and answers 401
//     without running anything when it is missing, malformed or wrong;
//   - answers 400 with HandlerProtocolError to a body that is not a
//     touba-tool-handler-v1 request, or whose Idempotency-Key header is not
//     its effect_id (call_id without an effect): the header is not signed;
//   - runs the tool with the request's context (Call.Context.IdempotencyKey
//     holds the header) and answers 200 with the protocol response (§4),
//     which the daemon uses as is: the receipt the tool made, or its
//     business error with ok false and its code.
//
// Every answer carries the header Touba-Protocol: touba-tool-handler-v1,
// which is what tells the daemon that the body is a protocol response.
//
// The secret is WithSecret's, else the environment variable
// TOUBA_WEBHOOK_SECRET. HTTPHandler panics when the tool is invalid or
// there is no secret, as a mux panics on a bad pattern: a handler that
// would refuse every call is a setup error. Run is called concurrently,
// once per request, with the request's context (cancelled when the daemon
// gives up and disconnects).
func HTTPHandler(tool Tool, opts ...HTTPOption) http.Handler {
	if err := tool.validate(); err != nil {
		panic(err.Error())
	}
	cfg := httpConfig{maxBody: DefaultMaxBodyBytes}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.secretSet {
		cfg.secret = os.Getenv(SecretEnv)
	}
	if cfg.secret == "" {
		panic("handler: HTTPHandler for " + tool.Ref + " has no secret: set " + SecretEnv + " or pass WithSecret")
	}
	if cfg.maxBody <= 0 {
		cfg.maxBody = DefaultMaxBodyBytes
	}
	return &httpHandler{tool: tool, cfg: cfg}
}

type httpHandler struct {
	tool Tool
	cfg  httpConfig
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeHTTP(w, http.StatusMethodNotAllowed, failure(CodeMethodNotAllowed, "only POST is served"))
		return
	}
	if r.ContentLength > h.cfg.maxBody {
		writeHTTP(w, http.StatusRequestEntityTooLarge, h.tooLarge())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeHTTP(w, http.StatusRequestEntityTooLarge, h.tooLarge())
			return
		}
		// The sender went away mid-body: nobody reads this answer.
		writeHTTP(w, http.StatusBadRequest, failure(CodeProtocolError, "request body cut short"))
		return
	}
	if err := Verify(body, r.Header.Get(SignatureHeader), h.cfg.secret); err != nil {
		writeHTTP(w, http.StatusUnauthorized, failure(CodeSignatureInvalid, err.Error()))
		return
	}
	var req protocol.Request
	if resp := checkRequest(&req, json.Unmarshal(body, &req)); resp != nil {
		writeHTTP(w, http.StatusBadRequest, resp)
		return
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if want := expectedKey(&req); key != "" && key != want {
		writeHTTP(w, http.StatusBadRequest, failure(CodeProtocolError,
			IdempotencyKeyHeader+" is not the request's "+keyField(&req)))
		return
	}
	c := newCall(&req)
	c.Context.IdempotencyKey = key
	writeHTTP(w, http.StatusOK, h.tool.answer(r.Context(), c))
}

func (h *httpHandler) tooLarge() *protocol.Response {
	return failure(CodePayloadTooLarge, "request body over "+strconv.FormatInt(h.cfg.maxBody, 10)+" bytes")
}

// expectedKey is the Idempotency-Key the daemon sends with req.
func expectedKey(req *protocol.Request) string {
	if e := req.Context.Effect; e != nil {
		return e.EffectID
	}
	return req.Context.CallID
}

func keyField(req *protocol.Request) string {
	if req.Context.Effect != nil {
		return "context.effect.effect_id"
	}
	return "context.call_id"
}

func writeHTTP(w http.ResponseWriter, status int, resp *protocol.Response) {
	b := encodeLine(resp)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.Header().Set("Cache-Control", "no-store")
	// What tells the daemon that the body is a protocol response (§4.2).
	w.Header().Set(protocol.Header, protocol.Name)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
