// Package touba holds the domain types that every part of touba-trigger
// shares: error codes, queue states, effect states and the records that
// cross package boundaries. Implementations live in the sub-packages; the
// cmd/touba-trigger binary wires them together.
package touba

import "time"

// Queue entry states (SPEC §3.2).
const (
	StatusPending = "pending"
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
	StatusParked  = "parked"
	// StatusCancelled: the entry was cancelled (SPEC §2.3); replayable.
	StatusCancelled = "cancelled"
	// StatusWaiting is in waits.go.
)

// Effect states of the journal (SPEC §5).
const (
	EffectPrepared   = "prepared"
	EffectDispatched = "dispatched"
	EffectApplied    = "applied"
	EffectNotApplied = "not_applied"
	EffectUnknown    = "unknown"
)

// Effect contract kinds and retry modes (SPEC §2.2).
const (
	ContractNone          = "none"
	ContractExternalWrite = "external_write"

	RetryIdempotencyKey = "idempotency_key"
	RetryReconcile      = "reconcile"
	RetryNone           = "none"
)

// Intake answers for accepted deliveries (SPEC §3.1).
const (
	IntakeEnqueued  = "enqueued"
	IntakeDuplicate = "duplicate"
	// IntakeFiltered answers a verified delivery that fails its trigger's
	// filter; it is also the code of its delivery-log row.
	IntakeFiltered = "filtered"
	// IntakeConsumed answers (200) the exact redelivery of an entry already
	// past pending, under source.redelivery "acknowledge" (the default);
	// the answer and its delivery-log row carry ETriggerReplayRejected.
	IntakeConsumed = "consumed"
)

// Values of source.redelivery (SPEC §2.1): what the exact redelivery of a
// consumed entry is answered.
const (
	RedeliveryAcknowledge = "acknowledge" // 200 consumed (the default)
	RedeliveryReject      = "reject"      // 409 TriggerReplayRejected
)

// Delivery is one accepted webhook as the queue stores it.
type Delivery struct {
	QueueID    string
	TriggerRef string
	EventID    string
	Digest     string // lowercase hex SHA-256 of Body
	Body       []byte
	Headers    map[string]string
	ReceivedAt time.Time
	RemoteAddr string
	Status     string
	Attempts   int
	ErrorCode  string
	UpdatedAt  time.Time
	// TraceParent is the W3C traceparent of the intake span, kept so each
	// run attempt joins the delivery's trace; "" when tracing was off.
	TraceParent string
	// ConcKey is the resolved concurrency key of the entry (compact JSON,
	// scoped by TriggerRef), "" when its trigger has none or it resolved
	// to nothing; ConcMax is the trigger's max at enqueue time.
	ConcKey string
	ConcMax int
	Held    bool // pending behind an earlier entry of its key
	// LeaseToken is the fencing token of the lease that made the entry
	// running (set by Lease): every change the run makes to the entry, its
	// checkpoints and its effects carries it, and is refused (LeaseLost)
	// once the entry was leased again under a newer token.
	LeaseToken int64
	// LeaseOwner names the node holding the lease ("" on SQLite).
	LeaseOwner string
	// Node names the node that holds the entry's lease or last held it
	// ("" on SQLite, and before any lease).
	Node string
	// FirstLease says that LeaseToken is the entry's first lease: no run of
	// it started before, so it has no step checkpoints and the dispatcher
	// need not read them. A store that cannot tell leaves it false.
	FirstLease bool
	// ProgramDigest is the digest of the entry's trigger definition when it
	// was accepted (SPEC §2.3 version pinning; "" before it was kept).
	ProgramDigest string
	// WakeAt is when a waiting entry wakes (a sleep's end, a wait's
	// timeout); nil otherwise, and for a wait with no timeout.
	WakeAt *time.Time
	// Offers, Cancels and CancelKeys are intake's inputs to Enqueue (not
	// read back): Offers are this delivery's values for the wait_for
	// steps awaiting its trigger (Key: WaitKey), Cancels its values for
	// the cancel_on entries naming its trigger (Key: CancelKey of the
	// trigger to cancel), CancelKeys the entry's own cancel_on match
	// values (Key: CancelKey of its trigger), by which a later delivery
	// cancels it. See WaitStore.
	Offers     []MatchValue
	Cancels    []MatchValue
	CancelKeys []MatchValue
	// Gather is intake's input to Enqueue for a delivery of a trigger with
	// debounce or batch (gather.go); nil otherwise, and not read back.
	Gather *GatherSpec
	// Tick is intake's input to Enqueue for a schedule's tick (EventID is
	// its time, RFC 3339 UTC; SPEC §2.3), not read back: the queue moves
	// the trigger's schedule cursor to it in the same transaction, forward
	// only, whether the tick is new or already there. The cursor is never
	// forgotten by --history, so a tick forgotten after it ran is still
	// known as enqueued (LatestTickID).
	Tick bool
	// Routes are intake's input to Enqueue for a delivery of an accepting
	// trigger (SPEC §2.4; routes.go), not read back: one delivery per
	// route whose filter took it, each with its route's keys. The queue
	// stores them, each under the identity (route, event id), in the
	// transaction that stores this delivery's entry, and only when that
	// entry is new. Routing is what the entry records of its routes (an
	// accepting entry's outcomes, a route entry's source), written with it
	// and read back by Detail only.
	Routes  []*Delivery
	Routing *Routing
	// Done is intake's input to Enqueue for an accepting trigger with no
	// steps (SPEC §2.4): its new entry is stored done at once, and nothing
	// runs it.
	Done bool
	// MergedInto is, for a merged entry, the queue id of the entry that
	// carries its run; "" otherwise.
	MergedInto string
	// Gathered are, for a carrier read for its run (or to rebuild a step's
	// input), the entries merged into it in order (GatherStore.Gathered):
	// the run context's /events is the carrier and these, /event the last.
	// Not stored; nil otherwise.
	Gathered []*Delivery
}

// TimeFormat is how every timestamp is stored: UTC with milliseconds, so
// text order is time order.
const TimeFormat = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeFormat, in UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads a timestamp written by FormatTime.
func ParseTime(s string) (time.Time, error) { return time.Parse(TimeFormat, s) }
