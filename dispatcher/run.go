package dispatcher

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/crashpoint"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/tracing"
	"github.com/touba/touba-trigger/trigger"
)

// Crash points between two durable steps (TOUBA_CRASHPOINT, tests only).
const (
	CrashAfterPrepared   = "after-prepared"    // prepared written, handler not started
	CrashAfterDispatched = "after-dispatched"  // dispatched written, request not sent
	CrashAfterAnswer     = "after-answer"      // handler answered, outcome not written
	CrashAfterOutcome    = "after-outcome"     // outcome written, step not checkpointed
	CrashAfterCheckpoint = "after-checkpoint"  // all steps checkpointed, entry not done
	CrashAfterWaitBegun  = "after-wait-begun"  // BeginWait committed (open, or matched by an earlier offer), run not gone on
	CrashAfterWake       = "after-wake"        // Wake committed, the leaser not woken
	CrashAfterHeld       = "after-held"        // a run handed back on its binding (HoldRun committed)
	CrashAfterHeldLeased = "after-held-leased" // a lease took runs handed back, none started
	// CrashAfterGatherStarted: the wake loop started due gatherings
	// (StartDue committed, carriers pending), the leaser not woken. Intake
	// has the same point for a batch a delivery filled.
	CrashAfterGatherStarted = "after-gather-started"
)

type action int

const (
	retry   action = iota // back to pending after a backoff, within the retry limits
	fail                  // failed now
	park                  // parked for an operator
	later                 // someone else holds the effect: come back soon, no verdict
	waiting               // BeginWait moved the entry to waiting: it is not the run's any more
	cancel                // a cancel_on match arrived: the entry ends cancelled
	ended                 // the store ended the entry already (cancelled while the run held it)
	held                  // a binding holds the run back: handed back to wait, no attempt spent (hold.go)
	skipped               // a step's when was false: the run goes on with the next step (never a run's verdict)
)

// verdict is why a run stopped before its last step.
type verdict struct {
	action  action
	code    string
	message string
	hold    string // held: the binding that holds the run back
}

func stop(a action, code, format string, args ...any) *verdict {
	e := touba.Errorf(code, format, args...)
	return &verdict{action: a, code: e.Code, message: e.Message}
}

// fromError turns a step error into a verdict: retried unless its code
// says a retry cannot help.
func fromError(err *touba.Error) *verdict {
	if permanent[err.Code] {
		return &verdict{action: fail, code: err.Code, message: err.Message}
	}
	return &verdict{action: retry, code: err.Code, message: err.Message}
}

func (d *Dispatcher) run(e *touba.Delivery, r *reservation) {
	defer r.drop()
	cfg := d.cfg.Load()
	log := d.log.With().Str("trigger_ref", e.TriggerRef).Str("event_id", e.EventID).Str("queue_id", e.QueueID).Logger()
	run := &touba.Run{RunID: uuidv7.New(), QueueID: e.QueueID, TriggerRef: e.TriggerRef, Attempt: e.Attempts,
		StartedAt: d.opts.Now()}
	runID := run.RunID
	ctx, span := d.opts.Tracing.StartRun(d.runCtx, tracing.Run{TraceParent: e.TraceParent, TriggerRef: e.TriggerRef,
		EventID: e.EventID, QueueID: e.QueueID, RunID: runID, Attempt: e.Attempts})
	defer func() { tracing.EndRun(span, run.Status, run.ErrorCode, run.ErrorMessage) }()
	if id := tracing.TraceID(ctx); id != "" {
		log = log.With().Str(tracing.FieldTraceID, id).Logger()
	}
	ctx = withReservation(ctx, r)
	ctx, stopRenew := d.renew(ctx, e, log)
	defer stopRenew()
	t, ok := cfg.trigger(e.TriggerRef)
	if !ok {
		// Stranded by a reload (SPEC §2.3): parked for an operator, as
		// parkStranded parks the ones no lease took first.
		d.settle(e, run, nil, stop(park, touba.EProgramChanged, "trigger %s is not in the running program (a reload stranded it); "+
			"replay it once the program has it again (--repin pins it to the running definition)", e.TriggerRef), log)
		return
	}
	log.Debug().Str("run_id", runID).Int("attempt", e.Attempts).Msg("run started")
	d.settle(e, run, t, d.steps(ctx, cfg, t, e, runID, log), log)
}

// steps runs the trigger's steps from the first one without a checkpoint.
// ctx is the run's: d.runCtx with the run's span.
//
// An external write's output is not checkpointed: the journal's applied
// record holds it already (SPEC §5, result), and a later run's step finds
// it there and calls nothing, as after a crash between the outcome and the
// checkpoint. One row, and a copy of the output, fewer per effect.
func (d *Dispatcher) steps(ctx context.Context, cfg *Config, t *trigger.Trigger, e *touba.Delivery, runID string, log zerolog.Logger) *verdict {
	// An entry's first run has no checkpoints: only a run writes them, and
	// a run needs a lease. Any later lease (a retry, a postponed run, a
	// crash's requeue, a replay, a wake, a resume) reads them, and the
	// effect generations a resume may have given its steps.
	var done map[string]touba.StepOutput
	var gens map[string]int
	if !e.FirstLease {
		var err error
		if done, err = d.state.Steps(ctx, e.QueueID); err != nil {
			return &verdict{action: later, code: touba.EINTERNAL, message: err.Error()}
		}
		if d.opts.Waits != nil {
			if gens, err = d.opts.Waits.EffectGens(ctx, e.QueueID); err != nil {
				return &verdict{action: later, code: touba.EINTERNAL, message: "effect generations: " + err.Error()}
			}
		}
		if v := d.pinned(ctx, t, e, done, gens, log); v != nil {
			return v
		}
	}
	g, v := d.gathered(ctx, t, e)
	if v != nil {
		return v
	}
	rc := newRunContext(e, g)
	ran := 0 // steps this run began
	for _, st := range t.Steps {
		if so, ok := done[st.ID]; ok {
			if err := rc.setOutput(st.ID, so.Output); err != nil {
				return stop(fail, touba.EINTERNAL, "checkpoint of step %s: %v", st.ID, err)
			}
			continue
		}
		if ran > 0 {
			if v := d.reloadedUnder(cfg, t); v != nil {
				return v
			}
		}
		// A trigger paused while its run went on: the run gives its worker
		// back between two steps, pending, and the lease, which skips the
		// paused trigger, takes it again once it resumes (SPEC §2.2).
		if ran > 0 && d.pausedNow(e.TriggerRef) {
			return &verdict{action: held, code: touba.ETriggerPaused,
				message: "trigger " + e.TriggerRef + " is paused; the run goes on once it resumes"}
		}
		ran++
		// Between two steps a cancel_on match ends the run. A trigger
		// without cancel_on is not asked for, unless the entry was accepted
		// under another definition of it: a reload that removed cancel_on
		// leaves a cancel already requested standing (SPEC §2.3).
		if len(t.CancelOn) > 0 || e.ProgramDigest != t.Digest {
			if v := d.cancelRequested(ctx, e, st.ID); v != nil {
				return v
			}
		}
		if st.When != nil {
			if v := d.skip(e, st, rc, runID, log); v != nil {
				if v.action == skipped {
					continue
				}
				return v
			}
		}
		sctx, sspan := d.opts.Tracing.StartStep(ctx, st.ID, st.Kind())
		var out json.RawMessage
		var journaled bool
		var v *verdict
		if st.Sleep != nil || st.WaitFor != nil {
			out, v = d.durable(sctx, cfg, t, e, st, rc, log)
		} else {
			out, journaled, v = d.step(sctx, cfg, e, runID, st, rc, gens, log)
		}
		if v != nil {
			tracing.EndStep(sspan, v.code, v.message)
			return v
		}
		tracing.EndStep(sspan, "", "")
		if cfg.Secrets.ContainsJSON(out) {
			return stop(park, touba.ESecretValueRefused, "output of step %s holds a secret value; not stored", st.ID)
		}
		if err := rc.setOutput(st.ID, out); err != nil {
			return stop(fail, touba.EHandlerProtocolError, "%v", err)
		}
		if journaled {
			continue
		}
		if err := d.state.SaveStep(e.QueueID, e.LeaseToken, st.ID, runID, out); err != nil {
			if touba.ErrorCode(err) == touba.ELeaseLost {
				return stop(later, touba.ELeaseLost, "checkpoint of step %s: %s", st.ID, touba.ErrorMessage(err))
			}
			return &verdict{action: later, code: touba.EINTERNAL, message: "checkpoint: " + err.Error()}
		}
	}
	return nil
}

// settle ends the run: the entry done, failed, parked or pending again.
func (d *Dispatcher) settle(e *touba.Delivery, run *touba.Run, t *trigger.Trigger, v *verdict, log zerolog.Logger) {
	bg := context.Background()
	status, code, msg := touba.StatusDone, "", ""
	var err error
	switch {
	case v == nil:
		crashpoint.Hit(CrashAfterCheckpoint)
		err = d.queue.Finish(bg, e.QueueID, e.LeaseToken, touba.StatusDone, "", "")
		log.Info().Str("run_id", run.RunID).Int("attempt", e.Attempts).Msg("run done")
	case v.action == waiting:
		// The entry waits, its lease ended by BeginWait: nothing of it is
		// this run's to write.
		status, msg = touba.StatusWaiting, v.message
		log.Debug().Str("run_id", run.RunID).Str("reason", v.message).Msg("run waiting")
	case v.action == held:
		status, code, msg = "held", v.code, v.message
		err = d.hold(e, v)
		log.Debug().Str("run_id", run.RunID).Str("hold", v.hold).Str("code", v.code).Msg("run handed back until its binding frees")
	case v.action == ended:
		status, code, msg = touba.StatusCancelled, v.code, v.message
		log.Info().Str("run_id", run.RunID).Str("reason", v.message).Msg("run cancelled")
	case v.action == cancel:
		status, code, msg = touba.StatusCancelled, v.code, v.message
		err = d.queue.Finish(bg, e.QueueID, e.LeaseToken, touba.StatusCancelled, v.code, v.message)
		log.Info().Str("run_id", run.RunID).Str("reason", v.message).Msg("run cancelled")
	case d.stopping() && d.runCtx.Err() != nil:
		// Killed by shutdown: the next start resumes it, and the journal
		// decides what its interrupted effect allows.
		status, code, msg = "interrupted", v.code, v.message
		err = d.queue.Retry(bg, e.QueueID, e.LeaseToken, d.opts.Now(), v.code, v.message)
	case v.action == later:
		status, code, msg = "retry", v.code, v.message
		err = d.queue.Postpone(bg, e.QueueID, e.LeaseToken, d.opts.Now().Add(time.Second), v.code, v.message)
	case v.action == retry && t != nil && e.Attempts < t.Retry.MaxAttempts:
		status, code, msg = "retry", v.code, v.message
		wait := delay(t.Retry, e.Attempts)
		err = d.queue.Retry(bg, e.QueueID, e.LeaseToken, d.opts.Now().Add(wait), v.code, v.message)
		log.Info().Str("code", v.code).Dur("wait", wait).Int("attempt", e.Attempts).Msg("run will be retried")
	case v.action == park:
		status, code, msg = touba.StatusParked, v.code, v.message
		err = d.queue.Finish(bg, e.QueueID, e.LeaseToken, touba.StatusParked, v.code, v.message)
		log.Warn().Str("event", "run.needs_reconciliation").Str("code", v.code).Str("reason", v.message).
			Msg("run parked until an operator reconciles it")
	default: // fail, or retries exhausted
		status, code, msg = touba.StatusFailed, v.code, v.message
		err = d.queue.Finish(bg, e.QueueID, e.LeaseToken, touba.StatusFailed, v.code, v.message)
		log.Warn().Str("code", v.code).Str("reason", v.message).Int("attempt", e.Attempts).Msg("run failed")
	}
	if touba.ErrorCode(err) == touba.ELeaseLost {
		// Another node took the entry over: its view stands.
		log.Warn().Str("event", "lease.lost").Str("reason", touba.ErrorMessage(err)).
			Msg("lease lost during the run; the entry is another node's now")
		status, code, msg = "lease_lost", touba.ELeaseLost, touba.ErrorMessage(err)
	} else if err != nil {
		log.Error().Err(err).Msg("cannot record the end of a run; the entry stays running until the next start")
	}
	run.Status, run.ErrorCode, run.ErrorMessage = status, code, msg
	d.state.RecordRun(run)
	if e.ConcKey != "" {
		// Its end may have released the next entry of its key: lease now
		// rather than at the next poll.
		d.Notify()
	}
}

// renew keeps the entry's lease while the run goes on, every RenewEvery.
// A renewal refused with LeaseLost ends the run's context: another node
// holds the entry, so this one starts no new call.
func (d *Dispatcher) renew(ctx context.Context, e *touba.Delivery, log zerolog.Logger) (context.Context, func()) {
	if d.opts.RenewEvery <= 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	// The lease ends LeaseTTL after the last renewal the database took (by
	// its clock); counted here from when that renewal was sent, a margin
	// before: past it this node stops, whether or not it hears back.
	//
	// The renewals run on a timer, re-armed after each, and the expiry's
	// timer is made at the first (at once if RenewEvery is not below the
	// hold; the server renews every third of the TTL, well before it): a
	// run shorter than RenewEvery (most) starts no goroutine and makes one
	// timer (issue 42: a goroutine, a ticker and two timers per run were
	// 2-3% of the daemon's CPU on PostgreSQL).
	hold := d.opts.LeaseTTL - min(5*time.Second, d.opts.LeaseTTL/4)
	began := time.Now()
	var mu sync.Mutex
	stopped, lapsed := false, false
	var tick, expire *time.Timer
	expired := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped || lapsed {
			return
		}
		// The run's context is ended for good; renewals go on (its end is
		// written under the lease), a later one re-arms nothing.
		lapsed = true
		log.Warn().Str("event", "lease.expiring").Dur("unrenewed", hold).
			Msg("lease not renewed for --lease-ttl minus a margin; no new call starts and retries stop")
		cancel()
	}
	mu.Lock()
	defer mu.Unlock()
	if d.opts.LeaseTTL > 0 && d.opts.RenewEvery >= hold {
		expire = time.AfterFunc(hold, expired)
	}
	renewal := func() {
		mu.Lock()
		if stopped {
			mu.Unlock()
			return
		}
		if expire == nil && d.opts.LeaseTTL > 0 {
			expire = time.AfterFunc(max(hold-time.Since(began), 0), expired)
		}
		mu.Unlock()
		sent := time.Now()
		err := d.queue.Renew(context.WithoutCancel(ctx), e.QueueID, e.LeaseToken)
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if err == nil && expire != nil && !lapsed {
			expire.Reset(hold - time.Since(sent))
		}
		if touba.ErrorCode(err) == touba.ELeaseLost {
			stopped = true
			if expire != nil {
				expire.Stop()
			}
			log.Warn().Str("event", "lease.lost").Msg("lease lost while running; no new call starts")
			cancel()
			return
		} else if err != nil {
			log.Warn().Err(err).Msg("lease renewal failed; retrying")
		}
		tick.Reset(max(d.opts.RenewEvery-time.Since(sent), 0))
	}
	tick = time.AfterFunc(d.opts.RenewEvery, renewal)
	return ctx, func() {
		mu.Lock()
		stopped = true
		tick.Stop()
		if expire != nil {
			expire.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// rawOrNull makes an absent output the JSON null, so a checkpoint and a
// stored result are always JSON.
func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// skip evaluates st's when (SPEC §2.4). False skips the step: its output
// is null, checkpointed under touba.SkippedRunID so the history shows it
// skipped, and nothing is journaled; the verdict is then skipped. True
// gives nil; an expression that fails ends the run failed with
// ExpressionFailed (not retried).
func (d *Dispatcher) skip(e *touba.Delivery, st trigger.Step, rc *runContext, runID string, log zerolog.Logger) *verdict {
	ok, err := rc.when(st.When)
	if err != nil {
		return stop(fail, touba.EExpressionFailed, "when of step %s: %s", st.ID, touba.ErrorMessage(err))
	}
	if ok {
		return nil
	}
	null := json.RawMessage("null")
	if err := rc.setOutput(st.ID, null); err != nil {
		return stop(fail, touba.EINTERNAL, "%v", err)
	}
	if err := d.state.SaveStep(e.QueueID, e.LeaseToken, st.ID, touba.SkippedRunID(runID), null); err != nil {
		if touba.ErrorCode(err) == touba.ELeaseLost {
			return stop(later, touba.ELeaseLost, "checkpoint of step %s: %s", st.ID, touba.ErrorMessage(err))
		}
		return &verdict{action: later, code: touba.EINTERNAL, message: "checkpoint: " + err.Error()}
	}
	log.Debug().Str("step", st.ID).Msg("step skipped: its when is false")
	return &verdict{action: skipped}
}
