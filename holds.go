package touba

import (
	"context"
	"time"
)

// Holds (SPEC §2.2 circuit, §6 triggers pause): what keeps a run from
// starting besides its concurrency key and its binding's max_concurrency.
// A held run waits without spending an attempt.

// TriggerPause is a paused trigger: its entries wait pending, intake still
// accepts. It is persisted in the queue store, so it survives restarts
// and, on a shared database, holds on every node.
type TriggerPause struct {
	TriggerRef string    `json:"trigger_ref"`
	At         time.Time `json:"at"`
	Operator   string    `json:"operator"`
	Reason     string    `json:"reason,omitempty"`
}

// HoldStore keeps the paused triggers. The queue store implements it, and
// its Lease skips the entries of paused triggers in the lease statement
// itself: they are never leased, so pausing spends no attempt and makes
// no lease churn.
type HoldStore interface {
	// PauseTrigger pauses ref; changed is false when it already was.
	PauseTrigger(ctx context.Context, p TriggerPause) (changed bool, err error)
	// ResumeTrigger resumes ref; changed is false when it was not paused.
	ResumeTrigger(ctx context.Context, ref string) (changed bool, err error)
	// PausedTriggers lists the paused triggers, by ref.
	PausedTriggers(ctx context.Context) ([]TriggerPause, error)
	// CountByTrigger counts entries by trigger and status (and "held" for
	// pending entries held back behind their concurrency key, HeldSlot and
	// HeldCircuit for runs handed back on their binding).
	CountByTrigger(ctx context.Context) (map[string]map[string]int64, error)
}

// Circuit states (SPEC §2.2 circuit).
const (
	CircuitClosed  = "closed"
	CircuitOpen    = "open"
	CircuitProbing = "probing" // open_ms passed; one call is probing
)

// CircuitState is the state of one binding's circuit breaker.
type CircuitState struct {
	ToolRef string `json:"tool_ref"`
	State   string `json:"state"`
	// Until is when an open circuit lets a probe through.
	Until time.Time `json:"until,omitzero"`
	// Since is when the circuit entered State.
	Since time.Time `json:"since,omitzero"`
	// Calls and Failures are the calls counted in the window when the
	// circuit last opened.
	Calls    int `json:"calls,omitempty"`
	Failures int `json:"failures,omitempty"`
}

// CircuitStore keeps the circuits' state where several nodes share it (a
// database). Each node counts the outcomes of its own calls in its window
// and reports only transitions, so a closed circuit costs no write per
// call; every node reads the shared state (cached for a poll interval)
// before calling a binding that has a circuit. Without one (nil) the
// state is the process's own, which is the whole state for one daemon.
type CircuitStore interface {
	// Circuit returns the shared state of toolRef (closed when no row).
	Circuit(ctx context.Context, toolRef string) (CircuitState, error)
	// OpenCircuit opens toolRef's circuit until until, from any state.
	OpenCircuit(ctx context.Context, s CircuitState) error
	// ClaimProbe moves an open circuit whose Until passed to probing;
	// ok is true for the one caller (across nodes) that got the probe.
	// A probe claimed longer than stale ago may be claimed again (its
	// node died).
	ClaimProbe(ctx context.Context, toolRef string, now time.Time, stale time.Duration) (ok bool, err error)
	// CloseCircuit closes toolRef's circuit.
	CloseCircuit(ctx context.Context, toolRef string, now time.Time) error
	// Circuits lists every circuit not closed.
	Circuits(ctx context.Context) ([]CircuitState, error)
}

// Fair dispatch (SPEC §2.1 dispatch, §2.2 "Holds take nothing"). A lease is
// planned: the dispatcher's scheduler (package fair) asks for so many due
// entries of each trigger, and the store answers each ask in the lease's
// one transaction. A run that meets a binding's hold (no max_concurrency
// slot, an open circuit) between steps is handed back with HoldRun: it
// waits pending, in no lease and no worker, until an ask names its hold.

// LeaseAsk is one part of a planned lease.
type LeaseAsk struct {
	// TriggerRef asks for up to N due pending entries of that trigger,
	// oldest first, that no key, pause or binding holds back.
	TriggerRef string
	// Hold, instead, asks for up to N entries handed back on that hold
	// (a binding's tool ref), oldest first, when their trigger is not
	// paused: TriggerRef's only when it is set, whatever their trigger
	// otherwise.
	Hold string
	N    int
	// ByKey takes a trigger's entries by turns among the values of its
	// concurrency key (oldest first within each value), among its oldest
	// runnable entries (at most KeyScan of them), rather than oldest
	// first overall: one value's many entries do not fill the ask.
	ByKey bool
}

// KeyScan bounds how many of a trigger's oldest runnable entries an ask
// ByKey shares out among their key values: n ones at most, and at least a
// few hundred.
func KeyScan(n int) int { return min(max(4*n, 256), 4096) }

// LeasePlan decides a lease's asks, one at a time, from what the earlier
// ones took. A store whose transaction runs again (a deadlock, an
// optimistic batch redone) calls Reset first.
type LeasePlan interface {
	Reset()
	// Next is the next ask; ok false ends the lease.
	Next() (a LeaseAsk, ok bool)
	// Took reports how many entries the ask leased.
	Took(a LeaseAsk, n int)
	// Free is how many more entries the lease may take: a store that
	// takes some on its own (expired leases taken over) takes at most
	// that many, and reports them as an ask of HoldTakeOver.
	Free() int
}

// HoldTakeOver names, in a LeasePlan's Took, the entries a store took
// over from an expired lease on its own.
const HoldTakeOver = "(take-over)"

// FairQueue is what fair dispatch needs of a queue store besides Lease.
type FairQueue interface {
	// LeasePlanned leases what plan asks for, in one transaction.
	LeasePlanned(ctx context.Context, plan LeasePlan) ([]*Delivery, error)
	// HoldRun puts a running entry back to pending, held on hold, without
	// spending the attempt its lease counted; no lease takes it but an
	// ask naming hold. An entry asked to cancel ends cancelled instead.
	HoldRun(ctx context.Context, queueID string, token int64, hold, code, message string) error
	// HeldRuns counts the entries handed back, by hold and trigger
	// (paused triggers' included).
	HeldRuns(ctx context.Context) (map[string]map[string]int64, error)
	// ReadyTriggers lists the triggers with entries no key or binding
	// holds back (due or not, paused or not), by ref: the lease's
	// candidates beside the program's own triggers.
	ReadyTriggers(ctx context.Context) ([]string, error)
}

// CountByTrigger's counts of pending entries handed back on a binding: no
// free max_concurrency slot, or an open circuit.
const (
	HeldSlot    = "held_slot"
	HeldCircuit = "held_circuit"
)
