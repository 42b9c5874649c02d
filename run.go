package touba

import (
	"encoding/json"
	"time"
)

// Run is one dispatcher run of a queue entry, as its history keeps it.
type Run struct {
	RunID        string     `json:"run_id"`
	QueueID      string     `json:"queue_id"`
	TriggerRef   string     `json:"trigger_ref"`
	Attempt      int        `json:"attempt"`
	Status       string     `json:"status"`
	ErrorCode    string     `json:"error_code,omitempty"`
	ErrorMessage string     `json:"error_message,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
}

// StepOutput is a step's checkpoint: what later steps see at
// /steps/<id>/output, so a replay restarts after the last step that has one.
type StepOutput struct {
	StepID string          `json:"step_id"`
	RunID  string          `json:"run_id"`
	Output json.RawMessage `json:"output"`
	At     time.Time       `json:"at"`
}
