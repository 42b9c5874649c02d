package queue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

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
	m, err := entrysearch.NewBodyMatcher(s.Pointer, s.Value)
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
		return q.scan(ctx, s, m)
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

// scanColumns are what a scan's filters read; a match is then read whole.
const scanColumns = `queue_id, trigger_ref, event_id, status, received_at, body`

// scan is Search's bounded scan, newest first, reading of each entry only
// what its filters need (decoding every entry's headers and times cost
// more than matching its body).
func (q *Queue) scan(ctx context.Context, s touba.EntrySearch, m *entrysearch.BodyMatcher) (*touba.SearchResult, error) {
	var where sqlwhere.Where
	where.Equal("status", s.Status)
	where.Equal("trigger_ref", s.TriggerRef)
	rows, err := q.db.Read.QueryContext(ctx, `SELECT `+scanColumns+` FROM entries`+where.String()+` ORDER BY queue_id DESC`,
		where.Args()...)
	if err != nil {
		return nil, fmt.Errorf("search entries: %w", err)
	}
	defer rows.Close()
	var since string
	if !s.Since.IsZero() {
		since = touba.FormatTime(s.Since)
	}
	res, err := entrysearch.Collect(s, m, func() (*touba.Delivery, bool, error) {
		if !rows.Next() {
			return nil, false, rows.Err()
		}
		var d touba.Delivery
		var recv string
		if err := rows.Scan(&d.QueueID, &d.TriggerRef, &d.EventID, &d.Status, &recv, &d.Body); err != nil {
			return nil, false, err
		}
		if since != "" && recv < since {
			// Stored times sort as text: older than the window, without
			// parsing every time inside it.
			d.ReceivedAt = s.Since.Add(-time.Millisecond)
		} else {
			d.ReceivedAt = s.Since
		}
		return &d, true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("search entries: %w", err)
	}
	rows.Close()
	for i, d := range res.Entries {
		full, err := q.Get(ctx, d.QueueID)
		if err != nil {
			return nil, fmt.Errorf("search entries: %w", err)
		} else if full != nil {
			res.Entries[i] = full
		}
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
	return scanIDs(rows)
}
