package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

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

// insertRuns is the statement inserting runs. A run of a kept entry is
// kept (history_forget.go); the test is written inline, as in every
// statement that inserts a row of an entry: touba.entry_kept(), a SQL
// function holding a subquery, is not inlined by the planner and cost
// about 20 µs a row.
func insertRuns(runs []runRow) (string, []any) {
	cols := make([][]string, 9)
	attempts := make([]int32, len(runs))
	for i, r := range runs {
		appendRow(cols, r.id, r.queueID, r.trigger, r.status, r.code, r.message, r.started, r.ended, r.node)
		attempts[i] = r.attempt
	}
	return `INSERT INTO touba.runs (run_id, queue_id, trigger_ref, attempt, status, error_code, error_message,
		started_at, ended_at, node_id, kept)
		SELECT id, qid, tr, att, st, NULLIF(code, ''), NULLIF(msg, ''), sa, ea, node, EXISTS (SELECT 1 FROM touba.entries k WHERE k.queue_id = u.qid AND k.kept)
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
	return s.do(context.Background(), queueID, func(ctx context.Context, tx *Tx) error {
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
			VALUES ($1, $2, $3, $4, $5, EXISTS (SELECT 1 FROM touba.entries k WHERE k.queue_id = $1 AND k.kept)) ON CONFLICT DO NOTHING`, queueID, stepID, runID, string(output), now)
		return err
	})
}

// DropSteps removes the checkpoints of stepIDs (a resume from a step),
// durably, before the entry is pending again.
func (s *State) DropSteps(ctx context.Context, queueID string, stepIDs []string) error {
	return s.do(ctx, queueID, func(ctx context.Context, tx *Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM touba.run_steps WHERE queue_id = $1 AND step_id = ANY($2)`, queueID, stepIDs)
		return err
	})
}

// do runs fn in queueID's writer, isolated, and again when it lost a
// deadlock or met a row a pass moved to the kept partitions while fn
// waited for its lock (40001, "tuple to be locked was already moved to
// another partition": issue 42), as the queue's changes are: its
// transaction rolled back, and the next run finds the row where it went.
func (s *State) do(ctx context.Context, queueID string, fn func(ctx context.Context, tx *Tx) error) error {
	return retried(func() error { return errClosed(s.db.writer(queueID).Do(ctx, fn)) })
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
