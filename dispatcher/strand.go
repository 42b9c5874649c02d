package dispatcher

import (
	"context"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/trigger"
)

// strandBatch bounds the entries one ParkStranded transaction parks, so
// a removed trigger's long backlog never holds intake's writer long.
const strandBatch = 500

// parkStranded parks what c strands (SPEC §2.3 reloads): pending or
// waiting entries of triggers c lacks, and waiting ones whose step c
// lacks. Run at start and after each reload, once c is in place, so a run
// leased meanwhile meets c itself (run parks an entry of a missing
// trigger the same way).
func (d *Dispatcher) parkStranded(c *Config) {
	ss, ok := d.queue.(touba.StrandStore)
	if !ok || c == nil || c.Program == nil {
		return
	}
	shape := shapeOf(c.Program)
	ctx, cancel := context.WithTimeout(d.runCtx, saveTimeout)
	defer cancel()
	for {
		got, err := ss.ParkStranded(ctx, shape, strandBatch)
		if err != nil {
			d.log.Error().Err(err).Msg("cannot park the entries the program strands; they are parked when leased or at the next reload")
			return
		}
		for _, s := range got {
			d.log.Warn().Str("queue_id", s.QueueID).Str("trigger_ref", s.TriggerRef).Str("code", touba.EProgramChanged).
				Str("reason", s.Reason).Msg("entry parked: the program no longer has what it waits in")
		}
		if len(got) < strandBatch {
			return
		}
	}
}

// shapeOf is p as ParkStranded reads it.
func shapeOf(p *trigger.Program) touba.ProgramShape {
	shape := make(touba.ProgramShape, len(p.Triggers))
	for _, t := range p.Triggers {
		steps := make(map[string]string, len(t.Steps))
		for _, st := range t.Steps {
			switch {
			case st.Sleep != nil:
				steps[st.ID] = touba.WaitSleep
			case st.WaitFor != nil:
				steps[st.ID] = touba.WaitEvent
			default:
				steps[st.ID] = ""
			}
		}
		shape[t.Ref] = steps
	}
	return shape
}
