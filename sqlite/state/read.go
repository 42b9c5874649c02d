package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"

	touba "github.com/touba/touba-trigger"
)

// LogFilter selects delivery log rows. Empty fields match everything.
type LogFilter = touba.LogFilter

const logColumns = `delivery_id, at, trigger_ref, event_id, digest, status_code, error_code, queue_id, remote_addr, headers, body`

func scanLog(sc interface{ Scan(...any) error }) (*Delivery, error) {
	var d Delivery
	var at, hdr string
	var body []byte
	if err := sc.Scan(&d.DeliveryID, &at, &d.TriggerRef, &d.EventID, &d.Digest, &d.StatusCode, &d.ErrorCode,
		&d.QueueID, &d.RemoteAddr, &hdr, &body); err != nil {
		return nil, err
	}
	var err error
	if d.At, err = touba.ParseTime(at); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(hdr), &d.Headers); err != nil {
		return nil, err
	}
	d.Body, d.BodyStored = body, body != nil
	return &d, nil
}

// Deliveries lists log rows, newest first.
func (s *State) Deliveries(ctx context.Context, f LogFilter) ([]*Delivery, error) {
	var where []string
	var args []any
	if f.Rejected {
		where = append(where, "status_code >= 400")
	}
	if f.Code != "" {
		where, args = append(where, "error_code = ?"), append(args, f.Code)
	}
	if f.TriggerRef != "" {
		where, args = append(where, "trigger_ref = ?"), append(args, f.TriggerRef)
	}
	if f.QueueID != "" {
		where, args = append(where, "queue_id = ?"), append(args, f.QueueID)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, touba.FormatTime(f.Since))
	}
	if f.Before != "" {
		where = append(where, "seq < (SELECT seq FROM deliveries WHERE delivery_id = ?)")
		args = append(args, f.Before)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT ` + logColumns + ` FROM deliveries`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	rows, err := s.db.Read.QueryContext(ctx, q, append(args, f.Limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Delivery
	for rows.Next() {
		d, err := scanLog(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// Delivery returns one log row, or nil when there is none.
func (s *State) Delivery(ctx context.Context, id string) (*Delivery, error) {
	d, err := scanLog(s.db.Read.QueryRowContext(ctx, `SELECT `+logColumns+` FROM deliveries WHERE delivery_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return d, err
}
