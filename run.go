package touba

import (
	"encoding/json"
	"strings"
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
	// Status is StepSkipped for a step whose `when` was false (SPEC
	// §2.4), "" for one that ran.
	Status string `json:"status,omitempty"`
}

// StepSkipped is the status of a step whose `when` was false: its output
// is null and nothing was journaled.
const StepSkipped = "skipped"

// skippedPrefix marks the run id of a skipped step's checkpoint: the
// stores keep it in the run_id column as it is, so no schema changes.
const skippedPrefix = "skipped:"

// SkippedRunID is the run id a skipped step's checkpoint is saved under.
func SkippedRunID(runID string) string { return skippedPrefix + runID }

// Decoded is s with its status read from its run id (SkippedRunID).
func (s StepOutput) Decoded() StepOutput {
	if rest, ok := strings.CutPrefix(s.RunID, skippedPrefix); ok {
		s.RunID, s.Status = rest, StepSkipped
	}
	return s
}
