// Package procio reads what the benchmarks count of disk writes: a
// process's bytes written (/proc/PID/io) and PostgreSQL's WAL position.
package procio

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
)

// WriteBytes is what process pid (0: this one) wrote to disk so far; 0
// when it cannot tell.
func WriteBytes(pid int) int64 {
	path := "/proc/self/io"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/io", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "write_bytes: "); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

// WALBytes is the database's WAL position in bytes (0 without one).
func WALBytes(db *pgx.Conn) (int64, error) {
	if db == nil {
		return 0, nil
	}
	var n int64
	err := db.QueryRow(context.Background(), `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n)
	return n, err
}
