package sqlitex

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// TempBTrees counts the temporary b-trees (OpenEphemeral) the program of
// query opens. SQLite builds one, each time the expression runs, for
// `x IN (...)` of three or more constants, which in a CHECK or a partial
// index's predicate is every write of the row (migration 0014 of the
// queue). Its arguments are all NULL: EXPLAIN only compiles.
func TempBTrees(ctx context.Context, db *sql.DB, query string) (int, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n := 0
	err = c.Raw(func(dc any) error {
		var err error
		n, err = tempBTrees(dc.(driver.Conn), query)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("explain: %w", err)
	}
	return n, nil
}

// TempBTrees is the package function on the writer transaction's own
// connection: what the statements of a batch compile to there.
func (t *Tx) TempBTrees(query string) (int, error) {
	n, err := tempBTrees(t.conn, query)
	if err != nil {
		return 0, fmt.Errorf("explain: %w", err)
	}
	return n, nil
}

func tempBTrees(c driver.Conn, query string) (int, error) {
	s, err := c.Prepare(`EXPLAIN ` + query)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	//lint:ignore SA1019 the driver's own interface: no context to pass.
	rows, err := s.Query(make([]driver.Value, s.NumInput()))
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	vals := make([]driver.Value, len(rows.Columns()))
	n := 0
	for {
		if err := rows.Next(vals); errors.Is(err, io.EOF) {
			return n, nil
		} else if err != nil {
			return 0, err
		}
		if op, _ := vals[1].(string); op == "OpenEphemeral" {
			n++
		}
	}
}

// QueryPlan is EXPLAIN QUERY PLAN of query with args on db: each step's
// detail ("SEARCH entries USING INDEX entries_key (...)"), in SQLite's
// order.
func QueryPlan(ctx context.Context, db *sql.DB, query string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		return nil, fmt.Errorf("explain query plan: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			return nil, fmt.Errorf("explain query plan: %w", err)
		}
		out = append(out, detail)
	}
	return out, rows.Err()
}
