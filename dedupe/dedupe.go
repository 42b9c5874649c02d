// Package dedupe holds the identity rules of intake: what a valid event id
// is, how a body is digested, and the decision new / duplicate / conflict /
// replay for a delivery whose identity already has an entry.
package dedupe

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"

	touba "github.com/touba/touba-trigger"
)

// MaxEventIDLen is the longest accepted event id, in bytes.
const MaxEventIDLen = 200

// ErrEventIDInvalid is wrapped by ValidateEventID's errors.
var ErrEventIDInvalid = errors.New("event id invalid")

// ValidateEventID checks an event id that the request carried: non-empty,
// at most 200 bytes, printable ASCII only (0x20-0x7e).
func ValidateEventID(id string) error {
	if id == "" {
		return touba.Errorf(touba.ETriggerEventIDInvalid, "event id is empty")
	}
	if len(id) > MaxEventIDLen {
		return touba.Errorf(touba.ETriggerEventIDInvalid, "event id is %d bytes, over %d", len(id), MaxEventIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return touba.Errorf(touba.ETriggerEventIDInvalid, "event id has a byte outside printable ASCII at offset %d", i)
		}
	}
	return nil
}

// Digest returns the lowercase hex SHA-256 of a raw body.
func Digest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Decision is what intake answers for a delivery.
type Decision int

// The four decisions of SPEC §3.1.
const (
	New Decision = iota
	Duplicate
	Conflict
	Replay
)

func (d Decision) String() string {
	return [...]string{"new", "duplicate", "conflict", "replay"}[d]
}

// Decide compares a new delivery's digest with the entry that already holds
// its identity. Same digest on a pending entry is a harmless redelivery;
// once the entry was consumed (any state past pending) it is a replay; a
// different digest under one identity is always a conflict, whatever the
// state, because the sender reused an id for other content.
func Decide(existingDigest, existingStatus, digest string) Decision {
	switch {
	case existingDigest != digest:
		return Conflict
	case existingStatus == touba.StatusPending:
		return Duplicate
	default:
		return Replay
	}
}

// Answer is what intake answers one enqueue (SPEC §3.1): Status for a
// delivery answered 202, or Code for a refusal. Intake and the operator's
// delivery replay both answer through it, so the mapping exists once.
type Answer struct {
	Status string // touba.IntakeEnqueued or touba.IntakeDuplicate, or ""
	Code   string // touba.ETriggerEventPayloadConflict or touba.ETriggerReplayRejected, or ""
}

// Answered maps the result of enqueueing a delivery whose body has digest
// to its answer.
func Answered(res touba.EnqueueResult, digest string) Answer {
	if res.Created {
		return Answer{Status: touba.IntakeEnqueued}
	}
	switch Decide(res.Digest, res.Status, digest) {
	case Duplicate:
		return Answer{Status: touba.IntakeDuplicate}
	case Conflict:
		return Answer{Code: touba.ETriggerEventPayloadConflict}
	default:
		return Answer{Code: touba.ETriggerReplayRejected}
	}
}
