package journal

import (
	"context"
	"fmt"

	touba "github.com/touba/touba-trigger"
)

// OrphanDetail is the audit detail of a dispatched effect whose call ended
// in this process without its outcome on disk (a failed commit): nobody
// will report it any more, so it is unknown, exactly as at a restart.
const OrphanDetail = touba.DetailOrphaned

// Abandon is called when the call holding an effect has ended but its
// outcome could not be journaled (Finish failed for good). It releases the
// in-memory reservation at once, so the identity is not held by a call
// that no longer exists (a replay would otherwise loop on
// EffectInProgress until a restart), and records a dispatched row
// unknown. When that write fails too, the row stays dispatched on disk;
// it is then turned unknown by the next Prepare or Resolve of the identity,
// or by the next start's recovery: a dispatched row of this handle that
// no call of this process holds is unknown by definition.
func (j *Journal) Abandon(ctx context.Context, scope, effectID, callID string) error {
	if !j.holds(scope, effectID, callID) {
		return nil
	}
	j.release(scope, effectID, callID)
	return j.submit(ctx, func(ctx context.Context, tx *wtx) error {
		r, err := getRow(ctx, tx, scope, effectID)
		if err != nil {
			return fmt.Errorf("abandon effect %s/%s: %w", scope, effectID, err)
		}
		if r == nil || r.CallID != callID || r.owner != j.owner {
			return nil
		}
		switch r.State {
		case touba.EffectDispatched:
			return j.markUnknown(ctx, tx, r, j.stamp(), OrphanDetail)
		case touba.EffectPrepared:
			// Nothing was sent: released for a new attempt.
			_, err := tx.ExecContext(ctx, `UPDATE effects SET owner = NULL
				WHERE scope = ? AND effect_id = ? AND state = 'prepared' AND call_id = ?`, scope, effectID, callID)
			return err
		}
		return nil
	})
}

// orphaned reports whether r is a dispatched row of this handle that no
// call of this process holds: its call ended without an outcome on disk.
func (j *Journal) orphaned(r *row) bool {
	if r == nil || r.State != touba.EffectDispatched || r.owner != j.owner {
		return false
	}
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	_, held := j.claims[claimKey(r.Scope, r.EffectID)]
	return !held
}

// Orphaned reports whether the effect is dispatched with no call of this
// process holding it: semantically unknown, and resolvable like one
// (`effects resolve`). The operator views use it to say what to do.
func (j *Journal) Orphaned(ctx context.Context, scope, effectID string) bool {
	r, err := j.readRow(ctx, scope, effectID)
	return err == nil && j.orphaned(r)
}
