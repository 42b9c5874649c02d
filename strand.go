package touba

import (
	"context"
	"fmt"
)

// Reloads never strand an entry (SPEC §2.3): at start and at each reload
// the daemon parks, with EProgramChanged, every pending or waiting entry
// whose trigger the running program no longer has, and every waiting one
// whose step (a sleep or a wait_for) it no longer has as that kind. A
// parked entry lets its concurrency key go and its open wait is closed,
// so no later delivery is consumed by it; an operator replays it (with
// --repin when its trigger changed).

// ProgramShape is the running program as ParkStranded reads it: each
// trigger's steps, by id, with the wait kind of each durable step
// (WaitSleep, WaitEvent; "" for a tool step).
type ProgramShape map[string]map[string]string

// Strands says why an open wait in step (of wait kind) of trigger ref no
// longer fits the shape; "" when it does, or when ref itself is gone (the
// entry is stranded by its trigger, found first).
func (s ProgramShape) Strands(ref, step, kind string) string {
	steps, ok := s[ref]
	if !ok {
		return ""
	}
	now, ok := steps[step]
	switch {
	case !ok:
		return fmt.Sprintf("step %s it waits in is not in %s any more", step, ref)
	case now != kind:
		return fmt.Sprintf("step %s it waits in (a %s wait) is not a %s wait in %s any more", step, kind, kind, ref)
	}
	return ""
}

// Stranded is one entry ParkStranded parked, and why.
type Stranded struct {
	QueueID    string
	TriggerRef string
	Reason     string
}

// StrandStore is a queue store that parks what a reload stranded.
type StrandStore interface {
	// ParkStranded parks at most limit stranded entries (one
	// transaction) and returns them: fewer than limit when none is left.
	ParkStranded(ctx context.Context, shape ProgramShape, limit int) ([]Stranded, error)
}

// KeyStore is a queue store that lists the wait and cancel keys its
// unfinished entries still hold, so intake keeps offering and cancelling
// under them after a reload changed the program (SPEC §2.3: a wait_for
// keeps matching the trigger and pointer it began with).
type KeyStore interface {
	KeysInUse(ctx context.Context) ([]string, error)
}
