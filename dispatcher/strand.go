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

// reloadedUnder hands a run back between two steps when a reload changed
// or removed its trigger t since the run began under cfg: the run's next
// lease reads the running program, which goes on from the checkpoints or
// parks the entry ProgramChanged (SPEC §2.3: every entry goes on under the
// new program or is parked). Going on under cfg instead would run a step
// the operator removed, or begin a wait that the reload's strand pass,
// done already, never parks.
func (d *Dispatcher) reloadedUnder(cfg *Config, t *trigger.Trigger) *verdict {
	now := d.cfg.Load()
	if now == cfg {
		return nil
	}
	nt, ok := now.trigger(t.Ref)
	switch {
	case !ok:
		// Parked here, as run parks it: handed back, it would wait for a
		// lease that a pause of the removed trigger may never give.
		return stop(park, touba.EProgramChanged, "trigger %s is not in the running program (a reload removed it while its run went on); "+
			"replay it once the program has it again (--repin pins it to the running definition)", t.Ref)
	case nt.Digest == t.Digest:
		return nil
	}
	return &verdict{action: held, code: touba.EProgramReloaded,
		message: "a reload changed trigger " + t.Ref + " while its run went on; the run goes on under the running program"}
}

// strandedSince parks what a reload done since the run began under cfg
// strands, once the run's wait is stored: a reload between the run's
// start and its wait's commit (its strand pass may have run first) would
// otherwise leave that wait open under a program that lacks it. (A crash
// here leaves it to the pass at the next start.)
func (d *Dispatcher) strandedSince(cfg *Config) {
	if now := d.cfg.Load(); now != cfg {
		d.parkStranded(now)
	}
}
