package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/sqlwhere"
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
	var where sqlwhere.Where
	if f.Rejected {
		// A consumed entry's redelivery is answered 200 but is still a
		// TriggerReplayRejected (SPEC §3.1): listed with the rejections.
		where.Add("(status_code >= 400 OR error_code = ?)", touba.ETriggerReplayRejected)
	}
	if f.Refused {
		where.Add("status_code >= 400")
	}
	where.Equal("error_code", f.Code)
	where.Equal("trigger_ref", f.TriggerRef)
	where.Equal("queue_id", f.QueueID)
	if !f.Since.IsZero() {
		where.Add("at >= ?", touba.FormatTime(f.Since))
	}
	if f.Before != "" {
		where.Add("seq < (SELECT seq FROM deliveries WHERE delivery_id = ?)", f.Before)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	q := `SELECT ` + logColumns + ` FROM deliveries` + where.String() + ` ORDER BY seq DESC LIMIT ?`
	rows, err := s.db.Read.QueryContext(ctx, q, where.Args(f.Limit)...)
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
