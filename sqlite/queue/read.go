package queue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlitex"
	"github.com/touba/touba-trigger/internal/sqlwhere"
)

const entryColumns = `queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at,
	status, attempts, COALESCE(error_code, ''), updated_at, traceparent, COALESCE(conc_key, ''), conc_max, held, lease_token,
	lease_token = first_token, wake_at, program_digest, COALESCE(merged_into, '')`

type scanner interface{ Scan(...any) error }

// rowsScanner is what scanEntries and scanIDs read: *sql.Rows or
// *sqlitex.Rows.
type rowsScanner interface {
	scanner
	Next() bool
	Err() error
}

// scanEntries reads every row of rows as an entry (entryColumns).
func scanEntries(rows rowsScanner) ([]*touba.Delivery, error) {
	var out []*touba.Delivery
	for rows.Next() {
		d, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// scanIDs reads every row of rows as one queue id.
func scanIDs(rows rowsScanner) ([]string, error) {
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func scanEntry(s scanner) (*touba.Delivery, error) {
	var d touba.Delivery
	var hdr, recv, upd string
	var wake sql.NullString
	if err := s.Scan(&d.QueueID, &d.TriggerRef, &d.EventID, &d.Digest, &d.Body, &hdr, &d.RemoteAddr, &recv,
		&d.Status, &d.Attempts, &d.ErrorCode, &upd, &d.TraceParent, &d.ConcKey, &d.ConcMax, &d.Held, &d.LeaseToken,
		&d.FirstLease, &wake, &d.ProgramDigest, &d.MergedInto); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(hdr), &d.Headers); err != nil {
		return nil, fmt.Errorf("entry %s: headers: %w", d.QueueID, err)
	}
	var err error
	if d.ReceivedAt, err = touba.ParseTime(recv); err != nil {
		return nil, fmt.Errorf("entry %s: received_at: %w", d.QueueID, err)
	}
	if d.UpdatedAt, err = touba.ParseTime(upd); err != nil {
		return nil, fmt.Errorf("entry %s: updated_at: %w", d.QueueID, err)
	}
	if d.WakeAt, err = parseNullTime(wake); err != nil {
		return nil, fmt.Errorf("entry %s: wake_at: %w", d.QueueID, err)
	}
	return &d, nil
}

// Get returns one entry, or nil and no error when there is none.
func (q *Queue) Get(ctx context.Context, queueID string) (*touba.Delivery, error) {
	d, err := scanEntry(q.db.Read.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM entries WHERE queue_id = ?`, queueID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return d, err
}

// Filter selects entries for List. Empty fields match everything.
type Filter = touba.EntryFilter

// List returns entries in queue order (oldest first), or newest first.
func (q *Queue) List(ctx context.Context, f Filter) ([]*touba.Delivery, error) {
	var where sqlwhere.Where
	where.Equal("status", f.Status)
	where.Equal("trigger_ref", f.TriggerRef)
	if f.Held {
		where.Add("status = 'pending' AND held = 1")
	}
	if f.After != "" {
		where.Add("queue_id > ?", f.After)
	}
	order := ""
	if f.Newest {
		order = " DESC"
		if f.Before != "" {
			where.Add("queue_id < ?", f.Before)
		}
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	query := `SELECT ` + entryColumns + ` FROM entries` + where.String() + ` ORDER BY queue_id` + order + ` LIMIT ?`
	rows, err := q.db.Read.QueryContext(ctx, query, where.Args(f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("list entries: %w", err)
	}
	defer rows.Close()
	return scanEntries(rows)
}

// CountByStatus returns how many entries are in each state.
func (q *Queue) CountByStatus(ctx context.Context) (map[string]int64, error) {
	return sqlitex.CountBy(ctx, q.db.Read, `SELECT status, COUNT(*) FROM entries GROUP BY status`)
}
