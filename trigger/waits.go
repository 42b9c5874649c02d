package trigger

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"slices"
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
			l.Waits = append(l.Waits, Listener{Key: s.WaitFor.Key(a.Ref, s.ID), Trigger: a.Ref, On: s.WaitFor.On, on: toks})
		}
		for k, c := range a.CancelOn {
			b, err := w.named(p, strictjson.Index(tp+".cancel_on", k)+".trigger", a, c.Trigger,
				"a trigger cannot cancel its own entries: each delivery would meet its own cancel key")
			if err != nil {
				return err
			}
			toks, _ := jsonptr.Parse(c.On)
			l := b.listen()
			a.CancelOn[k].key = cancelKey(a, k)
			l.Cancels = append(l.Cancels, Listener{Key: a.CancelOn[k].key, Trigger: a.Ref, On: c.On, on: toks})
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

// cancelKey is the key of t's cancel_on entry i, by meaning: the trigger
// it names, the pointer read from that trigger's deliveries, and t's
// match expression (compact), not i.
func cancelKey(t *Trigger, i int) string {
	c := t.CancelOn[i]
	var match bytes.Buffer
	if json.Compact(&match, c.Match) != nil {
		match.Write(c.Match)
	}
	return touba.CancelKeyOf(t.Ref, canonicalRef(c.Trigger), c.On, match.Bytes())
}

// Key is the key of step stepID of trigger a waiting as w says (keys by
// meaning: the awaited trigger and pointer, not the step's position).
func (w *WaitFor) Key(a, stepID string) string {
	return touba.WaitKeyOf(a, stepID, canonicalRef(w.Trigger), w.On)
}

// canonicalRef is ref with its "trigger:" prefix, however the program
// wrote it.
func canonicalRef(ref string) string { return "trigger:" + strings.TrimPrefix(ref, "trigger:") }

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
// not JSON, and an Offer or Cancel over touba.MaxKeyBytes (its own
// CancelKeys are CheckKeys' to refuse). For a trigger that is not Durable it allocates nothing: this
// is on intake's hot path. Intake calls it; so must any other path that
// enqueues a delivery (an operator's replay of a stored delivery).
//
// A cancel_on match expression that fails gives no cancel key; SetKeys,
// which intake calls, refuses the delivery instead (ExpressionFailed).
func (t *Trigger) SetDurable(d *touba.Delivery) { _ = t.setDurable(d, nil) }

func (t *Trigger) setDurable(d *touba.Delivery, b *lazyBody) error {
	d.ProgramDigest = t.Digest
	if !t.Durable() {
		return nil
	}
	if b == nil {
		b = &lazyBody{raw: d.Body}
	}
	if l := t.listeners; l != nil {
		d.Offers = values(d.Offers, l.Waits, d.Headers, b)
		d.Cancels = values(d.Cancels, l.Cancels, d.Headers, b)
	}
	if len(t.CancelOn) > 0 && d.ReceivedAt.IsZero() {
		// An operator's replay has no received_at yet; the queue would
		// give it one at Enqueue, other than the one a cancel_on on
		// /event/received_at keys it by here.
		d.ReceivedAt = time.Now()
	}
	var failed error
	for _, c := range t.CancelOn {
		if c.MatchCEL != nil {
			s, err := exprKey(c.MatchCEL, intakeVars(d, b))
			if err != nil {
				failed = cmp.Or(failed, err)
			} else if s != "" {
				d.CancelKeys = append(d.CancelKeys, touba.MatchValue{Key: c.key, Value: s})
			}
			continue
		}
		if v, ok := eventValue(c.match, d, b); ok {
			if s, ok := CanonicalValue(v); ok {
				d.CancelKeys = append(d.CancelKeys, touba.MatchValue{Key: c.key, Value: s})
			}
		}
	}
	return failed
}

func values(out []touba.MatchValue, ls []Listener, headers map[string]string, b *lazyBody) []touba.MatchValue {
	for _, l := range ls {
		v, ok := deliveryValue(l.on, headers, b)
		if !ok {
			continue
		}
		// A value over touba.MaxKeyBytes is left out: no wait or cancel
		// key can hold one (the dispatcher and intake refuse them), so it
		// could match nothing, and it is not the delivery's own key to
		// refuse it for (issue 43).
		if s, ok := CanonicalValue(v); ok && touba.KeyFits(s) {
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

// ListenToKeys adds, to the index, a listener for each key still held by
// an accepted entry (touba.KeyStore) that the program does not produce:
// a wait begun before a reload changed its wait_for keeps matching the
// trigger and pointer it began with, and an entry accepted before a
// reload changed cancel_on stays cancellable as it was. A key of the
// positional form (entries of an earlier release) is read through the
// program's step or cancel_on at that position, as that release did. A
// key whose awaited trigger the program lacks is skipped (no delivery of
// it can come). Call it before the program is given to intake.
func (p *Program) ListenToKeys(keys []string) {
	for _, key := range keys {
		l, b, cancel, ok := p.keyListener(key)
		if !ok {
			continue
		}
		ls := b.listen()
		list := &ls.Waits
		if cancel {
			list = &ls.Cancels
		}
		if !slices.ContainsFunc(*list, func(x Listener) bool { return x.Key == key }) {
			*list = append(*list, l)
		}
	}
}

// keyListener is the listener key needs, on the trigger b it reads.
func (p *Program) keyListener(key string) (l Listener, b *Trigger, cancel, ok bool) {
	if k, parsed := touba.ParseKey(key); parsed {
		b, ok = p.byName[strings.TrimPrefix(k.Awaited, "trigger:")]
		toks, err := jsonptr.Parse(k.On)
		if !ok || err != nil {
			return Listener{}, nil, false, false
		}
		return Listener{Key: key, Trigger: k.Awaiting, On: k.On, on: toks}, b, k.Cancel, true
	}
	hash := strings.LastIndexByte(key, '#')
	if hash < 0 {
		return Listener{}, nil, false, false
	}
	a, ok := p.byName[strings.TrimPrefix(key[:hash], "trigger:")]
	if !ok {
		return Listener{}, nil, false, false
	}
	rest := key[hash+1:]
	var target, on string
	if i, found := strings.CutPrefix(rest, "cancel_on/"); found {
		n, err := strconv.Atoi(i)
		if err != nil || n < 0 || n >= len(a.CancelOn) {
			return Listener{}, nil, false, false
		}
		target, on, cancel = a.CancelOn[n].Trigger, a.CancelOn[n].On, true
	} else {
		for _, s := range a.Steps {
			if s.ID == rest && s.WaitFor != nil {
				target, on = s.WaitFor.Trigger, s.WaitFor.On
			}
		}
	}
	b, ok = p.byName[strings.TrimPrefix(target, "trigger:")]
	toks, err := jsonptr.Parse(on)
	if !ok || err != nil {
		return Listener{}, nil, false, false
	}
	return Listener{Key: key, Trigger: a.Ref, On: on, on: toks}, b, cancel, true
}
