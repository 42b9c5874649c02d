package touba

import (
	"context"
	"encoding/json"
	"time"
)

// The storage interfaces: what the intake, the dispatcher, the admin
// service and the metrics need of the stores. The SQLite files implement
// them (package sqlite); storetest checks any implementation against the
// behaviour the daemon relies on.

// QueueStore holds the accepted deliveries and their identities.
type QueueStore interface {
	// Enqueue takes the identity decision and stores a new entry in one
	// step, and returns only once the outcome is durable.
	Enqueue(ctx context.Context, d *Delivery) (EnqueueResult, error)
	// Lease moves up to n due pending entries to running and returns them.
	Lease(ctx context.Context, n int) ([]*Delivery, error)
	// Finish ends a running entry as done, failed or parked. token is the
	// fencing token of the caller's lease (Delivery.LeaseToken): when the
	// entry is leased under another token, nothing changes and the error
	// has code LeaseLost. So do Retry, Postpone, Renew and SaveStep.
	Finish(ctx context.Context, queueID string, token int64, status, code, message string) error
	// Retry puts a running entry back to pending, due at notBefore, having
	// spent an attempt.
	Retry(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error
	// Postpone is Retry without spending an attempt.
	Postpone(ctx context.Context, queueID string, token int64, notBefore time.Time, code, message string) error
	// Renew extends the caller's lease while its run goes on (a store
	// whose leases never expire only checks the token).
	Renew(ctx context.Context, queueID string, token int64) error
	// RequeueRunning puts the running entries this process (node) left
	// back to pending (start-up); never those another node is running.
	RequeueRunning(ctx context.Context) (int64, error)
	// Replay puts failed, parked and cancelled entries back to pending; a
	// parked one asked to cancel ends cancelled instead, unless
	// opt.IgnoreCancel.
	Replay(ctx context.Context, ids []string, opt ReplayOptions) ([]ReplayResult, error)

	Get(ctx context.Context, queueID string) (*Delivery, error)
	Detail(ctx context.Context, queueID string) (*EntryDetail, error)
	List(ctx context.Context, f EntryFilter) ([]*Delivery, error)
	IDsByStatus(ctx context.Context, status, triggerRef string) ([]string, error)
	// Search finds entries by queue id, event id (the identity index) or
	// body field (a scan of at most MaxScan entries), newest first.
	Search(ctx context.Context, s EntrySearch) (*SearchResult, error)
	// SelectIDs lists the queue ids of a bulk replay's selection, oldest
	// first.
	SelectIDs(ctx context.Context, s EntrySelection) ([]string, error)
	CountByStatus(ctx context.Context) (map[string]int64, error)
	OldestPending(ctx context.Context) (time.Time, bool, error)
	// Pending is the number of pending entries, kept in memory.
	Pending() int64
	// PurgeBodies drops the bodies and headers of entries done before cutoff.
	PurgeBodies(ctx context.Context, cutoff time.Time) (int64, error)
	// Ping checks that the store answers, for readiness.
	Ping(ctx context.Context) error
	QueueStats() QueueStats
}

// RunStore holds run history and step checkpoints.
type RunStore interface {
	// RecordRun records a finished run (its end stamped by the store); it
	// does not wait for disk.
	RecordRun(r *Run)
	// SaveStep checkpoints a step's output durably, under the lease whose
	// token is given (LeaseLost otherwise, where the store can tell).
	SaveStep(queueID string, token int64, stepID, runID string, output json.RawMessage) error
	Steps(ctx context.Context, queueID string) (map[string]StepOutput, error)
	// DropSteps removes the checkpoints of stepIDs (a resume from a step),
	// durably, before the entry runs again.
	DropSteps(ctx context.Context, queueID string, stepIDs []string) error
	Runs(ctx context.Context, queueID string) ([]Run, error)
}

// DeliveryLog records every request that did not create an entry. Log
// never blocks intake: rows are written in batches and bounded.
type DeliveryLog interface {
	Log(d *LoggedDelivery)
	Deliveries(ctx context.Context, f LogFilter) ([]*LoggedDelivery, error)
	Delivery(ctx context.Context, id string) (*LoggedDelivery, error)
	// Flush waits until the rows logged so far are written.
	Flush(ctx context.Context) error
	LogStats() (written, dropped int64)
}

// AuditLog is the operators' audit trail.
type AuditLog interface {
	RecordOperator(ctx context.Context, ev OperatorEvent) error
	// RecordOperators appends many events in one transaction (a bulk
	// replay's batch).
	RecordOperators(ctx context.Context, evs []OperatorEvent) error
	OperatorEvents(ctx context.Context, queueID string, limit int) ([]OperatorEvent, error)
}

// EffectJournal is the effect journal (SPEC §5).
type EffectJournal interface {
	// Prepare reserves the effect for p.CallID, durably; a second caller of
	// a held identity gets EffectInProgress. Under p.LeaseToken (when not
	// 0), Prepare, and Dispatch and Finish of the call it reserved for,
	// change nothing once the entry is leased under another token
	// (LeaseLost); a late Finish is then kept as an effect.late_outcome
	// event only.
	Prepare(ctx context.Context, p EffectPrepare) (*Effect, error)
	Dispatch(ctx context.Context, scope, effectID, callID string) error
	Finish(ctx context.Context, o EffectOutcome) error
	Resolve(ctx context.Context, scope, effectID string, r EffectResolution) error
	// Abandon releases an effect whose call ended without its outcome
	// recorded (the outcome write failed) and records it unknown.
	Abandon(ctx context.Context, scope, effectID, callID string) error
	// Orphaned reports whether a dispatched effect has no call working on
	// it any more: semantically unknown, and resolvable like one.
	Orphaned(ctx context.Context, scope, effectID string) bool
	// Recover turns every dispatched effect into unknown (start-up).
	Recover(ctx context.Context) ([]Effect, error)

	Get(ctx context.Context, scope, effectID string) (*Effect, error)
	List(ctx context.Context, f EffectFilter) ([]Effect, error)
	Events(ctx context.Context, scope, effectID string) ([]EffectEvent, error)
	CountByState(ctx context.Context) (map[string]int64, error)
	JournalStats() JournalStats
}

// StateStore is the state side of a store: run history, the delivery log
// and the operators' audit trail.
type StateStore interface {
	RunStore
	DeliveryLog
	AuditLog
}

// SlotStore keeps the bindings' max_concurrency slots (SPEC §2.2) where
// several nodes share the bound: a database every node uses. A slot is
// held by an entry's lease, so it frees by itself when that lease ends
// (the entry finished, went back to pending, or its node died and the
// lease expired): a crashed node never keeps a slot. Without one (nil),
// the dispatcher bounds the calls of its own process only, which is the
// whole bound for a single daemon.
type SlotStore interface {
	// TakeSlot takes one of the max slots of toolRef for the entry leased
	// under token, if one is free; ok is false when all max are held by
	// live leases, or the entry is no longer leased under token.
	TakeSlot(ctx context.Context, toolRef string, max int, queueID string, token int64) (slot int, ok bool, err error)
	// ReleaseSlot frees slot if the entry still holds it under token.
	ReleaseSlot(ctx context.Context, toolRef string, slot int, queueID string, token int64) error
}
