package trigger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/httpjson"
	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/secret"
	"github.com/touba/touba-trigger/tracing"
)

// request is what intake learned of one request so far; it becomes the
// queue entry or the delivery-log row.
type request struct {
	at         time.Time
	triggerRef string
	eventID    string
	digest     string
	body       []byte
	verified   bool // signature passed (or none configured): body may be kept
	known      bool // triggerRef names a trigger of the program
	headers    map[string]string
	// doc is the filter document the trigger's filter decoded (nil when
	// it has none), read again by its routes' filters.
	doc map[string]any
}

// Serve handles POST /triggers/<name>. Checks run in the order of SPEC
// §3.1: method (by the router), trigger, source address, rate limit, size,
// event id, signature, filter, then identity.
func (in *Intake) Serve(w http.ResponseWriter, r *http.Request, name string) {
	req := &request{at: in.now(), triggerRef: "trigger:" + name}
	if in.draining.Load() {
		in.reject(w, r, req, touba.ETriggerUnavailable, "shutting down", "")
		return
	}
	cfg := in.config.Load()
	t, ok := cfg.Program.Lookup(name)
	if !ok {
		in.reject(w, r, req, touba.ETriggerNotFound, fmt.Sprintf("no trigger %q", req.triggerRef), "")
		return
	}
	if t.IsSchedule() {
		// Its entries are its ticks (package schedule): a POST that could
		// forge one is answered as for a name with no route.
		in.reject(w, r, req, touba.ETriggerNotFound, fmt.Sprintf("%s is a schedule trigger: it takes no deliveries", req.triggerRef), "")
		return
	}
	if t.IsRoute() {
		// Its entries are its accepting trigger's deliveries (SPEC §2.4).
		in.reject(w, r, req, touba.ETriggerNotFound, notARoute(t).Message, "")
		return
	}
	req.known = true
	if !in.admit(w, r, req, cfg, t) {
		return
	}
	max := t.Source.MaxBodyBytes
	if r.ContentLength > max {
		in.tooLarge(w, r, req, fmt.Sprintf("body of %d bytes is over %d", r.ContentLength, max))
		return
	}
	body, err := readBody(r, max)
	if errors.Is(err, errTooLarge) {
		in.tooLarge(w, r, req, fmt.Sprintf("body is over %d bytes", max))
		return
	} else if err != nil {
		// The client went away or sent a broken body: nothing to enqueue.
		in.reject(w, r, req, touba.ETriggerUnavailable, "could not read the body", "")
		return
	}
	req.body, req.digest = body, dedupe.Digest(body)
	req.headers = keptHeaders(r.Header, cfg.Secrets)

	id, absent, err := eventID(t.Source.EventID, r.Header, body)
	if err != nil {
		req.eventID = printable(id)
		in.reject(w, r, req, touba.ETriggerEventIDInvalid, touba.ErrorMessage(err), "")
		return
	}
	challenge, isChallenge := slackChallenge(t, body)
	if id == "" && t.Source.EventID.Required && !isChallenge {
		// Before any entry: without its id a sender's retry would become
		// a second entry (SPEC §2.1 source.event_id.required).
		in.reject(w, r, req, touba.ETriggerEventIDMissing, absent+"; this trigger requires an event id", "")
		return
	}
	req.eventID = id

	if v := cfg.Verifiers[name]; v != nil {
		if err := v.Verify(r.Header, body, req.at); err != nil {
			in.reject(w, r, req, touba.ETriggerSignatureInvalid, err.Error(), "")
			return
		}
	}
	req.verified = true
	if isChallenge && req.verified && cfg.Verifiers[name] != nil {
		in.answerChallenge(w, r, req, t, challenge)
		return
	}
	if in.filterOut(w, r, req, t) {
		return
	}

	d := &touba.Delivery{TriggerRef: t.Ref, EventID: id, Digest: req.digest, Body: body,
		Headers: req.headers, ReceivedAt: req.at, RemoteAddr: r.RemoteAddr, TraceParent: tracing.TraceParent(r.Context())}
	if err := t.SetKeys(d); err != nil {
		// A key expression that failed (SPEC §2.4): nothing enqueued.
		in.reject(w, r, req, touba.EExpressionFailed, touba.ErrorMessage(err), "")
		return
	}
	if err := t.CheckKeys(d); err != nil {
		// Refused alone, before the queue: an oversized key in a commit
		// batch failed every delivery of it on PostgreSQL (issue 43).
		in.reject(w, r, req, touba.EKeyTooLong, touba.ErrorMessage(err), "")
		return
	}
	if err := t.setRoutes(d, req.doc); err != nil {
		// A route's key failed: nothing enqueued anywhere, as for a key
		// of the accepting trigger's own (SPEC §2.4).
		in.reject(w, r, req, touba.ErrorCode(err), touba.ErrorMessage(err), "")
		return
	}
	res, err := in.Queue.Enqueue(r.Context(), d)
	if touba.ErrorCode(err) == touba.EKeyTooLong {
		in.reject(w, r, req, touba.EKeyTooLong, touba.ErrorMessage(err), "")
		return
	}
	if err != nil {
		msg := "queue unavailable, retry later"
		if errors.Is(err, touba.ErrQueueFull) {
			msg = "queue is full, retry later"
		} else if !errors.Is(err, touba.ErrClosed) {
			in.Logger.Error().Err(err).Str("trigger_ref", t.Ref).Str("event_id", id).Msg("enqueue failed")
		}
		in.reject(w, r, req, touba.ETriggerUnavailable, msg, "")
		return
	}
	a := dedupe.Answered(res, req.digest)
	switch {
	case a.Status == touba.IntakeEnqueued:
		in.matched(t, id, res)
		in.routed(r.RemoteAddr, req, t, d, res)
		if in.Enqueued != nil {
			in.Enqueued()
		}
		in.Logger.Info().Str("trigger_ref", t.Ref).Str("event_id", id).Str("queue_id", res.QueueID).
			Ctx(r.Context()).Msg("delivery enqueued")
	case a.Status == touba.IntakeDuplicate:
		in.record(r, req, http.StatusAccepted, "", res.QueueID)
	case a.Code == touba.ETriggerEventPayloadConflict:
		in.reject(w, r, req, a.Code, "event id already bound to a different body", res.QueueID)
		return
	case t.Source.Redelivery == touba.RedeliveryReject:
		in.reject(w, r, req, a.Code, fmt.Sprintf("entry already consumed (status %s)", res.Status), res.QueueID)
		return
	default:
		in.consumed(w, r, req, t, res.QueueID)
		return
	}
	httpjson.Write(w, http.StatusAccepted, answer{QueueID: res.QueueID, Status: a.Status})
	in.observe(t.Ref, a.Status, http.StatusAccepted)
	annotate(w, req, a.Status, res.QueueID)
}

// consumed answers the exact redelivery of an entry past pending with 200
// (source.redelivery "acknowledge"): the sender missed our first answer,
// and any non-2xx would make it retry for days and perhaps disable the
// endpoint. Nothing runs again; the answer, the delivery log row (status
// 200), the metrics and the trace still say TriggerReplayRejected.
func (in *Intake) consumed(w http.ResponseWriter, r *http.Request, req *request, t *Trigger, queueID string) {
	code := touba.ETriggerReplayRejected
	httpjson.Write(w, http.StatusOK, answer{QueueID: queueID, Status: touba.IntakeConsumed, Code: code})
	in.record(r, req, http.StatusOK, code, queueID)
	in.observe(t.Ref, code, http.StatusOK)
	annotate(w, req, code, queueID)
	in.Logger.Debug().Str("trigger_ref", req.triggerRef).Str("event_id", req.eventID).Str("queue_id", queueID).
		Str("code", code).Int("status", http.StatusOK).Ctx(r.Context()).Msg("redelivery of a consumed entry acknowledged")
}

// reject answers an error and records it in the delivery log.
func (in *Intake) reject(w http.ResponseWriter, r *http.Request, req *request, code, msg, queueID string) {
	status := writeError(w, code, msg, queueID)
	in.record(r, req, status, code, queueID)
	// A path that names no trigger is the sender's text: as a metric label
	// it would let anyone add series without end.
	label := unknownTrigger
	if req.known {
		label = req.triggerRef
	}
	in.observe(label, code, status)
	annotate(w, req, code, queueID)
	in.Logger.Debug().Str("trigger_ref", req.triggerRef).Str("event_id", req.eventID).Str("queue_id", queueID).
		Str("code", code).Int("status", status).Ctx(r.Context()).Msg("delivery rejected")
}

func (in *Intake) record(r *http.Request, req *request, status int, code, queueID string) {
	in.recordFrom(r.RemoteAddr, req, status, code, queueID)
}

// recordFrom is record for a delivery from remote ("" for a schedule's
// tick, which has no sender).
func (in *Intake) recordFrom(remote string, req *request, status int, code, queueID string) {
	if in.Log == nil {
		return
	}
	row := &touba.LoggedDelivery{At: req.at, TriggerRef: req.triggerRef, EventID: req.eventID, Digest: req.digest,
		StatusCode: status, ErrorCode: code, QueueID: queueID, RemoteAddr: remote, Headers: req.headers}
	if req.verified {
		row.Body, row.BodyStored = req.body, true
	}
	in.Log.Log(row)
}

func (in *Intake) observe(ref, code string, status int) {
	if in.Observe != nil {
		in.Observe(ref, code, status)
	}
}

// unknownTrigger is the metric label of requests that name no trigger.
const unknownTrigger = "unknown"

var errTooLarge = errors.New("body too large")

// readBody reads at most max+1 bytes: one more than allowed tells a body
// that is too large without holding more of it.
func readBody(r *http.Request, max int64) ([]byte, error) {
	// The declared length sizes the buffer, up to 64 KiB: a sender that
	// declares a large body and sends nothing must not pin the memory.
	n := r.ContentLength
	if n < 0 || n > max {
		n = 512
	}
	if n > 64<<10 {
		n = 64 << 10
	}
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	if _, err := buf.ReadFrom(io.LimitReader(r.Body, max+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > max {
		return nil, errTooLarge
	}
	return buf.Bytes(), nil
}

// eventID reads the delivery's identity. "" with no error means the request
// carried none, and absent says why (for TriggerEventIdMissing); without
// source.event_id.required it gets a fresh identity and cannot be
// deduplicated.
func eventID(src EventIDSource, h http.Header, body []byte) (id, absent string, err error) {
	if src.Header != "" {
		vals, ok := h[src.Header]
		if !ok {
			return "", "no " + src.Header + " header", nil
		}
		if len(vals) > 0 {
			id = vals[0]
		}
		return id, "", dedupe.ValidateEventID(id)
	}
	return eventIDFromBody(src.JSONPointer, body)
}

func eventIDFromBody(ptr string, body []byte) (string, string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return "", "the body is not JSON, so it has no id at " + ptr, nil
	}
	v, err := jsonptr.Get(doc, ptr)
	if err != nil || v == nil {
		return "", "the body has no id at " + ptr, nil
	}
	var id string
	switch x := v.(type) {
	case string:
		id = x
	case json.Number:
		id = x.String()
	default:
		return "", "", touba.Errorf(touba.ETriggerEventIDInvalid, "event id at %s must be a string", ptr)
	}
	return id, "", dedupe.ValidateEventID(id)
}

// dropped headers may carry credentials of the sender's own; they are not
// kept with the entry nor shown to handlers.
var dropped = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "Cookie": true}

// keptHeaders are the headers an entry keeps: lower-cased, without the
// credential headers above and without any whose value holds a secret of
// the configuration (a sender sharing a token in a header, say).
func keptHeaders(h http.Header, secrets *secret.Set) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if dropped[k] {
			continue
		}
		val := strings.Join(v, ", ")
		if secrets.Contains(val) {
			continue
		}
		out[strings.ToLower(k)] = val
	}
	return out
}

// printable renders an invalid id for the log: quoted, and cut short.
func printable(id string) string {
	if len(id) > 256 {
		id = id[:256]
	}
	q := strconv.Quote(id)
	return q[1 : len(q)-1]
}
