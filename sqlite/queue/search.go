package queue

import (
	"context"
	"database/sql"
	"fmt"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/entrysearch"
	"github.com/touba/touba-trigger/internal/sqlwhere"
)

// triggersCTE lists the distinct trigger refs by a loose scan of the
// identity index (one seek a trigger, not one step a row), so an event-id
// search without a trigger still goes through (trigger_ref, event_id).
const triggersCTE = `WITH RECURSIVE refs(ref) AS (
	SELECT MIN(trigger_ref) FROM entries
	UNION ALL
	SELECT (SELECT MIN(trigger_ref) FROM entries WHERE trigger_ref > refs.ref) FROM refs WHERE refs.ref IS NOT NULL)
`

// Search finds entries by queue id, by event id through the identity index,
// or by a scan newest first of at most s.MaxScan entries (SPEC §6).
func (q *Queue) Search(ctx context.Context, s touba.EntrySearch) (*touba.SearchResult, error) {
	s = entrysearch.Normalize(s)
	m, err := touba.NewBodyMatcher(s.Pointer, s.Value)
	if err != nil {
		return nil, err
	}
	var rows *sql.Rows
	switch {
	case s.QueueID != "":
		rows, err = q.db.Read.QueryContext(ctx, `SELECT `+entryColumns+` FROM entries WHERE queue_id = ?`, s.QueueID)
	case s.EventID != "" && s.TriggerRef != "":
		rows, err = q.db.Read.QueryContext(ctx, `SELECT `+entryColumns+` FROM entries
			WHERE trigger_ref = ? AND event_id = ? AND event_id != '' ORDER BY queue_id DESC`, s.TriggerRef, s.EventID)
	case s.EventID != "":
		rows, err = q.db.Read.QueryContext(ctx, triggersCTE+`SELECT `+entryColumns+` FROM entries
			WHERE trigger_ref IN (SELECT ref FROM refs WHERE ref IS NOT NULL) AND event_id = ? AND event_id != ''
			ORDER BY queue_id DESC`, s.EventID)
	default:
		var where sqlwhere.Where
		where.Equal("status", s.Status)
		where.Equal("trigger_ref", s.TriggerRef)
		rows, err = q.db.Read.QueryContext(ctx, `SELECT `+entryColumns+` FROM entries`+where.String()+` ORDER BY queue_id DESC`,
			where.Args()...)
	}
	if err != nil {
		return nil, fmt.Errorf("search entries: %w", err)
	}
	defer rows.Close()
	res, err := entrysearch.Collect(s, m, func() (*touba.Delivery, bool, error) {
		if !rows.Next() {
			return nil, false, rows.Err()
		}
		d, err := scanEntry(rows)
		return d, err == nil, err
	})
	if err != nil {
		return nil, fmt.Errorf("search entries: %w", err)
	}
	return res, nil
}

// SelectIDs lists the queue ids of a bulk replay's selection, oldest first.
func (q *Queue) SelectIDs(ctx context.Context, s touba.EntrySelection) ([]string, error) {
	var where sqlwhere.Where
	where.Equal("status", s.Status)
	where.Equal("trigger_ref", s.TriggerRef)
	where.Equal("error_code", s.Code)
	if !s.Since.IsZero() {
		where.Add("received_at >= ?", touba.FormatTime(s.Since))
	}
	rows, err := q.db.Read.QueryContext(ctx, `SELECT queue_id FROM entries`+where.String()+` ORDER BY queue_id`, where.Args()...)
	if err != nil {
		return nil, fmt.Errorf("select entries: %w", err)
	}
	defer rows.Close()
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
