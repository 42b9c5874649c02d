package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	//PRUNED
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
	// Tester, when set, builds what tries triggers (TestTrigger): of the
	// running program when program is nil, else of that candidate
	// program's text (path names it in messages).
	Tester   func(program []byte, path string) (Tester, error)
	Circuits func(ctx context.Context) ([]touba.CircuitState, error)
	// NoWorker, when set, lists the worker bindings (SPEC §4.3) no worker
	// has been connected to within 60 s on this node.
	NoWorker func() []string
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
	for i := range out {
		if err := s.carries(ctx, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Deliveries lists delivery log rows, newest first.
func (s *Service) Deliveries(ctx context.Context, f DeliveryFilter) ([]touba.LoggedDelivery, error) {
	rows, err := s.State.Deliveries(ctx, touba.LogFilter{Rejected: f.Rejected, Refused: f.Refused, Code: f.Code,
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
