package touba

import (
	"encoding/json"
	"time"
)

// Trying a trigger on stored deliveries (SPEC §2.4, `triggers test`):
// what a trigger of the running program, or of a candidate program,
// would do with each of the last deliveries its source accepted. Nothing
// is enqueued and no tool is called.

// TriedDelivery is what a trigger would do with one stored delivery.
type TriedDelivery struct {
	// QueueID is the delivery's entry at the source, or DeliveryID its
	// row of the delivery log (a delivery the source's filter left out).
	QueueID    string    `json:"queue_id,omitempty"`
	DeliveryID string    `json:"delivery_id,omitempty"`
	EventID    string    `json:"event_id"`
	ReceivedAt time.Time `json:"received_at"`
	// Taken says whether the trigger's filter takes it (for a route,
	// after its accepting trigger's filter); Code and Message say why
	// not: filtered (a filter did not hold: FilteredBy names whose),
	// ExpressionFailed, or a key that failed.
	Taken      bool   `json:"taken"`
	Code       string `json:"code,omitempty"`
	Message    string `json:"message,omitempty"`
	FilteredBy string `json:"filtered_by,omitempty"`
	// Routes are, for an accepting trigger, what each of its routes would
	// do with it.
	Routes []RouteOutcome `json:"routes,omitempty"`
	// Keys are the keys the delivery would get (concurrency, debounce or
	// batch, cancel_on matches), and Steps each step's when and input.
	Keys  []TriedKey  `json:"keys,omitempty"`
	Steps []TriedStep `json:"steps,omitempty"`
}

// TriedKey is one key of a delivery: where the program says it (Name:
// "concurrency.key", "batch.key", "cancel_on[0].match"...), its value
// (compact JSON; "" when it resolves to nothing: not limited, not
// gathered), or its error (ExpressionFailed: intake would answer 422).
type TriedKey struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

// TriedStep is one step of a tried run: its when (nil when it has none),
// and for a tool step its input, computed as the dispatcher would
// (Input), or why it cannot be (Error: ExpressionFailed,
// StepInputUnresolved; NeedsOutput when it reads the output of an
// earlier tool step, which a test does not call). Skipped: its when is
// false (it would run nothing; its output is null).
type TriedStep struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"` // the tool ref, sleep or wait_for
	When        *bool           `json:"when,omitempty"`
	Skipped     bool            `json:"skipped,omitempty"`
	Input       json.RawMessage `json:"input,omitempty"`
	Match       string          `json:"match,omitempty"` // a wait_for's match value
	Error       string          `json:"error,omitempty"`
	NeedsOutput bool            `json:"needs_output,omitempty"`
}
