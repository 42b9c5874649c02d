package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
)

// Service answers the admin API from the open files. The daemon runs one
// behind its socket; the CLI runs one on the files when no daemon does.
type Service struct {
	// CountByTrigger, when set, counts the entries of each trigger by
	// status and hold instead of the queue store's HoldStore (the daemon
	// adds the runs its dispatcher holds back unleased).
	CountByTrigger func(ctx context.Context) (map[string]map[string]int64, error)

	Queue   touba.QueueStore
	State   touba.StateStore
	Journal touba.EffectJournal // nil when the daemon runs without one
	// Wake, when set, tells the dispatcher that entries are pending again.
	Wake func()
	// PausesChanged, when set, tells the dispatcher that a trigger was
	// paused or resumed here, so it rereads the pauses now rather than at
	// its next periodic read.
	PausesChanged func()
	// Compensator runs a compensation with the running configuration; nil
	// when none is loaded (the CLI on files without --program).
	Compensator func(ctx context.Context, entry *touba.Delivery, steps map[string]touba.StepOutput,
		original *touba.Effect) (*touba.Compensation, error)
	// StepInput, when set, rebuilds the input a step's effect was sent
	// under the running configuration (EffectInput).
	StepInput func(entry *touba.Delivery, steps map[string]touba.StepOutput, e *touba.Effect) (json.RawMessage, error)
	// HasTrigger, when set, tells whether the running program has a trigger;
	// a delivery replay for a trigger it lacks is refused.
	HasTrigger func(ref string) bool
	// Probe, when set, returns the daemon's last health check (the admin
	// health endpoint); nil on the CLI's own files.
	Probe func() *Health
	// Keyed, when set, gives a delivery replayed from the log its
	// concurrency key under the running program, as intake would.
	Keyed func(d *touba.Delivery)
	// HeldKeys, when set, counts the concurrency keys holding entries back
	// (the console's overview).
	HeldKeys func(ctx context.Context) (int64, error)
	// Compensable, when set, tells whether the binding of a tool declares
	// compensation support, so the console offers it only there.
	Compensable func(toolRef string) bool
	// ProgramTriggers, when set, lists the running program's triggers
	// and their tools; Circuits the circuits not closed (triggers.go).
	ProgramTriggers func() []ProgramTrigger
	Circuits        func(ctx context.Context) ([]touba.CircuitState, error)
	// Claims, when set, shares the entries' claims with the other nodes
	// and CLIs on the database (see busy).
	Claims Claims
	// History forgets and measures the backend (SPEC §8.1); nil: Storage
	// is refused. HistoryWindow is --history, 0 keeping everything.
	History       touba.HistoryStore
	HistoryWindow time.Duration
	// LastPass, when set, is the daemon's last --history pass;
	// StorageCache its last measure of the backend (the overview reads it
	// instead of measuring on every page).
	LastPass     func() *PassReport
	StorageCache func() *touba.StorageReport
	Log          zerolog.Logger

	busy busy // entries an operator action is working on
	// afterCompensateCheck, set by tests, runs between a compensation's
	// status check and its call.
	afterCompensateCheck func()
}

var _ API = (*Service)(nil)

type operatorKey struct{}

// WithOperator names who is asking, for the audit trail.
func WithOperator(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, operatorKey{}, who)
}

// Operator returns who is asking, "unknown" when nobody said.
func Operator(ctx context.Context) string {
	if who, _ := ctx.Value(operatorKey{}).(string); who != "" {
		return who
	}
	return "unknown"
}

// errText is an error's public message, or its whole text when it has no
// code: operators, unlike senders, may see internal detail.
func errText(err error) string {
	var te *touba.Error
	if errors.As(err, &te) {
		return te.Message
	}
	return err.Error()
}

func notFound(format string, args ...any) error {
	return touba.Errorf(touba.ENotFound, format, args...)
}
func badRequest(format string, args ...any) error {
	return touba.Errorf(touba.EBadRequest, format, args...)
}

// TriggerRef accepts a trigger as "trigger:name" or as its bare name.
func TriggerRef(s string) string {
	if s == "" || strings.HasPrefix(s, "trigger:") {
		return s
	}
	return "trigger:" + s
}

func entryOf(d *touba.Delivery, bodyBytes int64) Entry {
	e := Entry{QueueID: d.QueueID, TriggerRef: d.TriggerRef, EventID: d.EventID, Digest: d.Digest, Status: d.Status,
		Attempts: d.Attempts, ErrorCode: d.ErrorCode, ReceivedAt: d.ReceivedAt, UpdatedAt: d.UpdatedAt,
		RemoteAddr: d.RemoteAddr, BodyBytes: len(d.Body), ConcurrencyKey: d.ConcKey, Held: d.Held, Node: d.Node,
		ProgramDigest: d.ProgramDigest, WakeAt: d.WakeAt, MergedInto: d.MergedInto}
	if d.Body == nil && bodyBytes < 0 {
		e.BodyPurged = true
	}
	return e
}

func bodyOf(b []byte) *Body {
	out := &Body{Bytes: len(b), Base64: base64.StdEncoding.EncodeToString(b)}
	if utf8.Valid(b) {
		out.Text = string(b)
	}
	return out
}

// Entries lists queue entries, newest first (SPEC §6.1), or oldest first
// with f.Oldest or an After cursor.
func (s *Service) Entries(ctx context.Context, f EntryFilter) ([]Entry, error) {
	list, err := s.Queue.List(ctx, touba.EntryFilter{Status: f.Status, TriggerRef: TriggerRef(f.TriggerRef), Held: f.Held,
		After: f.After, Newest: !f.Oldest && f.After == "", Before: f.Before, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(list))
	for _, d := range list {
		// A done entry without a body lost it to retention (intake always
		// stores one, possibly empty).
		purged := int64(0)
		if d.Body == nil && (d.Status == touba.StatusDone || d.Status == touba.StatusMerged) {
			purged = -1
		}
		out = append(out, entryOf(d, purged))
	}
	return out, nil
}

// Entry returns an entry with its runs, checkpoints, effects, delivery
// history and operator events, and what an operator can do next.
func (s *Service) Entry(ctx context.Context, queueID string) (*EntryDetail, error) {
	d, err := s.Queue.Get(ctx, queueID)
	if err != nil {
		return nil, err
	} else if d == nil {
		return nil, notFound("no queue entry %s", queueID)
	}
	extra, err := s.Queue.Detail(ctx, queueID)
	if err != nil {
		return nil, err
	}
	out := &EntryDetail{Entry: entryOf(d, extra.BodyBytes), ErrorMessage: extra.ErrorMessage, NotBefore: extra.NotBefore,
		Headers: d.Headers, Runs: []touba.Run{}, Steps: []touba.StepOutput{}, Effects: []EffectDetail{},
		Deliveries: []touba.LoggedDelivery{}, Operator: []touba.OperatorEvent{}, Waits: []WaitDetail{}, MatchedWaits: []touba.Wait{}}
	if d.Body != nil {
		out.Body = bodyOf(d.Body)
	}
	if runs, err := s.State.Runs(ctx, queueID); err != nil {
		return nil, err
	} else if runs != nil {
		out.Runs = waitedRuns(runs, d.Status)
	}
	var effs []touba.Effect
	if s.Journal != nil {
		if effs, err = s.Journal.List(ctx, touba.EffectFilter{Scope: queueID}); err != nil {
			return nil, err
		}
		for _, e := range effs {
			ev, err := s.Journal.Events(ctx, e.Scope, e.EffectID)
			if err != nil {
				return nil, err
			}
			out.Effects = append(out.Effects, EffectDetail{Effect: e, Events: ev, Request: requestOf(ev)})
		}
	}
	steps, err := s.stepOutputs(ctx, queueID, effs)
	if err != nil {
		return nil, err
	}
	for _, so := range steps {
		out.Steps = append(out.Steps, so)
	}
	sort.Slice(out.Steps, func(i, k int) bool { return out.Steps[i].At.Before(out.Steps[k].At) })
	if rows, err := s.State.Deliveries(ctx, touba.LogFilter{QueueID: queueID, Limit: 1000}); err != nil {
		return nil, err
	} else {
		for _, r := range rows {
			out.Deliveries = append(out.Deliveries, *r)
		}
	}
	if ev, err := s.State.OperatorEvents(ctx, queueID, 1000); err != nil {
		return nil, err
	} else if ev != nil {
		out.Operator = ev
	}
	if err := s.waits(ctx, d, out); err != nil {
		return nil, err
	}
	if err := s.gathering(ctx, d, out); err != nil {
		return nil, err
	}
	out.ResumeSteps = s.resumeSteps(ctx, d)
	out.Next = s.next(ctx, d, out)
	return out, nil
}

// stepOutputs are the outputs of an entry's steps: its checkpoints, and
// the results of its applied external writes (effs, the entry's effects),
// which the journal holds instead of a checkpoint: the dispatcher writes
// none for them. Those have no RunID: the journal names the call.
func (s *Service) stepOutputs(ctx context.Context, queueID string, effs []touba.Effect) (map[string]touba.StepOutput, error) {
	steps, err := s.State.Steps(ctx, queueID)
	if err != nil {
		return nil, err
	} else if steps == nil {
		steps = map[string]touba.StepOutput{}
	}
	// After a resume with new effects a step's write is named by its
	// generation (touba.EffectIDFor): only the current one's result is the
	// step's output, under the step's id.
	gens := map[string]int{}
	if ws := s.waitStore(); ws != nil {
		if gens, err = ws.EffectGens(ctx, queueID); err != nil {
			return nil, err
		}
	}
	for _, e := range effs {
		id, ok := touba.StepOfEffect(queueID, e.EffectID)
		if _, comp := touba.IsCompensation(e.EffectID); !ok || comp || e.State != touba.EffectApplied || len(e.Result) == 0 {
			continue
		}
		if e.EffectID != touba.EffectIDFor(queueID, id, gens[id]) {
			continue
		}
		if _, ok := steps[id]; !ok {
			steps[id] = touba.StepOutput{StepID: id, Output: e.Result, At: e.UpdatedAt}
		}
	}
	return steps, nil
}

// next says what an operator can do with an entry in its present state.
func (s *Service) next(ctx context.Context, d *touba.Delivery, det *EntryDetail) []string {
	out := s.nextFor(ctx, d, det)
	if len(det.ResumeSteps) > 0 {
		out = append(out, "to run it again from a step (earlier steps are read back): touba-trigger queue resume "+d.QueueID+
			" --from STEP [--new-effects]   (steps: "+strings.Join(det.ResumeSteps, ", ")+")")
	}
	return out
}

func (s *Service) nextFor(ctx context.Context, d *touba.Delivery, det *EntryDetail) []string {
	switch d.Status {
	case touba.StatusParked:
		var out []string
		for _, e := range det.Effects {
			if s.blocks(ctx, e.Effect) {
				out = append(out, resolveHint(e.Scope, e.EffectID))
			}
		}
		if len(out) == 0 {
			out = append(out, "no effect awaits a verdict; after fixing the cause ("+d.ErrorCode+"): touba-trigger queue replay "+d.QueueID)
		}
		return out
	case touba.StatusFailed:
		return []string{"after fixing the cause (" + d.ErrorCode + "): touba-trigger queue replay " + d.QueueID}
	case touba.StatusCancelled:
		return []string{"cancelled (" + d.ErrorCode + "); to run it anyway: touba-trigger queue replay " + d.QueueID}
	case touba.StatusWaiting:
		if h := gatheringHint(det); h != "" {
			return []string{h}
		}
		return []string{waitingHint(det)}
	case touba.StatusMerged:
		return []string{gatheringHint(det), "to run its gathering again: touba-trigger queue replay " + d.QueueID +
			" (replays its carrier " + d.MergedInto + ", once that is failed, parked or cancelled)"}
	case touba.StatusDone:
		return []string{doneHint(ctx, s, d)}
	case touba.StatusPending:
		if det.NotBefore != nil {
			return []string{"waiting for its next attempt at " + touba.FormatTime(*det.NotBefore)}
		}
		return []string{"waiting for a dispatcher worker"}
	}
	return nil
}

// blocking reports whether an effect stops its run until an operator
// gives a verdict: unknown, and not safe to send again.
func blocking(e touba.Effect) bool {
	return e.State == touba.EffectUnknown && e.RetryMode != touba.RetryIdempotencyKey
}

// blocks is blocking, counting as unknown a dispatched effect that no call
// of the daemon holds any more (its outcome failed to commit): the next
// attempt or `effects resolve` records it unknown.
func (s *Service) blocks(ctx context.Context, e touba.Effect) bool {
	if e.State == touba.EffectDispatched && e.RetryMode != touba.RetryIdempotencyKey && s.Journal != nil {
		return s.Journal.Orphaned(ctx, e.Scope, e.EffectID)
	}
	return blocking(e)
}

// awaitingVerdict returns the effects of entry scope that block its run
// until an operator resolves them.
func (s *Service) awaitingVerdict(ctx context.Context, scope string) ([]touba.Effect, error) {
	effs, err := s.Journal.List(ctx, touba.EffectFilter{Scope: scope})
	if err != nil {
		return nil, err
	}
	var out []touba.Effect
	for _, e := range effs {
		if s.blocks(ctx, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

func resolveHint(scope, effectID string) string {
	return "find out whether " + effectID + " happened, then: touba-trigger effects resolve " + scope + " " + effectID +
		" --applied --receipt-ref REF [--result FILE]   or   --not-applied"
}

// doneHint tells how to run a done entry's event again: a replay would
// only read its effects back from the journal. Only a stored redelivery of
// the same body is offered (code TriggerReplayRejected, answered 200 or 409
// per source.redelivery): a conflicting delivery of the id carries another
// body, and enqueuing it as the same event would run what the sender never
// meant as this one.
func doneHint(ctx context.Context, s *Service, d *touba.Delivery) string {
	rows, err := s.State.Deliveries(ctx, touba.LogFilter{QueueID: d.QueueID, Code: touba.ETriggerReplayRejected, Limit: 100})
	if err == nil {
		for _, r := range rows {
			if r.BodyStored && r.Digest == d.Digest {
				return "for a real re-run, enqueue a stored redelivery of it as a new entry: touba-trigger deliveries replay " +
					r.DeliveryID + " --new-event-id"
			}
		}
	}
	return "for a real re-run, have the sender re-send the event with a new event id"
}

// Deliveries lists delivery log rows, newest first.
func (s *Service) Deliveries(ctx context.Context, f DeliveryFilter) ([]touba.LoggedDelivery, error) {
	rows, err := s.State.Deliveries(ctx, touba.LogFilter{Rejected: f.Rejected, Code: f.Code,
		TriggerRef: TriggerRef(f.TriggerRef), Since: f.Since, Before: f.Before, Limit: f.Limit})
	if err != nil {
		return nil, err
	}
	out := make([]touba.LoggedDelivery, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	return out, nil
}

// Delivery returns one delivery log row with its body.
func (s *Service) Delivery(ctx context.Context, id string) (*DeliveryDetail, error) {
	r, err := s.State.Delivery(ctx, id)
	if err != nil {
		return nil, err
	} else if r == nil {
		return nil, notFound("no delivery %s in the delivery log", id)
	}
	out := &DeliveryDetail{LoggedDelivery: *r}
	if r.BodyStored {
		out.Body = bodyOf(r.Body)
	}
	why := unreplayable(r)
	out.Replayable, out.Hint = why == "", why
	if why == "" {
		out.Hint = "touba-trigger deliveries replay " + r.DeliveryID + " [--new-event-id]"
	}
	return out, nil
}

// Effects lists journaled effects, oldest first.
func (s *Service) Effects(ctx context.Context, f EffectFilter) ([]touba.Effect, error) {
	if s.Journal == nil {
		return nil, touba.Errorf(touba.EEffectJournalRequired, "no effect journal is configured")
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	out, err := s.Journal.List(ctx, touba.EffectFilter{State: f.State, Scope: f.Scope, Limit: f.Limit})
	if out == nil {
		out = []touba.Effect{}
	}
	return out, err
}

// audit records an operator action durably and in the log. A failure to
// record is logged: the action itself already happened.
func (s *Service) audit(ctx context.Context, ev touba.OperatorEvent) {
	ev.Operator, ev.At = Operator(ctx), time.Now()
	if err := s.State.RecordOperator(context.WithoutCancel(ctx), ev); err != nil {
		s.Log.Error().Err(err).Str("action", ev.Action).Msg("cannot record the operator event")
	}
	s.Log.Info().Str("event", "operator."+ev.Action).Str("queue_id", ev.QueueID).Str("target", ev.Target).
		Str("outcome", ev.Outcome).Str("operator", ev.Operator).Str("detail", ev.Detail).Str("reason", ev.Reason).Msg("operator action")
}

// auditAll records many operator actions in one transaction (a bulk
// replay's batch), and logs each.
func (s *Service) auditAll(ctx context.Context, evs []touba.OperatorEvent) {
	who, now := Operator(ctx), time.Now()
	for i := range evs {
		evs[i].Operator, evs[i].At = who, now
	}
	if err := s.State.RecordOperators(context.WithoutCancel(ctx), evs); err != nil {
		s.Log.Error().Err(err).Int("events", len(evs)).Msg("cannot record the operator events")
	}
	for _, ev := range evs {
		s.Log.Info().Str("event", "operator."+ev.Action).Str("queue_id", ev.QueueID).Str("target", ev.Target).
			Str("outcome", ev.Outcome).Str("operator", ev.Operator).Str("detail", ev.Detail).Str("reason", ev.Reason).Msg("operator action")
	}
}
