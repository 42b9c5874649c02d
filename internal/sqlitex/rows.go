package sqlitex

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Rows are the rows of a query in a writer transaction, read the way
// *sql.Rows are: Next, Scan, Err, Close.
type Rows struct {
	d    driver.Rows
	done func() // finalizes a statement prepared for this query alone
	vals []driver.Value
	err  error
	sql  *sql.Rows // a WrapTx transaction's
}

// Next reads the next row; false at the end or on an error (Err).
func (r *Rows) Next() bool {
	if r.sql != nil {
		return r.sql.Next()
	}
	if r.d == nil || r.err != nil {
		return false
	}
	if err := r.d.Next(r.vals); err != nil {
		if err != io.EOF {
			r.err = err
		}
		r.Close()
		return false
	}
	return true
}

// Scan copies the row's columns into dest.
func (r *Rows) Scan(dest ...any) error {
	if r.sql != nil {
		return r.sql.Scan(dest...)
	}
	if r.d == nil {
		return fmt.Errorf("sqlitex: Scan after the last row")
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlitex: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, v := range r.vals {
		if err := assign(dest[i], v); err != nil {
			return fmt.Errorf("sqlitex: column %d: %w", i, err)
		}
	}
	return nil
}

// Err is the error that ended Next early.
func (r *Rows) Err() error {
	if r.sql != nil {
		return r.sql.Err()
	}
	return r.err
}

// Close frees the rows; idempotent.
func (r *Rows) Close() error {
	if r.sql != nil {
		return r.sql.Close()
	}
	if r.d == nil {
		return nil
	}
	err := r.d.Close()
	r.d = nil
	r.done()
	return err
}

// Row is the first row of a query, read by Scan.
type Row struct {
	rows *Rows
	err  error
	row  *sql.Row // a WrapTx transaction's
}

// Scan copies the first row's columns into dest, or says sql.ErrNoRows.
func (r *Row) Scan(dest ...any) error {
	if r.row != nil {
		return r.row.Scan(dest...)
	}
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	return r.rows.Scan(dest...)
}

// namedValues converts arguments the way database/sql does for this
// driver: the common types as they are, int at once, others (named types,
// driver.Valuer) by driver.DefaultParameterConverter. They go in t.args.
func (t *Tx) namedValues(args []any) ([]driver.NamedValue, error) {
	nv := (*t.args)[:0]
	for i, a := range args {
		switch v := a.(type) {
		case nil, string, int64, float64, bool, []byte, time.Time:
		case int:
			a = int64(v)
		default:
			var err error
			if a, err = driver.DefaultParameterConverter.ConvertValue(a); err != nil {
				return nil, fmt.Errorf("sqlitex: argument %d: %w", i+1, err)
			}
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: a})
	}
	*t.args = nv
	return nv, nil
}

// assign stores one column value, as go-sqlite3 returns it (int64,
// float64, string, []byte (a copy), time.Time or nil), into dest: the
// conversions database/sql makes for the types the stores scan into.
func assign(dest, v any) error {
	switch d := dest.(type) {
	case *string:
		switch x := v.(type) {
		case string:
			*d = x
		case []byte:
			*d = string(x)
		case int64:
			*d = strconv.FormatInt(x, 10)
		case float64:
			*d = strconv.FormatFloat(x, 'g', -1, 64)
		default:
			return fmt.Errorf("cannot store %T in *string", v)
		}
	case *[]byte:
		switch x := v.(type) {
		case nil:
			*d = nil
		case []byte:
			*d = x // go-sqlite3 returns a copy of a blob
		case string:
			*d = []byte(x)
		default:
			return fmt.Errorf("cannot store %T in *[]byte", v)
		}
	case *int64:
		n, err := asInt(v)
		*d = n
		return err
	case *int:
		n, err := asInt(v)
		*d = int(n)
		return err
	case *bool:
		switch x := v.(type) {
		case bool:
			*d = x
		case int64:
			*d = x != 0
		default:
			return fmt.Errorf("cannot store %T in *bool", v)
		}
	case *float64:
		switch x := v.(type) {
		case float64:
			*d = x
		case int64:
			*d = float64(x)
		default:
			return fmt.Errorf("cannot store %T in *float64", v)
		}
	case *any:
		*d = v
	case sql.Scanner:
		return d.Scan(v)
	default:
		return fmt.Errorf("cannot store %T in %T", v, dest)
	}
	return nil
}

func asInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	case []byte:
		return strconv.ParseInt(string(x), 10, 64)
	}
	return 0, fmt.Errorf("cannot store %T in an integer", v)
}
