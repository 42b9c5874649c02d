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

// gathered reads the deliveries merged into e (e.Gathered) when e may
// carry a gathering: its trigger gathers, or it was accepted under another
// definition of its trigger (a reload that removed debounce leaves the
// carriers it made). Any other entry costs no read.
func (d *Dispatcher) gathered(ctx context.Context, t *trigger.Trigger, e *touba.Delivery) *verdict {
	if t.Gather == nil && e.ProgramDigest == t.Digest {
		return nil
	}
	gs, ok := d.opts.Waits.(touba.GatherStore)
	if !ok {
		return nil
	}
	list, err := gs.Gathered(ctx, e.QueueID)
	if err != nil {
		return &verdict{action: later, code: touba.EINTERNAL, message: "gathered deliveries: " + err.Error()}
	}
	e.Gathered = list
	return nil
}
