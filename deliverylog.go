package touba

import "time"

// LoggedDelivery is one row of the delivery log (SPEC §6): a request that
// did not create a queue entry (a rejection, a duplicate, a filtered
// delivery), with what an operator needs to look at it and replay it.
type LoggedDelivery struct {
	DeliveryID string            `json:"delivery_id"`
	At         time.Time         `json:"at"`
	TriggerRef string            `json:"trigger_ref"`
	EventID    string            `json:"event_id"`
	Digest     string            `json:"digest"`
	StatusCode int               `json:"status_code"`
	ErrorCode  string            `json:"error_code"` // "" for a 202 duplicate
	QueueID    string            `json:"queue_id"`
	RemoteAddr string            `json:"remote_addr"`
	Headers    map[string]string `json:"headers"`
	Body       []byte            `json:"-"`
	BodyStored bool              `json:"body_stored"`
}

// LogFilter selects delivery-log rows; the newest come first.
type LogFilter struct {
	Rejected   bool // status code 400 and above only
	Code       string
	TriggerRef string
	QueueID    string
	Since      time.Time
	// Before is a keyset cursor: only rows logged before the row with this
	// delivery_id (the last one of the previous page); an unknown id
	// matches nothing.
	Before string
	Limit  int // default 100
}

// OperatorEvent is one entry of the operators' audit trail: who did what to
// which entry or effect, and how it ended.
type OperatorEvent struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	Action   string    `json:"action"`
	QueueID  string    `json:"queue_id,omitempty"`
	Target   string    `json:"target"`
	Outcome  string    `json:"outcome"`
	Operator string    `json:"operator"`
	Detail   string    `json:"detail"`
}
