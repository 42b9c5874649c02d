// Package admin is the operator's side of touba-trigger (SPEC §6): a Service
// that lists, shows, replays, resumes, resolves and compensates over the queue, state
// and journal files; a Server that offers it as JSON over HTTP on the admin
// unix socket (mode 0600); and the Client the CLI uses to reach a running
// daemon. With no daemon running the CLI calls a Service of its own on the
// files, under the journal lock, so both paths give the same answers.
//
// Every operator action is audited: the journal records resolutions and
// compensations in effect_events, and the state file's operator_events
// table records every replay, resume, resolve and compensation, refused or done,
// with who asked.
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	touba "github.com/touba/touba-trigger"
)

// API is what the CLI can ask of a daemon, or of the files when none runs.
// *Service and *Client implement it.
type API interface {
	Entries(ctx context.Context, f EntryFilter) ([]Entry, error)
	Entry(ctx context.Context, queueID string) (*EntryDetail, error)
	ReplayEntries(ctx context.Context, r ReplayRequest) (*ReplayReport, error)
	Deliveries(ctx context.Context, f DeliveryFilter) ([]touba.LoggedDelivery, error)
	Delivery(ctx context.Context, deliveryID string) (*DeliveryDetail, error)
	ReplayDelivery(ctx context.Context, r DeliveryReplayRequest) (*DeliveryReplay, error)
	Effects(ctx context.Context, f EffectFilter) ([]touba.Effect, error)
	Resolve(ctx context.Context, r ResolveRequest) (*ResolveResult, error)
	Compensate(ctx context.Context, r CompensateRequest) (*touba.Compensation, error)
	Health(ctx context.Context) (*Health, error)
	TriggerAPI // triggers.go
	Search(ctx context.Context, r SearchRequest) (*SearchReport, error)
	// Resume runs an entry again from a step (resume.go).
	Resume(ctx context.Context, r ResumeRequest) (*ResumeReport, error)
	// Storage measures the backend and what --history forgets (storage.go).
	Storage(ctx context.Context, r StorageRequest) (*StorageReport, error)
}

// EntryFilter selects queue entries; empty fields match all.
type EntryFilter struct {
	Status     string `json:"status,omitempty"`
	TriggerRef string `json:"trigger_ref,omitempty"`
	Held       bool   `json:"held,omitempty"`  // only entries held back behind their concurrency key
	After      string `json:"after,omitempty"` // keyset cursor, oldest first: entries after this queue_id
	// Listings are newest first (SPEC §6.1); Oldest lists in queue order
	// instead. Before is the newest-first keyset cursor.
	Oldest bool   `json:"oldest,omitempty"`
	Before string `json:"before,omitempty"`
	Limit  int    `json:"limit,omitempty"` // default 100
}

// Entry is a queue entry as operators see it.
type Entry struct {
	QueueID    string    `json:"queue_id"`
	TriggerRef string    `json:"trigger_ref"`
	EventID    string    `json:"event_id"`
	Digest     string    `json:"digest"`
	Status     string    `json:"status"`
	Attempts   int       `json:"attempts"`
	ErrorCode  string    `json:"error_code,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	RemoteAddr string    `json:"remote_addr"`
	BodyBytes  int       `json:"body_bytes"`
	BodyPurged bool      `json:"body_purged,omitempty"` // retention dropped it
	// ConcurrencyKey is the entry's resolved concurrency key (JSON); Held
	// says it waits behind an earlier entry of that key.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	Held           bool   `json:"held,omitempty"`
	// Node is the node that holds the entry or last ran it (--database;
	// empty on SQLite and before any lease).
	Node string `json:"node,omitempty"`
	// ProgramDigest is the digest of the trigger's definition the entry
	// was accepted under (SPEC §2.3 version pinning); WakeAt is when a
	// waiting entry wakes (a sleep's end, a wait's timeout), unset for a
	// wait with no timeout.
	ProgramDigest string     `json:"program_digest,omitempty"`
	WakeAt        *time.Time `json:"wake_at,omitempty"`
	// MergedInto is, for a merged entry, the entry that carries its run
	// (SPEC §2.1 debounce, batch).
	MergedInto string `json:"merged_into,omitempty"`
	// Gathers is, for a carrier waiting in its live gathering (debounce,
	// batch), the gathering's kind and when its run starts unless it
	// fills first: the carrier waits for that, not for an event.
	Gathers *EntryGathering `json:"gathers,omitempty"`
}

// EntryGathering is what a waiting carrier gathers and until when.
type EntryGathering struct {
	Kind   string    `json:"kind"` // touba.GatherDebounce or touba.GatherBatch
	WakeAt time.Time `json:"wake_at"`
}

// Body is a stored request body: as text when it is UTF-8, always as
// base64 so that nothing is lost.
type Body struct {
	Bytes  int    `json:"bytes"`
	Text   string `json:"text,omitempty"`
	Base64 string `json:"base64"`
}

// EntryDetail is everything known of one entry: `queue show`.
type EntryDetail struct {
	Entry
	ErrorMessage string                 `json:"error_message,omitempty"`
	NotBefore    *time.Time             `json:"not_before,omitempty"`
	Headers      map[string]string      `json:"headers"`
	Body         *Body                  `json:"body,omitempty"`
	Runs         []touba.Run            `json:"runs"`
	Steps        []touba.StepOutput     `json:"steps"`
	Effects      []EffectDetail         `json:"effects"`
	Deliveries   []touba.LoggedDelivery `json:"deliveries"` // redeliveries and rejections naming this entry
	Operator     []touba.OperatorEvent  `json:"operator_events"`
	// Waits are the entry's sleeps and waits for events (waits.go), and
	// MatchedWaits the waits of other entries this delivery matched.
	Waits        []WaitDetail `json:"waits"`
	MatchedWaits []touba.Wait `json:"matched_waits"`
	// Gathering is the gathering the entry carries (debounce, batch),
	// with the deliveries merged into it (gather.go); nil for any other.
	Gathering *GatheringDetail `json:"gathering,omitempty"`
	// Routes are, for an entry of an accepting trigger, each route of its
	// trigger when it was accepted, fed or not (routes.go); RoutedFrom
	// is, for a route's entry, the accepting entry it came from.
	Routes     []RouteDetail `json:"routes,omitempty"`
	RoutedFrom string        `json:"routed_from,omitempty"`
	// ResumeSteps are the steps `queue resume --from` takes for this
	// entry, in order; empty when it cannot be resumed now.
	ResumeSteps []string `json:"resume_steps,omitempty"`
	Next        []string `json:"next,omitempty"` // what an operator can do now
}

// RunWaited is the status shown for a run that ended when its entry
// began to wait, once the entry no longer waits there (a later run went
// on from the wait, or a cancel or a reload ended it): the run's history
// says "waiting" only while the entry still does.
const RunWaited = "waited"

// waitedRuns shows as RunWaited the runs that ended waiting but for the
// entry's current wait (its last run while it is waiting).
func waitedRuns(runs []touba.Run, status string) []touba.Run {
	for i := range runs {
		current := i == len(runs)-1 && status == touba.StatusWaiting
		if runs[i].Status == touba.StatusWaiting && !current {
			runs[i].Status = RunWaited
			runs[i].ErrorMessage = strings.Replace(runs[i].ErrorMessage, "waiting at step", "waited at step", 1)
		}
	}
	return runs
}

// AttemptsText is the entry's attempts as an operator reads them: a wait
// starts the count again (the trigger's retry limits count from it), so an
// entry past a wait says so, with its runs in all.
func (d *EntryDetail) AttemptsText() string {
	n := strconv.Itoa(d.Attempts)
	if len(d.Waits) == 0 || len(d.Runs) <= d.Attempts {
		return n
	}
	runs := "runs"
	if len(d.Runs) == 1 {
		runs = "run"
	}
	return fmt.Sprintf("%s since it last waited (%d %s in all)", n, len(d.Runs), runs)
}

// EffectDetail is an effect with its audit trail.
type EffectDetail struct {
	touba.Effect
	Events []touba.EffectEvent `json:"events"`
	// Request is what the effect's last dispatch sent, for a webhook or
	// http binding: method, URL without its path and query, headers with
	// a secret's name for its value (touba.RequestOf its event).
	Request string `json:"request,omitempty"`
}

// requestOf is the request the last dispatched event of evs records.
func requestOf(evs []touba.EffectEvent) string {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].State == touba.EffectDispatched {
			return touba.RequestOf(evs[i].Detail)
		}
	}
	return ""
}

// ReplayRequest names entries to put back to pending: IDs, or every entry
// in Status (failed, parked or cancelled), optionally only of one trigger,
// with one error code, received since Since. A bulk replay (Status) works
// in batches of ReplayBatch; DryRun only counts.
type ReplayRequest struct {
	IDs        []string  `json:"ids,omitempty"`
	Status     string    `json:"status,omitempty"`
	TriggerRef string    `json:"trigger_ref,omitempty"`
	Code       string    `json:"code,omitempty"`
	Since      time.Time `json:"since,omitempty"`
	DryRun     bool      `json:"dry_run,omitempty"`
	// Reason is the operator's --reason, kept in the audit trail.
	Reason string `json:"reason,omitempty"`
	// IgnoreCancel (--ignore-cancel): a parked entry asked to cancel while
	// its step ran goes on instead of ending cancelled (SPEC §2.3).
	IgnoreCancel bool `json:"ignore_cancel,omitempty"`
	// Repin (--repin) pins each entry to the running program's definition
	// of its trigger (SPEC §2.3); without it a ProgramChanged entry is
	// refused.
	Repin bool `json:"repin,omitempty"`
}

// ReplayItem says what a replay did with one id, and when it did nothing,
// why and how to get a real re-run.
type ReplayItem struct {
	QueueID  string `json:"queue_id"`
	Replayed bool   `json:"replayed"`
	From     string `json:"from,omitempty"`   // the state it left
	Status   string `json:"status,omitempty"` // the state it is in now
	Reason   string `json:"reason,omitempty"`
	Hint     string `json:"hint,omitempty"`
	// Repin is what --repin keeps and runs again of the entry.
	Repin *RepinPlan `json:"repin,omitempty"`
	// Merged is the merged entry the operator named, whose carrier this
	// item is: replaying a merged entry replays its carrier.
	Merged  string `json:"merged,omitempty"`
	trigger string // its trigger, for the replay's Repin map
}

// ReplayReport is the answer to a ReplayRequest. Note explains an empty
// selection.
type ReplayReport struct {
	Items    []ReplayItem `json:"items"`
	Replayed int          `json:"replayed"`
	Note     string       `json:"note,omitempty"`
	// Matched is how many entries the selection of a bulk replay named
	// (what a dry run reports); Batches how many transactions it took.
	Matched int  `json:"matched"`
	DryRun  bool `json:"dry_run,omitempty"`
	Batches int  `json:"batches,omitempty"`
}

// DeliveryFilter selects delivery log rows; empty fields match all.
type DeliveryFilter struct {
	Rejected   bool      `json:"rejected,omitempty"`
	Code       string    `json:"code,omitempty"`
	TriggerRef string    `json:"trigger_ref,omitempty"`
	Since      time.Time `json:"since,omitempty"`
	Before     string    `json:"before,omitempty"` // keyset cursor: rows logged before this delivery_id
	Limit      int       `json:"limit,omitempty"`  // default 100
	// Refused: only requests answered 400 and above (not a redelivery
	// of a consumed entry answered 200), as the console counts them.
	Refused bool `json:"refused,omitempty"`
}

// DeliveryDetail is one delivery log row with its stored body, and whether
// `deliveries replay` can use it.
type DeliveryDetail struct {
	touba.LoggedDelivery
	Body       *Body  `json:"body,omitempty"`
	Replayable bool   `json:"replayable"`
	Hint       string `json:"hint,omitempty"`
}

// DeliveryReplayRequest asks to enqueue a stored rejected delivery again.
type DeliveryReplayRequest struct {
	DeliveryID string `json:"delivery_id"`
	NewEventID bool   `json:"new_event_id,omitempty"` // a fresh identity replay-<uuidv7>
	Reason     string `json:"reason,omitempty"`       // the operator's --reason
}

// DeliveryReplay answers like intake (SPEC §3.1): Status enqueued or
// duplicate with the entry's queue id, or Code TriggerEventPayloadConflict /
// TriggerReplayRejected naming the entry that holds the identity.
type DeliveryReplay struct {
	DeliveryID string `json:"delivery_id"`
	TriggerRef string `json:"trigger_ref"`
	EventID    string `json:"event_id"`
	QueueID    string `json:"queue_id,omitempty"`
	Status     string `json:"status,omitempty"` // enqueued or duplicate
	Code       string `json:"code,omitempty"`
	Message    string `json:"message,omitempty"`
	Hint       string `json:"hint,omitempty"`
}

// Enqueued reports whether the replay created an entry.
func (r *DeliveryReplay) Enqueued() bool { return r.Status == "enqueued" }

// EffectFilter selects effects; empty fields match all.
type EffectFilter struct {
	State string `json:"state,omitempty"`
	Scope string `json:"scope,omitempty"`
	Limit int    `json:"limit,omitempty"` // default 100
}

// ResolveRequest is an operator's verdict on an unknown effect: State
// applied (ReceiptRef required; Result defaults to {"receipt_ref": REF}) or
// not_applied.
type ResolveRequest struct {
	Scope      string          `json:"scope"`
	EffectID   string          `json:"effect_id"`
	State      string          `json:"state"`
	ReceiptRef string          `json:"receipt_ref,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Reason     string          `json:"reason,omitempty"` // the operator's --reason
}

// ResolveResult is the effect as now journaled and what became of its
// entry.
type ResolveResult struct {
	Effect      touba.Effect `json:"effect"`
	EntryStatus string       `json:"entry_status,omitempty"` // after the resolve
	Replayed    bool         `json:"replayed"`               // the parked entry is pending again
	Note        string       `json:"note,omitempty"`
}

// CompensateRequest asks for the compensation of an applied effect.
type CompensateRequest struct {
	Scope    string `json:"scope"`
	EffectID string `json:"effect_id"`
	Reason   string `json:"reason,omitempty"` // the operator's --reason
}

// SearchRequest is an operator's search of the queue (SPEC §6 `queue ls
// --event-id | --body`, §6.1): by QueueID, by EventID (the identity
// index), or by Body "POINTER=VALUE" (a bounded scan, newest first, of the
// entries received since Since; VALUE is JSON when it parses as JSON, else
// a string). Since defaults to 24 hours ago for a body search.
type SearchRequest struct {
	QueueID    string    `json:"queue_id,omitempty"`
	EventID    string    `json:"event_id,omitempty"`
	Body       string    `json:"body,omitempty"`
	TriggerRef string    `json:"trigger_ref,omitempty"`
	Status     string    `json:"status,omitempty"`
	Since      time.Time `json:"since,omitempty"`
	MaxScan    int       `json:"max_scan,omitempty"` // default 10,000
	Limit      int       `json:"limit,omitempty"`    // default 100
}

// SearchReport is what a search found, newest first: Scanned entries were
// examined, and More says the search stopped before the window's end
// ("searched N entries, more exist").
type SearchReport struct {
	Entries []Entry   `json:"entries"`
	Scanned int       `json:"scanned"`
	More    bool      `json:"more"`
	Since   time.Time `json:"since,omitempty"` // the window searched
}
