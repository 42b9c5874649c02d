package state

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/touba/touba-trigger/internal/sqlitex"
)

// ForgetRuns deletes the runs, step checkpoints and audit-trail events of
// the forgotten entries ids (SPEC §8.1), in one operation of the writer,
// and returns how many runs went. The entries are gone from the queue
// already: nothing reads or writes these rows any more.
func (s *State) ForgetRuns(ctx context.Context, ids []string) (int64, error) {
	if s.w == nil {
		return 0, sqlitex.ErrReadOnly
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return 0, err
	}
	var runs int64
	err = s.w.Do(ctx, func(ctx context.Context, tx *sqlitex.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE queue_id IN (SELECT value FROM json_each(?1))`, string(list))
		if err != nil {
			return fmt.Errorf("forget runs: %w", err)
		}
		runs, _ = res.RowsAffected()
		for _, stmt := range []string{
			`DELETE FROM run_steps WHERE queue_id IN (SELECT value FROM json_each(?1))`,
			`DELETE FROM operator_events WHERE queue_id IN (SELECT value FROM json_each(?1))`,
		} {
			if _, err := tx.ExecContext(ctx, stmt, string(list)); err != nil {
				return fmt.Errorf("forget runs: %w", err)
			}
		}
		return nil
	})
	return runs, err
}
