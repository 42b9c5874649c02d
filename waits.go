package touba

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Durable steps (SPEC §2.3): sleeps, waits for another trigger's event,
// cancellation, version pinning and resume from a step. A waiting entry
// holds no worker, goroutine or connection: it is a row in state waiting
// with a wake_at (a sleep's end, a wait's timeout) that Wake reads through
// an index, and a wait for an event is a row keyed by (WaitKey, value)
// that intake consults in the same transaction as the awaited delivery's
// enqueue, so a match and its delivery commit together.

// StatusWaiting: a sleep or a wait for an event in progress (SPEC §3.2).
const StatusWaiting = "waiting"

// Wait kinds.
const (
	WaitSleep = "sleep"
	WaitEvent = "event"
)

// Wait states. A wait is open while its entry waits; it ends exactly once:
// woke (a sleep's time came), matched (a delivery of the awaited trigger
// matched), timed_out (a wait_for's timeout came first) or cancelled (its
// entry was cancelled while waiting).
const (
	WaitOpen      = "open"
	WaitWoke      = "woke"
	WaitMatched   = "matched"
	WaitTimedOut  = "timed_out"
	WaitCancelled = "cancelled"
)

// Error codes of durable steps.
const (
	// EWaitTimedOut: a wait_for with on_timeout "fail" saw no match in time.
	EWaitTimedOut = "WaitTimedOut"
	// EWaitMatchPurged: the delivery a wait_for matched lost its body and
	// headers to --retention, or left the queue, before the waiting entry
	// read it; the run fails rather than give the next steps an empty
	// delivery (issue 42). `queue resume --from STEP` waits anew.
	EWaitMatchPurged = "WaitMatchPurged"
	// EProgramChanged: a reload changed a step the entry already completed
	// (its id or tool); parked for an operator's replay or resume.
	EProgramChanged = "ProgramChanged"
	// ERunCancelled: the entry was cancelled by a cancel_on match.
	ERunCancelled = "RunCancelled"
	// EEntryNotResumable: resume of an entry that is pending, running or
	// waiting, or from a step its trigger does not have.
	EEntryNotResumable = "EntryNotResumable"
)

// Keys by meaning (SPEC §2.3 reloads). An offer and a wait match when
// their key and value are equal (each offer consumed by at most one wait
// of one key), a cancel and an entry's cancel key likewise. A key names
// what it means: the awaiting trigger and step (or cancel_on), the
// awaited trigger and the pointer read from its deliveries (and, for a
// cancel, the entry's match expression). Reordering cancel_on, adding to
// it, or changing a wait_for's target changes no key an accepted entry
// holds, and intake keeps reading every key still held (ParseKey).

// WaitKeyOf is the key of step stepID of trigger a waiting for
// deliveries of trigger b whose value at pointer on matches.
func WaitKeyOf(a, stepID, b, on string) string { return a + "#" + stepID + keyArgs(b, on) }

// CancelKeyOf is the key of a cancel_on of trigger a naming trigger b,
// read at pointer on of b's deliveries, matched against match (its
// compact JSON) resolved on a's.
func CancelKeyOf(a, b, on string, match []byte) string {
	args := keyArgs(b, on)
	if !json.Valid(match) {
		m, _ := json.Marshal(string(match))
		match = m
	}
	return a + "#" + cancelOn + args[:len(args)-1] + "," + string(match) + "]"
}

const cancelOn = "cancel_on"

func keyArgs(parts ...string) string {
	b, _ := json.Marshal(parts) // strings always marshal
	return string(b)
}

// ParsedKey is a key by meaning, read back.
type ParsedKey struct {
	Awaiting string // trigger a
	StepID   string // "" for a cancel key
	Awaited  string // trigger b
	On       string
	Cancel   bool
}

// ParseKey reads a key of WaitKeyOf or CancelKeyOf; false for any other
// (a key of the positional form, WaitKey and CancelKey).
func ParseKey(key string) (ParsedKey, bool) {
	hash := strings.IndexByte(key, '#')
	open := strings.IndexByte(key, '[')
	if hash < 0 || open < hash {
		return ParsedKey{}, false
	}
	var parts []json.RawMessage
	if json.Unmarshal([]byte(key[open:]), &parts) != nil || len(parts) < 2 {
		return ParsedKey{}, false
	}
	k := ParsedKey{Awaiting: key[:hash], StepID: key[hash+1 : open]}
	if json.Unmarshal(parts[0], &k.Awaited) != nil || json.Unmarshal(parts[1], &k.On) != nil {
		return ParsedKey{}, false
	}
	if k.StepID == cancelOn && len(parts) == 3 {
		k.StepID, k.Cancel = "", true
	} else if len(parts) != 2 {
		return ParsedKey{}, false
	}
	return k, true
}

// WaitKey is the positional key of the releases before keys by meaning:
// the awaiting trigger and step only. Entries those releases accepted
// still hold it; intake reads it through the running program.
func WaitKey(triggerRef, stepID string) string { return triggerRef + "#" + stepID }

// CancelKey is the positional key of cancel_on entry i of triggerRef, as
// releases before keys by meaning wrote it (see WaitKey).
func CancelKey(triggerRef string, i int) string {
	return triggerRef + "#cancel_on/" + strconv.Itoa(i)
}

// MatchValue is one value a delivery carries for a wait or a cancel: Key
// is a WaitKey or a CancelKey, Value the compact JSON of the value (the
// same rendering on both sides, so equal values are equal strings).
type MatchValue struct {
	Key   string
	Value string
}

// Wait is one sleep or wait_for step of one entry: at most one per
// (QueueID, StepID) until a resume from that step removes it.
type Wait struct {
	QueueID string `json:"queue_id"`
	StepID  string `json:"step_id"`
	Kind    string `json:"kind"` // WaitSleep or WaitEvent
	// Key and Value: what an event wait awaits (WaitKey, compact JSON).
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	// WakeAt is a sleep's end or an event wait's timeout; nil waits for
	// the event with no timeout.
	WakeAt *time.Time `json:"wake_at,omitempty"`
	State  string     `json:"state"`
	// MatchedQueueID is the delivery that matched an event wait.
	MatchedQueueID string     `json:"matched_queue_id,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	ResolvedAt     *time.Time `json:"resolved_at,omitempty"`
}

// Check refuses a wait BeginWait cannot store: one without its entry and
// step, a sleep without its end, an event wait without its key.
func (w Wait) Check() error {
	switch {
	case w.QueueID == "" || w.StepID == "":
		return fmt.Errorf("begin wait: queue id and step id are required")
	case w.Kind == WaitSleep && w.WakeAt == nil:
		return fmt.Errorf("begin wait %s/%s: a sleep needs its end", w.QueueID, w.StepID)
	case w.Kind == WaitEvent && w.Key == "":
		return fmt.Errorf("begin wait %s/%s: an event wait needs its key", w.QueueID, w.StepID)
	case w.Kind != WaitSleep && w.Kind != WaitEvent:
		return fmt.Errorf("begin wait %s/%s: bad kind %q", w.QueueID, w.StepID, w.Kind)
	case w.Kind == WaitEvent && !KeyFits(w.Value):
		// Refused before the writer: an index refusing it would fail
		// the batch (issue 43). The dispatcher checks first.
		return CheckKeyValue("wait_for match of step "+w.StepID, w.Value)
	}
	return nil
}

// Ended reports whether the wait is no longer open.
func (w Wait) Ended() bool { return w.State != WaitOpen }

// ResumeRequest is an operator's `queue resume QUEUE_ID --from STEP`: Steps
// are STEP and every later step of the trigger, in order.
type ResumeRequest struct {
	QueueID    string
	Steps      []string
	NewEffects bool // give Steps new effect identities (<queue_id>:<step>#<n>)
	// IgnoreCancel: a parked entry asked to cancel goes on rather than
	// ending cancelled (SPEC §2.3).
	IgnoreCancel bool
	// Repin, when set, is the digest the entry is pinned to (--repin).
	Repin string
}

// CancelledBy is the error message of an entry a cancel_on match of
// delivery d cancelled.
func CancelledBy(d *Delivery) string {
	msg := fmt.Sprintf("cancelled by delivery %s of %s", d.QueueID, d.TriggerRef)
	if d.EventID != "" {
		msg += fmt.Sprintf(" (event %s)", d.EventID)
	}
	return msg
}

// Resumable reports whether an entry in status can be resumed (or
// resumed from a step): done, failed, parked or cancelled.
func Resumable(status string) bool {
	switch status {
	case StatusDone, StatusFailed, StatusParked, StatusCancelled:
		return true
	}
	return false
}

// ResumeResult says what a resume did: the state the entry left, and the
// effect generation each step of the request now has (0 for the original
// identity).
type ResumeResult struct {
	QueueID string         `json:"queue_id"`
	From    string         `json:"from"`
	To      string         `json:"to"` // pending, or cancelled (a cancel kept at the park)
	Gens    map[string]int `json:"effect_generations,omitempty"`
}

// EffectIDFor is the effect identity of step stepID of entry queueID at
// generation gen: <queue_id>:<step>, then <queue_id>:<step>#<n> after a
// resume with new effects.
func EffectIDFor(queueID, stepID string, gen int) string {
	if gen <= 0 {
		return queueID + ":" + stepID
	}
	return fmt.Sprintf("%s:%s#%d", queueID, stepID, gen)
}

// StepOfEffect returns the step id of an effect identity made by
// EffectIDFor for queueID, and false for any other identity.
func StepOfEffect(queueID, effectID string) (string, bool) {
	rest, ok := strings.CutPrefix(effectID, queueID+":")
	if !ok || rest == "" {
		return "", false
	}
	if i := strings.LastIndexByte(rest, '#'); i > 0 {
		if _, err := strconv.Atoi(rest[i+1:]); err == nil {
			rest = rest[:i]
		}
	}
	return rest, true
}

// WaitStore keeps waits, offers, cancel keys, program definitions and
// resumes (SPEC §2.3). The queue store implements it; both backends give
// it the same semantics, which storetest checks.
//
// Enqueue takes part too: a Delivery's Offers, Cancels and CancelKeys are
// applied in the transaction that stores it (EnqueueResult.Matched and
// .Cancelled say what they did), a waiting entry holds its concurrency
// key like a running one, and an entry asked to cancel while running
// (CancelRequested) ends cancelled at its next Retry, Postpone, BeginWait
// or Finish other than done.
type WaitStore interface {
	// BeginWait is called by a run under its lease (token) at a sleep or
	// wait_for step, with w's QueueID, StepID, Kind, Key, Value and
	// WakeAt set. When (QueueID, StepID) already has a wait it is
	// returned unchanged (an ended one tells the run how the step ended).
	// Otherwise an event wait first consumes the earliest unconsumed offer
	// of (Key, Value), accepted before: the wait is stored matched and
	// returned, and the entry stays running. Failing that the wait is
	// stored open and the entry moves from running to waiting with wake_at
	// = w.WakeAt, its lease ended and the lease's attempt given back; the
	// run must stop there. An entry asked to cancel meanwhile ends
	// cancelled instead (the returned wait is then cancelled).
	BeginWait(ctx context.Context, token int64, w Wait) (Wait, error)
	// Wake moves the waiting entries whose wake_at is not after now to
	// pending, ending their open wait woke (sleep) or timed_out (event),
	// at most limit of them per call; it returns how many it woke.
	Wake(ctx context.Context, now time.Time, limit int) (int64, error)
	// NextWake is the earliest wake_at of a waiting entry; ok is false
	// when none waits with a time.
	NextWake(ctx context.Context) (at time.Time, ok bool, err error)
	// Waits lists the waits of queueID and those its delivery matched (as
	// the awaited delivery), oldest first: both entries' `queue show`.
	Waits(ctx context.Context, queueID string) ([]Wait, error)
	// CancelRequested reports whether a cancel_on match arrived for the
	// entry while it ran: the run starts no later step.
	CancelRequested(ctx context.Context, queueID string) (bool, error)
	// Resume puts a done, failed, parked or cancelled entry back to
	// pending (EEntryNotResumable otherwise): the waits of r.Steps are
	// removed and the offers they consumed released, and with NewEffects
	// each step of r.Steps gets the next effect generation. The caller
	// removes the steps' checkpoints (RunStore.DropSteps) first.
	Resume(ctx context.Context, r ResumeRequest) (ResumeResult, error)
	// EffectGens are the effect generations of an entry's steps (absent:
	// 0).
	EffectGens(ctx context.Context, queueID string) (map[string]int, error)

	// SaveProgram stores the definition of a trigger under its digest
	// (idempotent); Program returns it ("" and no error when unknown).
	SaveProgram(ctx context.Context, digest string, definition []byte) error
	Program(ctx context.Context, digest string) ([]byte, error)
}
