package dispatcher

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/handler"
	"github.com/touba/touba-trigger/internal/jsonptr"
)

// A carrier's gathering as its run reads it (issue 43). Before, the run
// read every merged entry with its body before its first step and decoded
// them all into the tree of /events on the first $ref, whatever the steps
// read: about five times the bodies in memory, for a run whose steps may
// read none of them. Now a run reads what its steps name: /event, the last
// delivery alone; /events/N, delivery N alone; /events (or the whole
// document), every delivery once, one at a time from the store, each
// written in canonical form straight into the input being built, never
// decoded into a tree. What a run holds of its gathering is then the
// input (the bodies once, in canonical form), and the gathering's bodies
// are bounded at intake (max_bytes).

// collectEvery is how many bytes of bodies a run reads for /events between
// two collections of what it read (appendEvents): a gathering under the
// default max_bytes is read without one.
const collectEvery = int(touba.DefaultGatherMaxBytes)

// gathering reads a carrier's merged entries from the store.
type gathering struct {
	ctx     context.Context
	gs      touba.GatherStore
	carrier string
	size    int   // the deliveries it holds, the carrier included
	bytes   int64 // the bytes of their bodies
}

// eventsSize is about the size of /events written: the bodies, and for
// each delivery its members as the entry's own take, with room to spare,
// so that the input is written into one buffer, never grown and copied
// (each growth of a buffer of the gathering's size held it twice over).
func (rc *runContext) eventsSize() int {
	if rc.g == nil {
		return 0
	}
	each := 256 + len(rc.e.EventID) + len(rc.e.QueueID) + len(rc.e.TriggerRef)
	for k, v := range rc.e.Headers {
		each += len(k) + len(v) + 8
	}
	n := rc.g.bytes + int64(rc.g.size*each)
	return int(n + n/32)
}

// event is /event: the last delivery of the entry's gathering, read once.
func (rc *runContext) event() (*touba.Delivery, error) {
	if rc.last != nil {
		return rc.last, nil
	}
	switch {
	case rc.g != nil:
		d, err := rc.g.gs.GatheredAt(rc.g.ctx, rc.g.carrier, rc.g.size)
		if err == nil && d == nil {
			// The last place is gone (--history forgot merged entries of
			// a finished carrier that is replayed): the last one left.
			err = rc.g.gs.EachGathered(rc.g.ctx, rc.g.carrier, func(m *touba.Delivery) error { d = m; return nil })
		}
		if err != nil {
			return nil, touba.Errorf(touba.EINTERNAL, "gathered deliveries: %v", err)
		}
		rc.last = rc.e
		if d != nil {
			rc.last = d
		}
	case len(rc.e.Gathered) > 0:
		rc.last = rc.e.Gathered[len(rc.e.Gathered)-1]
	default:
		rc.last = rc.e
	}
	return rc.last, nil
}

// at is delivery i of /events (0 is the entry), nil when there is none.
func (rc *runContext) at(i int) (*touba.Delivery, error) {
	switch {
	case i == 0:
		return rc.e, nil
	case rc.g != nil:
		if i >= rc.g.size {
			return nil, nil
		}
		d, err := rc.g.gs.GatheredAt(rc.g.ctx, rc.g.carrier, i+1)
		if err != nil {
			return nil, touba.Errorf(touba.EINTERNAL, "gathered deliveries: %v", err)
		}
		return d, nil
	case i <= len(rc.e.Gathered):
		return rc.e.Gathered[i-1], nil
	}
	return nil, nil
}

// each calls fn with every delivery of /events in order, reading the
// merged ones one at a time.
func (rc *runContext) each(fn func(*touba.Delivery) error) error {
	if err := fn(rc.e); err != nil {
		return err
	}
	if rc.g != nil {
		return rc.g.gs.EachGathered(rc.g.ctx, rc.g.carrier, fn)
	}
	for _, d := range rc.e.Gathered {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

// appendEvents appends what ptr, a pointer into /events (toks its
// tokens), names: the whole array, written delivery by delivery, or what
// it names in one delivery, read alone.
func (rc *runContext) appendEvents(out []byte, ptr string, toks []string) ([]byte, error) {
	if len(toks) == 1 {
		out = append(out, '[')
		first := true
		var werr error
		var read int
		err := rc.each(func(d *touba.Delivery) error {
			if !first {
				out = append(out, ',')
			}
			first = false
			out, werr = appendEvent(out, d)
			// The store's copy of each body read is garbage at once, and the
			// daemon's GC percent (300, for intake) would let up to three
			// times the input of it stand before collecting: past
			// collectEvery bytes read, it is collected now.
			if read += len(d.Body); read >= collectEvery {
				read = 0
				runtime.GC()
			}
			return werr
		})
		if werr != nil {
			return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, werr)
		}
		if err != nil {
			return nil, touba.Errorf(touba.EINTERNAL, "gathered deliveries: %v", err)
		}
		return append(out, ']'), nil
	}
	i, ok := jsonptr.Index(toks[1])
	if !ok {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q resolves to nothing", ptr)
	}
	d, err := rc.at(i)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q resolves to nothing", ptr)
	}
	if len(toks) == 2 {
		if out, err = appendEvent(out, d); err != nil {
			return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
		}
		return out, nil
	}
	// An index token has no escapes: the rest of ptr follows it as written.
	rest := strings.TrimPrefix(ptr, "/events/"+toks[1])
	got, err := jsonptr.Get(eventDoc(d), rest)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q resolves to nothing", ptr)
	}
	b, err := canonical(got)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref %q: %v", ptr, err)
	}
	return append(out, b...), nil
}

// appendDocument appends the whole run context, {"event", "events",
// "steps"} in canonical (key) order, /events written delivery by delivery.
func (rc *runContext) appendDocument(out []byte) ([]byte, error) {
	if err := rc.materialize(""); err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref \"\": %v", err)
	}
	last, err := rc.event()
	if err != nil {
		return nil, err
	}
	out = append(out, `{"event":`...)
	if out, err = appendEvent(out, last); err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref \"\": %v", err)
	}
	out = append(out, `,"events":`...)
	if out, err = rc.appendEvents(out, "/events", []string{"events"}); err != nil {
		return nil, err
	}
	steps, err := canonical(rc.steps)
	if err != nil {
		return nil, touba.Errorf(touba.EStepInputUnresolved, "$ref \"\": %v", err)
	}
	out = append(append(append(out, `,"steps":`...), steps...), '}')
	return out, nil
}

// appendEvent appends delivery d as /event shows it, in canonical form:
// members in key order, the body as Canonical writes it when it accepts
// it (what decoding and encoding it gives), else decoded as eventDoc
// does (a body that is not JSON is a string).
func appendEvent(out []byte, d *touba.Delivery) ([]byte, error) {
	out = append(out, `{"body":`...)
	var err error
	if out, err = handler.AppendCanonical(out, d.Body); err != nil {
		body, err := canonical(parseBody(d.Body))
		if err != nil {
			return nil, fmt.Errorf("body of %s: %w", d.QueueID, err)
		}
		out = append(out, body...)
	}
	headers := make(map[string]any, len(d.Headers))
	for k, v := range d.Headers {
		headers[k] = v
	}
	for _, m := range []struct {
		key string
		v   any
	}{{"event_id", d.EventID}, {"headers", headers}, {"queue_id", d.QueueID},
		{"received_at", touba.FormatTime(d.ReceivedAt)}, {"trigger_ref", d.TriggerRef}} {
		b, err := canonical(m.v)
		if err != nil {
			return nil, fmt.Errorf("%s of %s: %w", m.key, d.QueueID, err)
		}
		out = append(append(append(append(out, ',', '"'), m.key...), '"', ':'), b...)
	}
	return append(out, '}'), nil
}
