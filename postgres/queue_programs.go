package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Trigger definitions by digest (SPEC §2.3 version pinning): every node
// saves its triggers' at start and reload, so a run of an entry accepted
// under an older definition, on any node, can load that one.

// SaveProgram stores definition under digest; a digest names one
// definition, so a second save of it changes nothing.
func (q *Queue) SaveProgram(ctx context.Context, digest string, definition []byte) error {
	if definition == nil {
		definition = []byte{}
	}
	if _, err := q.db.pool.Exec(ctx, `INSERT INTO touba.programs (digest, definition, saved_at) VALUES ($1, $2, $3)
		ON CONFLICT (digest) DO NOTHING`, digest, definition, q.db.now()); err != nil {
		return fmt.Errorf("save program %s: %w", digest, err)
	}
	return nil
}

// Program returns the definition saved under digest, nil when unknown.
func (q *Queue) Program(ctx context.Context, digest string) ([]byte, error) {
	var def []byte
	err := q.db.pool.QueryRow(ctx, `SELECT definition FROM touba.programs WHERE digest = $1`, digest).Scan(&def)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("program %s: %w", digest, err)
	}
	return def, nil
}
