package trigger

import (
	"encoding/json"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// concKey resolves a trigger's concurrency key for a delivery at intake,
// so the entry carries it from its first moment and the lease query can
// order runs of one key whatever happens to the process later. The key
// is the compact JSON of the value ("" when the trigger has no
// concurrency or the pointer resolves to nothing or null: not limited).
// body is parsed lazily: parsed is nil until the caller has it.
func concKey(c *Concurrency, triggerRef, eventID string, at time.Time, headers map[string]string, body []byte, parsed any) string {
	if c == nil {
		return ""
	}
	return keyValue(c.KeyRef, triggerRef, eventID, at, headers, body, parsed)
}

// keyValue is the compact JSON of what keyRef (a pointer into /event,
// checked at load) names for a delivery, "" when it resolves to nothing
// or null: the value of a concurrency, debounce or batch key.
func keyValue(keyRef, triggerRef, eventID string, at time.Time, headers map[string]string, body []byte, parsed any) string {
	toks, _ := jsonptr.Parse(keyRef)
	var root any
	switch toks[1] {
	case "trigger_ref":
		root = triggerRef
	case "event_id":
		root = eventID
	case "received_at":
		root = touba.FormatTime(at)
	case "headers":
		h := make(map[string]any, len(headers))
		for k, v := range headers {
			h[k] = v
		}
		root = h
	case "body":
		if parsed == nil {
			parsed = parsedBody(body)
		}
		root = parsed
	}
	rest := ""
	if len(toks) > 2 {
		rest = "/" + strings.Join(escape(toks[2:]), "/")
	}
	v, err := jsonptr.Get(root, rest)
	if err != nil || v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func escape(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
	}
	return out
}

// SetConcurrencyKey gives d (a delivery about to be enqueued outside
// intake, by an operator's replay) its key under t's concurrency, as
// intake would.
// A key expression that fails leaves d unlimited; SetKeys, which intake
// calls, refuses it instead (ExpressionFailed).
func (t *Trigger) SetConcurrencyKey(d *touba.Delivery) { _ = t.setConcurrencyKey(d, nil) }

func (t *Trigger) setConcurrencyKey(d *touba.Delivery, b *lazyBody) error {
	c := t.Concurrency
	if c == nil {
		return nil
	}
	if c.KeyCEL != nil {
		k, err := exprKey(c.KeyCEL, intakeVars(d, b))
		if err != nil {
			return err
		}
		d.ConcKey, d.ConcMax = k, c.Max
		return nil
	}
	d.ConcKey, d.ConcMax = concKey(c, t.Ref, d.EventID, d.ReceivedAt, d.Headers, d.Body, nil), c.Max
	return nil
}

// SetKeys gives d, about to be enqueued for t, its concurrency key, what
// durable steps need of it and its gathering (SetConcurrencyKey,
// SetDurable, SetGather), decoding its body once for the key expressions.
// A key expression that fails is ExpressionFailed: intake answers 422 and
// enqueues nothing (SPEC §2.4).
func (t *Trigger) SetKeys(d *touba.Delivery) error {
	b := &lazyBody{raw: d.Body}
	if err := t.setConcurrencyKey(d, b); err != nil {
		return err
	}
	if err := t.setDurable(d, b); err != nil {
		return err
	}
	return t.setGather(d, b)
}
