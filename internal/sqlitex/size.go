package sqlitex

import (
	"context"
	"fmt"
	"os"
)

// Size is the file's size on disk with its WAL (what the file system
// holds for it), and free what of it SQLite no longer uses: pages on the
// free list, which the next writes reuse before the file grows again.
func (db *DB) Size(ctx context.Context) (onDisk, free int64, err error) {
	for _, p := range []string{db.Path, db.Path + "-wal"} {
		st, err := os.Stat(p)
		if err != nil && !os.IsNotExist(err) {
			return 0, 0, fmt.Errorf("size of %s: %w", p, err)
		} else if err == nil {
			onDisk += st.Size()
		}
	}
	var pages, pageSize int64
	if err := db.Read.QueryRowContext(ctx, `SELECT freelist_count, page_size FROM pragma_freelist_count(), pragma_page_size()`).Scan(&pages, &pageSize); err != nil {
		return 0, 0, fmt.Errorf("free pages of %s: %w", db.Path, err)
	}
	return onDisk, pages * pageSize, nil
}
