package dispatcher

import (
	"context"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// A gathered run (SPEC §2.1 debounce, batch): the carrier's run sees every
// delivery its gathering holds, in order, as /events, and the last one as
// /event; its effects, lease, concurrency key and cancel keys stay the
// carrier's own. A merged entry is never leased: its run is the carrier's.

// gathered is how e's run reads its gathering (events.go) when e may
// carry one: its trigger gathers, or it was accepted under another
// definition of its trigger (a reload that removed debounce leaves the
// carriers it made). It reads the gathering's row, not its deliveries;
// nil when e carries none. Any other entry costs no read.
func (d *Dispatcher) gathered(ctx context.Context, t *trigger.Trigger, e *touba.Delivery) (*gathering, *verdict) {
	if t.Gather == nil && e.ProgramDigest == t.Digest {
		return nil, nil
	}
	gs, ok := d.opts.Waits.(touba.GatherStore)
	if !ok {
		return nil, nil
	}
	g, err := gs.Gathering(ctx, e.QueueID)
	if err != nil {
		return nil, &verdict{action: later, code: touba.EINTERNAL, message: "gathering: " + err.Error()}
	}
	if g == nil || g.Size < 2 {
		return nil, nil
	}
	return &gathering{ctx: ctx, gs: gs, carrier: e.QueueID, size: g.Size, bytes: g.Bytes}, nil
}
