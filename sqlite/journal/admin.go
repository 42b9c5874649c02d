package journal

import (
	"context"
	"fmt"
)

// CountByState returns how many effects are in each state, for metrics and
// the operator's overview.
func (j *Journal) CountByState(ctx context.Context) (map[string]int64, error) {
	rows, err := j.db.Read.QueryContext(ctx, `SELECT state, COUNT(*) FROM effects GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("count effects: %w", err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count effects: %w", err)
	}
	return out, nil
}
