package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/touba/touba-trigger/internal/sqlitex"
)

// Trigger definitions by digest (SPEC §2.3 version pinning): the
// dispatcher saves every trigger's at start and reload, and a run of an
// entry accepted under another digest reads the old one to check the
// steps it completed still exist.

// SaveProgram stores definition under digest; a digest already stored is
// left as it is (the same digest is the same definition).
func (q *Queue) SaveProgram(ctx context.Context, digest string, definition []byte) error {
	if digest == "" {
		return fmt.Errorf("save program: empty digest")
	}
	if definition == nil {
		definition = []byte{}
	}
	err := q.change(func(ctx context.Context, tx *sqlitex.Tx) (int64, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO programs (digest, definition, saved_at) VALUES (?, ?, ?)
			ON CONFLICT (digest) DO NOTHING`, digest, definition, q.now())
		return 0, err
	})
	if err != nil {
		return fmt.Errorf("save program %s: %w", digest, err)
	}
	return nil
}

// Program returns the definition stored under digest, nil when unknown.
func (q *Queue) Program(ctx context.Context, digest string) ([]byte, error) {
	var def []byte
	err := q.db.Read.QueryRowContext(ctx, `SELECT definition FROM programs WHERE digest = ?`, digest).Scan(&def)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("program %s: %w", digest, err)
	}
	return def, nil
}
