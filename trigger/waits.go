package trigger

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/jsonptr"
	"github.com/touba/touba-trigger/internal/strictjson"
)

// The program's index of durable steps (SPEC §2.3), built at load: for
// each trigger B, the wait_for steps awaiting its deliveries and the
// cancel_on entries naming it. Intake reads, from each delivery of B, one
// value per entry of B's index (SetDurable), so the queue can match it
// with the waits and cancel keys of other entries in the transaction that
// stores it.

// Listener is one value intake reads from every delivery of a trigger B:
// for the wait_for step of trigger A awaiting B (Key is WaitKey(A, step):
// the value becomes an Offer) or for cancel_on entry i of A naming B (Key
// is CancelKey(A, i): the value becomes a Cancel). On is where the value
// is, in {"headers", "body"}.
type Listener struct {
	Key     string
	Trigger string // A
	On      string
	on      []string
}

// Listeners are the program's listeners on one trigger's deliveries.
type Listeners struct {
	Waits   []Listener // one Offer each
	Cancels []Listener // one Cancel each
}

// Listeners returns what the program awaits of ref's deliveries (none for
// a trigger nothing names, or a ref the program lacks).
func (p *Program) Listeners(ref string) Listeners {
	t, ok := p.byName[strings.TrimPrefix(ref, "trigger:")]
	if !ok || t.listeners == nil {
		return Listeners{}
	}
	return *t.listeners
}

// index checks the trigger each wait_for and cancel_on names, now that
// every trigger is known, and files them under it.
func (w walker) index(p *Program) error {
	for i, a := range p.Triggers {
		tp := strictjson.Index("$.triggers", i)
		for j, s := range a.Steps {
			if s.WaitFor == nil {
				continue
			}
			b, err := w.named(p, strictjson.Index(tp+".steps", j)+".wait_for.trigger", a, s.WaitFor.Trigger,
				"a step cannot wait for its own trigger: each delivery would offer itself to its own wait")
			if err != nil {
				return err
			}
			toks, _ := jsonptr.Parse(s.WaitFor.On)
			l := b.listen()
			l.Waits = append(l.Waits, Listener{Key: touba.WaitKey(a.Ref, s.ID), Trigger: a.Ref, On: s.WaitFor.On, on: toks})
		}
		for k, c := range a.CancelOn {
			b, err := w.named(p, strictjson.Index(tp+".cancel_on", k)+".trigger", a, c.Trigger,
				"a trigger cannot cancel its own entries: each delivery would meet its own cancel key")
			if err != nil {
				return err
			}
			toks, _ := jsonptr.Parse(c.On)
			l := b.listen()
			l.Cancels = append(l.Cancels, Listener{Key: touba.CancelKey(a.Ref, k), Trigger: a.Ref, On: c.On, on: toks})
		}
	}
	return nil
}

// named returns the trigger ref names, refusing one the program lacks and
// a's own (self, the rule).
func (w walker) named(p *Program, path string, a *Trigger, ref, self string) (*Trigger, error) {
	b, ok := p.byName[strings.TrimPrefix(ref, "trigger:")]
	if !ok {
		return nil, w.Fail(path, "no trigger %s in the program", strconv.Quote(ref))
	}
	if b == a {
		return nil, w.Fail(path, "%s", self)
	}
	return b, nil
}

func (t *Trigger) listen() *Listeners {
	if t.listeners == nil {
		t.listeners = &Listeners{}
	}
	return t.listeners
}

// Durable reports whether intake reads values from t's deliveries: some
// wait_for or cancel_on names t, or t has a cancel_on of its own.
func (t *Trigger) Durable() bool { return t.listeners != nil || len(t.CancelOn) > 0 }

// SetDurable gives d, about to be enqueued for t, what durable steps need
// of it at acceptance: ProgramDigest (t's Digest), an Offer per wait_for
// awaiting t, a Cancel per cancel_on naming t, and a CancelKey per cancel_on
// of t's own (its match resolved against {"event": ...}). A value that is
// absent (or null) gives none, as does any body pointer of a body that is
// not JSON. For a trigger that is not Durable it allocates nothing: this
// is on intake's hot path. Intake calls it; so must any other path that
// enqueues a delivery (an operator's replay of a stored delivery).
func (t *Trigger) SetDurable(d *touba.Delivery) {
	d.ProgramDigest = t.Digest
	if !t.Durable() {
		return
	}
	b := lazyBody{raw: d.Body}
	if l := t.listeners; l != nil {
		d.Offers = values(d.Offers, l.Waits, d.Headers, &b)
		d.Cancels = values(d.Cancels, l.Cancels, d.Headers, &b)
	}
	if len(t.CancelOn) > 0 && d.ReceivedAt.IsZero() {
		// An operator's replay has no received_at yet; the queue would
		// give it one at Enqueue, other than the one a cancel_on on
		// /event/received_at keys it by here.
		d.ReceivedAt = time.Now()
	}
	for i, c := range t.CancelOn {
		if v, ok := eventValue(c.match, d, &b); ok {
			if s, ok := CanonicalValue(v); ok {
				d.CancelKeys = append(d.CancelKeys, touba.MatchValue{Key: touba.CancelKey(t.Ref, i), Value: s})
			}
		}
	}
}

func values(out []touba.MatchValue, ls []Listener, headers map[string]string, b *lazyBody) []touba.MatchValue {
	for _, l := range ls {
		v, ok := deliveryValue(l.on, headers, b)
		if !ok {
			continue
		}
		if s, ok := CanonicalValue(v); ok {
			out = append(out, touba.MatchValue{Key: l.Key, Value: s})
		}
	}
	return out
}

// deliveryValue is the value at toks in {"headers": ..., "body": ...}.
func deliveryValue(toks []string, headers map[string]string, b *lazyBody) (any, bool) {
	switch toks[0] {
	case "headers":
		switch len(toks) {
		case 1:
			h := make(map[string]any, len(headers))
			for k, v := range headers {
				h[k] = v
			}
			return h, true
		case 2:
			v, ok := headers[toks[1]]
			return v, ok
		}
		return nil, false // a header's value is a string: nothing below it
	case "body":
		doc, ok := b.get()
		if !ok {
			return nil, false
		}
		return jsonptr.Walk(doc, toks[1:])
	}
	return nil, false
}

// eventValue is the value at toks (the pointer after /event) in the run
// context's /event of d, as a run will see it.
func eventValue(toks []string, d *touba.Delivery, b *lazyBody) (any, bool) {
	var v string
	switch toks[0] {
	case "headers", "body":
		return deliveryValue(toks, d.Headers, b)
	case "trigger_ref":
		v = d.TriggerRef
	case "event_id":
		v = d.EventID
	case "received_at":
		v = touba.FormatTime(d.ReceivedAt)
	}
	// A string has nothing below it; an entry without an event id has none.
	if len(toks) > 1 || v == "" {
		return nil, false
	}
	return v, true
}

// lazyBody parses a delivery's body once, when a pointer first needs it.
type lazyBody struct {
	raw  []byte
	doc  any
	ok   bool
	done bool
}

// get is the body as JSON with numbers kept as written; ok is false when
// the body is not exactly one JSON document.
func (b *lazyBody) get() (any, bool) {
	if !b.done {
		b.done = true
		dec := json.NewDecoder(bytes.NewReader(b.raw))
		dec.UseNumber()
		if err := dec.Decode(&b.doc); err == nil {
			_, err = dec.Token()
			b.ok = err == io.EOF
		}
	}
	return b.doc, b.ok
}
