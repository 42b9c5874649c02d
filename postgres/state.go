package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	touba "github.com/touba/touba-trigger"
)

// State is the run history, the step checkpoints, the delivery log and the
// operators' audit trail of every node.
type State struct {
	db      *db
	rows    chan *touba.LoggedDelivery
	flushes chan chan struct{}
	prunes  chan chan error
	done    chan struct{}
	mu      sync.RWMutex
	closed  bool

	written, dropped atomic.Int64
	buffered         atomic.Int64 // heldBytes of the rows waiting for the writer
}

var (
	_ touba.RunStore    = (*State)(nil)
	_ touba.DeliveryLog = (*State)(nil)
	_ touba.AuditLog    = (*State)(nil)
)

// logBuffer is how many log rows may wait for the writer; past it, rows
// are dropped and counted (the log never blocks intake, SPEC §6).
const logBuffer = 65536

func newState(d *db) *State {
	s := &State{db: d, rows: make(chan *touba.LoggedDelivery, logBuffer), flushes: make(chan chan struct{}),
		prunes: make(chan chan error), done: make(chan struct{})}
	go s.logWriter()
	return s
}

func (s *State) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.rows)
	s.mu.Unlock()
	<-s.done
}

// RecordRun writes a finished run to the history without waiting for it.
// The runs of one batch are one multi-row INSERT at its commit (flushRuns):
// one statement a batch instead of one (and a savepoint) a run.
func (s *State) RecordRun(r *touba.Run) {
	row := runRow{id: r.RunID, queueID: r.QueueID, trigger: r.TriggerRef, attempt: int32(r.Attempt), status: r.Status,
		code: pgText(r.ErrorCode), message: pgText(r.ErrorMessage), started: touba.FormatTime(r.StartedAt),
		ended: s.db.now(), node: s.db.cfg.NodeID}
	s.db.writer(r.QueueID).GoRedo(func(ctx context.Context, tx *Tx) error {
		tx.runs = append(tx.runs, row)
		return nil
	}, func(err error) { s.db.log.Error().Err(err).Msg("cannot record run history") })
}

// runRow is one row of touba.runs waiting for its batch's commit.
type runRow struct {
	id, queueID, trigger  string
	attempt               int32
	status, code, message string
	started, ended, node  string
}

// flushRuns inserts the batch's runs in one statement.
func flushRuns(ctx context.Context, q querier, runs []runRow) error {
	sql, args := insertRuns(runs)
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("record %d runs: %w", len(runs), err)
	}
	return nil
}

// insertRuns is the statement inserting runs.
func insertRuns(runs []runRow) (string, []any) {
	cols := make([][]string, 9)
	attempts := make([]int32, len(runs))
	for i, r := range runs {
		appendRow(cols, r.id, r.queueID, r.trigger, r.status, r.code, r.message, r.started, r.ended, r.node)
		attempts[i] = r.attempt
	}
	return `INSERT INTO touba.runs (run_id, queue_id, trigger_ref, attempt, status, error_code, error_message,
		started_at, ended_at, node_id, kept)
		SELECT id, qid, tr, att, st, NULLIF(code, ''), NULLIF(msg, ''), sa, ea, node, touba.entry_kept(qid)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
			AS u(id, qid, tr, att, st, code, msg, sa, ea, node)`,
		[]any{cols[0], cols[1], cols[2], attempts, cols[3], cols[4], cols[5], cols[6], cols[7], cols[8]}
}

// pgText is s as PostgreSQL's text stores it: valid UTF-8 without NUL.
// A run's error text comes from handlers; one bad byte must not fail the
// batch its row shares with other runs' changes.
func pgText(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\ufffd"), "\x00", "")
}

// SaveStep checkpoints a step's output under the lease token (0: no lease
// checked, for tools), durably; a second save keeps the first.
func (s *State) SaveStep(queueID string, token int64, stepID, runID string, output json.RawMessage) error {
	now := s.db.now()
	return errClosed(s.db.writer(queueID).Do(context.Background(), func(ctx context.Context, tx *Tx) error {
		if token != 0 {
			var one int
			err := tx.QueryRow(ctx, `SELECT 1 FROM touba.entries WHERE queue_id = $1 AND lease_token = $2 AND status = 'running'
				FOR SHARE`, queueID, token).Scan(&one)
			if errors.Is(err, pgx.ErrNoRows) {
				return whyNot(ctx, tx, queueID, token)
			} else if err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO touba.run_steps (queue_id, step_id, run_id, output, at, kept)
			VALUES ($1, $2, $3, $4, $5, touba.entry_kept($1)) ON CONFLICT DO NOTHING`, queueID, stepID, runID, string(output), now)
		return err
	}))
}

// DropSteps removes the checkpoints of stepIDs (a resume from a step),
// durably, before the entry is pending again.
func (s *State) DropSteps(ctx context.Context, queueID string, stepIDs []string) error {
	return errClosed(s.db.writer(queueID).Do(ctx, func(ctx context.Context, tx *Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM touba.run_steps WHERE queue_id = $1 AND step_id = ANY($2)`, queueID, stepIDs)
		return err
	}))
}

// Steps returns the checkpointed outputs of an entry, by step id.
func (s *State) Steps(ctx context.Context, queueID string) (map[string]touba.StepOutput, error) {
	rows, err := s.db.pool.Query(ctx, `SELECT step_id, run_id, output, at FROM touba.run_steps WHERE queue_id = $1`, queueID)
	if err != nil {
		return nil, fmt.Errorf("steps of %s: %w", queueID, err)
	}
	defer rows.Close()
	out := map[string]touba.StepOutput{}
	for rows.Next() {
		var so touba.StepOutput
		var o, at string
		if err := rows.Scan(&so.StepID, &so.RunID, &o, &at); err != nil {
			return nil, err
		}
		so.Output = json.RawMessage(o)
		if so.At, err = touba.ParseTime(at); err != nil {
			return nil, err
		}
		out[so.StepID] = so
	}
	return out, rows.Err()
}

// Runs lists the runs of an entry, oldest first.
func (s *State) Runs(ctx context.Context, queueID string) ([]touba.Run, error) {
	rows, err := s.db.pool.Query(ctx, `SELECT run_id, queue_id, trigger_ref, attempt, status, COALESCE(error_code, ''),
		COALESCE(error_message, ''), started_at, ended_at FROM touba.runs WHERE queue_id = $1 ORDER BY started_at, run_id`, queueID)
	if err != nil {
		return nil, fmt.Errorf("runs of %s: %w", queueID, err)
	}
	defer rows.Close()
	var out []touba.Run
	for rows.Next() {
		var r touba.Run
		var started string
		var ended *string
		if err := rows.Scan(&r.RunID, &r.QueueID, &r.TriggerRef, &r.Attempt, &r.Status, &r.ErrorCode, &r.ErrorMessage,
			&started, &ended); err != nil {
			return nil, err
		}
		if r.StartedAt, err = touba.ParseTime(started); err != nil {
			return nil, err
		}
		if ended != nil {
			t, err := touba.ParseTime(*ended)
			if err != nil {
				return nil, err
			}
			r.EndedAt = &t
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RecordOperator appends ev to the audit trail, durably.
func (s *State) RecordOperator(ctx context.Context, ev touba.OperatorEvent) error {
	if ev.At.IsZero() {
		ev.At = s.db.cfg.Now()
	}
	_, err := s.db.pool.Exec(ctx, `INSERT INTO touba.operator_events (at, action, queue_id, target, outcome, operator, detail, reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, touba.FormatTime(ev.At), ev.Action, ev.QueueID, ev.Target, ev.Outcome, ev.Operator, ev.Detail, ev.Reason)
	if err != nil {
		return fmt.Errorf("record operator event: %w", err)
	}
	return nil
}

// OperatorEvents lists audit rows, oldest first: those of one entry, or
// the latest limit (default 100).
func (s *State) OperatorEvents(ctx context.Context, queueID string, limit int) ([]touba.OperatorEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.db.pool.Query(ctx, `SELECT * FROM (SELECT seq, at, action, queue_id, target, outcome, operator, detail, reason
		FROM touba.operator_events WHERE $1 = '' OR queue_id = $1 ORDER BY seq DESC LIMIT $2) r ORDER BY seq`, queueID, limit)
	if err != nil {
		return nil, fmt.Errorf("operator events: %w", err)
	}
	defer rows.Close()
	var out []touba.OperatorEvent
	for rows.Next() {
		var ev touba.OperatorEvent
		var at string
		if err := rows.Scan(&ev.Seq, &at, &ev.Action, &ev.QueueID, &ev.Target, &ev.Outcome, &ev.Operator, &ev.Detail, &ev.Reason); err != nil {
			return nil, fmt.Errorf("operator events: %w", err)
		}
		if ev.At, err = touba.ParseTime(at); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// Log queues one delivery-log row without waiting; a full buffer drops it.
func (s *State) Log(d *touba.LoggedDelivery) {
	if d.DeliveryID == "" {
		d.DeliveryID = s.db.newEntryID()
	}
	if d.At.IsZero() {
		d.At = s.db.cfg.Now()
	}
	d.Trim()
	if !d.BodyStored {
		d.Body = nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.dropped.Add(1)
		return
	}
	held := heldBytes(d)
	if s.buffered.Add(held) > logBufferBytes {
		s.buffered.Add(-held)
		s.dropped.Add(1)
		return
	}
	select {
	case s.rows <- d:
	default:
		s.buffered.Add(-held)
		s.dropped.Add(1)
	}
}

// LogStats returns how many log rows were written and dropped.
func (s *State) LogStats() (written, dropped int64) { return s.written.Load(), s.dropped.Load() }

// Flush waits until every row logged before the call is written.
func (s *State) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case s.flushes <- ack:
	case <-s.done:
		return touba.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Prune applies the log's bounds (count and age) now.
func (s *State) Prune(ctx context.Context) error {
	ack := make(chan error, 1)
	select {
	case s.prunes <- ack:
	case <-s.done:
		return touba.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-ack:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

const maxLogBatch = 2048

// logWriter writes the log in batches, one multi-row insert each, and
// prunes it every 30 seconds.
func (s *State) logWriter() {
	defer close(s.done)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	batch := make([]*touba.LoggedDelivery, 0, maxLogBatch)
	for {
		select {
		case d, ok := <-s.rows:
			if !ok {
				return
			}
			batch = append(batch[:0], d)
			open := s.gather(&batch)
			s.write(batch)
			if !open {
				return
			}
		case ack := <-s.flushes:
			for {
				batch = batch[:0]
				open := s.gather(&batch)
				s.write(batch)
				if len(batch) == 0 || !open {
					break
				}
			}
			close(ack)
		case ack := <-s.prunes:
			ack <- s.prune()
		case <-tick.C:
			s.prune()
		}
	}
}

// gather adds the rows waiting now to batch, up to maxLogBatch; false
// when the buffer was closed.
func (s *State) gather(batch *[]*touba.LoggedDelivery) bool {
	for len(*batch) < maxLogBatch {
		select {
		case d, ok := <-s.rows:
			if !ok {
				return false
			}
			*batch = append(*batch, d)
		default:
			return true
		}
	}
	return true
}

// write inserts batch with one statement. When the database refuses the
// data of a row (SQLSTATE class 22 or 23: a byte a text column cannot hold,
// a delivery id logged twice), the batch is split in halves and each half
// written on its own, down to the one row refused: that row is dropped
// and counted, never the others of its batch. Any other error (the
// database unreachable) drops the batch as it is, without a retry per row.
func (s *State) write(batch []*touba.LoggedDelivery) {
	// The rows leave the buffer's byte account once, whatever becomes of
	// them (written, split, dropped).
	var held int64
	for _, d := range batch {
		held += heldBytes(d)
	}
	defer s.buffered.Add(-held)
	s.writeRows(batch)
}

// writeRows is write without the buffer's accounting: the recursion.
func (s *State) writeRows(batch []*touba.LoggedDelivery) {
	if len(batch) == 0 {
		return
	}
	n := len(batch)
	err := s.insertLog(batch)
	if noPartition(err) {
		// A delivery id past the partitions made ahead: make them.
		ctx, cancel := s.db.bounded(context.Background())
		if err = s.db.ensureNow(ctx); err == nil {
			err = s.insertLog(batch)
		}
		cancel()
	}
	if err == nil {
		s.written.Add(int64(n))
		return
	}
	if n > 1 && dataError(err) {
		s.writeRows(batch[:n/2])
		s.writeRows(batch[n/2:])
		return
	}
	s.dropped.Add(int64(n))
	ev := s.db.log.Error().Err(err).Int("rows", n)
	if n == 1 {
		ev = ev.Str("delivery_id", batch[0].DeliveryID)
	}
	ev.Msg("delivery log write failed")
}

// dataError reports whether err is the database refusing the data of a
// statement (data exception or integrity constraint violation).
func dataError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"))
}

func (s *State) insertLog(batch []*touba.LoggedDelivery) error {
	n := len(batch)
	cols := make([][]string, 10)
	for i := range cols {
		cols[i] = make([]string, n)
	}
	codes := make([]int32, n)
	bodies := make([][]byte, n)
	sizes := make([]int64, n)
	for i, d := range batch {
		hdr := []byte("{}")
		if d.Headers != nil {
			hdr, _ = json.Marshal(d.Headers)
		}
		sizes[i] = storedSize(d, touba.FormatTime(d.At), hdr)
		for c, v := range []string{d.DeliveryID, touba.FormatTime(d.At), d.TriggerRef, d.EventID, d.Digest, d.ErrorCode,
			d.QueueID, d.RemoteAddr, string(hdr)} {
			cols[c][i] = v
		}
		codes[i] = int32(d.StatusCode)
		if d.BodyStored {
			bodies[i] = d.Body
			if bodies[i] == nil {
				bodies[i] = []byte{}
			}
		}
	}
	return errClosed(s.db.w.Do(context.Background(), func(ctx context.Context, tx *Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO touba.deliveries (delivery_id, at, trigger_ref, event_id, digest, error_code, queue_id,
			remote_addr, headers, status_code, body, size)
			SELECT delivery_id, at, trigger_ref, event_id, digest, error_code, queue_id, remote_addr, headers, status_code, body, size
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
				$10::int[], $11::bytea[], $12::bigint[]) WITH ORDINALITY
				AS r(delivery_id, at, trigger_ref, event_id, digest, error_code, queue_id, remote_addr, headers, status_code, body, size, n)
			ORDER BY n`, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], cols[8], codes, bodies, sizes)
		return err
	}))
}

// prune deletes rows past LogMaxAge, then the oldest past LogMaxRows,
// then applies the byte bounds (pruneBytes).
func (s *State) prune() error {
	cutoff := touba.FormatTime(s.db.cfg.Now().Add(-s.db.cfg.LogMaxAge))
	err := errClosed(s.db.w.Do(context.Background(), func(ctx context.Context, tx *Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM touba.deliveries WHERE at < $1`, cutoff); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM touba.deliveries WHERE seq <= (SELECT seq FROM touba.deliveries ORDER BY seq DESC
			OFFSET $1 LIMIT 1)`, s.db.cfg.LogMaxRows); err != nil {
			return err
		}
		return s.pruneBytes(ctx, tx)
	}))
	if err != nil {
		s.db.log.Error().Err(err).Msg("delivery log prune failed")
	}
	return err
}
