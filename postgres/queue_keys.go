package postgres

import "context"

// KeysInUse lists the keys of open event waits and of the cancel keys of
// unfinished entries (touba.KeyStore).
func (q *Queue) KeysInUse(ctx context.Context) ([]string, error) {
	ctx, cancel := q.db.bounded(ctx)
	defer cancel()
	rows, err := q.db.pool.Query(ctx, `SELECT DISTINCT key FROM touba.waits WHERE state = 'open' AND kind = 'event'
		UNION SELECT DISTINCT c.key FROM touba.cancel_keys c JOIN touba.entries e ON e.queue_id = c.queue_id
		WHERE e.status IN ('pending', 'running', 'waiting', 'parked')`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}
