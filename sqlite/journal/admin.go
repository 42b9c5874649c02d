package journal

import (
	"context"
	"fmt"

	"github.com/touba/touba-trigger/internal/sqlitex"
)

// CountByState returns how many effects are in each state, for metrics and
// the operator's overview.
func (j *Journal) CountByState(ctx context.Context) (map[string]int64, error) {
	out, err := sqlitex.CountBy(ctx, j.db.Read, `SELECT state, COUNT(*) FROM effects GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	return out, nil
}
