package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Claims are the operator actions' claims on entries, in the database
// (admin.Claims): what one node or CLI holds, another sees.
type Claims struct {
	db       *db
	instance string
}

// Claim claims queueID for what; it returns what holds it already
// (naming the node), or "".
func (c *Claims) Claim(ctx context.Context, queueID, what string) (string, error) {
	ctx, cancel := c.db.bounded(ctx)
	defer cancel()
	var one int
	err := c.db.pool.QueryRow(ctx, `INSERT INTO touba.operator_claims (queue_id, what, node, instance, expires_at)
		VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond')
		ON CONFLICT (queue_id) DO UPDATE SET what = EXCLUDED.what, node = EXCLUDED.node, instance = EXCLUDED.instance,
			expires_at = EXCLUDED.expires_at
		WHERE touba.operator_claims.expires_at < now()
		RETURNING 1`, queueID, what, c.db.cfg.NodeID, c.instance, c.db.cfg.LeaseTTL.Milliseconds()).Scan(&one)
	if err == nil {
		return "", nil
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("claim entry %s: %w", queueID, err)
	}
	var held, node string
	if err := c.db.pool.QueryRow(ctx, `SELECT what, node FROM touba.operator_claims WHERE queue_id = $1`, queueID).
		Scan(&held, &node); errors.Is(err, pgx.ErrNoRows) {
		return c.Claim(ctx, queueID, what) // released in between
	} else if err != nil {
		return "", fmt.Errorf("claim entry %s: %w", queueID, err)
	}
	return held + " (on " + node + ")", nil
}

// Release drops this store's claim of queueID.
func (c *Claims) Release(ctx context.Context, queueID string) {
	ctx, cancel := c.db.bounded(context.WithoutCancel(ctx))
	defer cancel()
	if _, err := c.db.pool.Exec(ctx, `DELETE FROM touba.operator_claims WHERE queue_id = $1 AND instance = $2`,
		queueID, c.instance); err != nil {
		c.db.log.Warn().Err(err).Str("queue_id", queueID).Msg("release of an operator claim failed; it expires by itself")
	}
}
