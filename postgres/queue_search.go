package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/entrysearch"
	"github.com/touba/touba-trigger/internal/sqlwhere"
)

// triggersCTE lists the distinct trigger refs by a loose scan of the
// identity index (one seek a trigger), so an event-id search without a
// trigger still goes through (trigger_ref, event_id).
const triggersCTE = `WITH RECURSIVE refs(ref) AS (
	SELECT MIN(trigger_ref) FROM touba.entries
	UNION ALL
	SELECT (SELECT MIN(trigger_ref) FROM touba.entries WHERE trigger_ref > refs.ref) FROM refs WHERE refs.ref IS NOT NULL)
`

// Search finds entries by queue id, by event id through the identity index,
// or by a scan newest first of at most s.MaxScan entries (SPEC §6).
func (q *Queue) Search(ctx context.Context, s touba.EntrySearch) (*touba.SearchResult, error) {
	s = entrysearch.Normalize(s)
	m, err := entrysearch.NewBodyMatcher(s.Pointer, s.Value)
	if err != nil {
		return nil, err
	}
	var rows pgx.Rows
	switch {
	case s.QueueID != "":
		rows, err = q.db.pool.Query(ctx, `SELECT `+entryColumns+` FROM touba.entries WHERE queue_id = $1`, s.QueueID)
	case s.EventID != "" && s.TriggerRef != "":
		rows, err = q.db.pool.Query(ctx, `SELECT `+entryColumns+` FROM touba.entries
			WHERE trigger_ref = $1 AND event_id = $2 ORDER BY queue_id DESC`, s.TriggerRef, s.EventID)
	case s.EventID != "":
		rows, err = q.db.pool.Query(ctx, triggersCTE+`SELECT `+entryColumns+` FROM touba.entries
			WHERE trigger_ref IN (SELECT ref FROM refs WHERE ref IS NOT NULL) AND event_id = $1
			ORDER BY queue_id DESC`, s.EventID)
	default:
		var where sqlwhere.Where
		where.Equal("status", s.Status)
		where.Equal("trigger_ref", s.TriggerRef)
		// The scan stops at MaxScan rows (or the window's end): ask for no
		// more than that plus the one that tells whether more exist.
		query := `SELECT ` + entryColumns + ` FROM touba.entries` + where.String() + ` ORDER BY queue_id DESC LIMIT ?`
		rows, err = q.db.pool.Query(ctx, sqlwhere.Dollar(query), where.Args(s.MaxScan+1)...)
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
	rows, err := q.db.pool.Query(ctx, sqlwhere.Dollar(`SELECT queue_id FROM touba.entries`+where.String()+` ORDER BY queue_id`), where.Args()...)
	if err != nil {
		return nil, fmt.Errorf("select entries: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// RecordOperators appends evs to the audit trail in one transaction.
func (s *State) RecordOperators(ctx context.Context, evs []touba.OperatorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, ev := range evs {
		if ev.At.IsZero() {
			ev.At = s.db.cfg.Now()
		}
		b.Queue(`INSERT INTO touba.operator_events (at, action, queue_id, target, outcome, operator, detail, reason)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, touba.FormatTime(ev.At), ev.Action, ev.QueueID, ev.Target, ev.Outcome,
			ev.Operator, ev.Detail, ev.Reason)
	}
	tx, err := s.db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record operator events: %w", err)
	}
	defer tx.Rollback(ctx)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record operator events: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record operator events: %w", err)
	}
	return nil
}
