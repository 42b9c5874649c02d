package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
)

// The multi-row forms of journal_fused.go's statements and of an entry's end,
// for the rows a batch deferred (tx_deferred.go). Each takes its rows as
// arrays (unnest WITH ORDINALITY numbers them), writes for each what the
// single-row statement would, and answers per row whether it did, in the
// rows' order. Rows name distinct entries, so no entry row is matched
// twice by an UPDATE ... FROM.
//
// Their state conditions compare under COLLATE "C" (equality is the same
// on text: byte for byte), which neither the status indexes nor the
// partial ones on running entries (entries_leases) can serve, nor their
// predicates be proved from: each row is found by its key and its state
// checked on the row. As a plain condition the planner, from statistics
// taken when no entry of the partition was running (as after a burst of
// intake), read every running entry (or unsettled effect) through such an
// index and matched each against every row of the batch: 3.5 ms against
// 0.06 for the end of 25 entries with 466 running (EXPLAIN ANALYZE, issue
// 42), a cost growing with the running entries, not the batch.

// pdRow is a deferred PrepareDispatched of an identity not yet journaled;
// done is told the batch's time and whether its effect was written.
type pdRow struct {
	p    touba.EffectPrepare
	done func(ctx context.Context, now string, ok bool) error
}

// prepareDispatchedMany is fusedPrepareDispatched for many rows: built
// once per store (newJournal), not per flush, unless ClockOffset moves
// the clock between them.
func (j *Journal) prepareDispatchedMany() string {
	if j.pdMany != "" {
		return j.pdMany
	}
	return j.buildPrepareDispatchedMany()
}

func (j *Journal) buildPrepareDispatchedMany() string {
	return `WITH i AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[])
	WITH ORDINALITY AS i(scope, effect_id, tool_ref, operation, fingerprint, retry_mode, call_id, token, n)),
f AS (SELECT i.n, e.queue_id, e.kept, e.lease_expires_at < ` + j.db.dbFresh() + ` AS stale FROM touba.entries e JOIN i
	ON e.queue_id = i.scope AND e.lease_token = i.token AND e.status COLLATE "C" = 'running'
		AND e.lease_expires_at IS NOT NULL AND e.lease_expires_at >= ` + j.db.dbNow() + ` FOR UPDATE OF e),
x AS (UPDATE touba.entries e SET lease_expires_at = ` + j.db.dbExpiry() + ` FROM f WHERE e.queue_id = f.queue_id AND f.stale),
ins AS (INSERT INTO touba.effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
		attempts, call_id, created_at, updated_at, owner, lease_token, kept, born, born_call)
	SELECT i.scope, i.effect_id, i.tool_ref, i.operation, i.fingerprint, i.retry_mode, 'dispatched', 1, i.call_id, $9, $9, $10, i.token, f.kept,
		'` + bornPD + `', i.call_id
	FROM i JOIN f ON f.n = i.n ORDER BY i.n
	ON CONFLICT DO NOTHING RETURNING scope, effect_id)
SELECT i.n, ins.scope IS NOT NULL FROM i LEFT JOIN ins ON ins.scope = i.scope AND ins.effect_id = i.effect_id ORDER BY i.n`
}

// queuePrepares queues the statement of rows on b.
func (j *Journal) queuePrepares(b *pgx.Batch, rows []pdRow) *flushPart {
	cols := make([][]string, 7)
	tokens := make([]int64, len(rows))
	for r, row := range rows {
		p := row.p
		appendRow(cols, p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.RetryMode, p.CallID)
		tokens[r] = p.LeaseToken
	}
	now := j.db.now()
	b.Queue(j.db.hot.on(j.prepareDispatchedMany(), j.db.hot.suffix(cols[0])), cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], tokens, now, j.owner)
	return writtenPart(len(rows), "prepare", func(ctx context.Context, r int, ok bool) error { return rows[r].done(ctx, now, ok) })
}

// finRow is a deferred Finish of an effect under its entry's lease.
type finRow struct {
	o      touba.EffectOutcome
	token  int64
	detail string
	done   func(ctx context.Context, ok bool) error
}

// finishMany is fusedFinish for many rows.
//
// An effect's outcome is kept in its row when the row holds none yet
// (settled, journal_born.go), else it is an effect_events row; either
// takes its seq from the rows' sequence here (i.seq), so that the two
// read back in order.
var finishMany = `WITH i AS (SELECT *, nextval('` + eventSeq + `') AS seq FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[],
		$5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[])
	WITH ORDINALITY AS i(scope, effect_id, token, state, receipt_ref, result, error_code, receipt_error_code, call_id, detail, n)),
f AS (SELECT i.n, e.kept FROM touba.entries e JOIN i ON e.queue_id = i.scope AND e.lease_token = i.token AND e.status COLLATE "C" = 'running'
	FOR UPDATE OF e),
u AS (UPDATE touba.effects x SET state = i.state, receipt_ref = NULLIF(i.receipt_ref, ''), result = i.result,
		error_code = NULLIF(i.error_code, ''), receipt_error_code = NULLIF(i.receipt_error_code, ''), updated_at = $11, owner = NULL,
		` + settleSet("i.state", "NULLIF(i.call_id, '')", "$11", "NULLIF(i.detail, '')", "i.seq") + `
	FROM i JOIN f ON f.n = i.n
	WHERE x.scope = i.scope AND x.effect_id = i.effect_id AND x.state COLLATE "C" IN ('prepared', 'dispatched') AND x.call_id = i.call_id
		AND x.owner = $12
	RETURNING i.n, x.settled_seq = i.seq AS settled),
ev AS (INSERT INTO touba.effect_events (seq, scope, effect_id, call_id, state, at, detail, kept)
	SELECT i.seq, i.scope, i.effect_id, NULLIF(i.call_id, ''), i.state, $11, NULLIF(i.detail, ''), f.kept
	FROM i JOIN u ON u.n = i.n AND NOT u.settled JOIN f ON f.n = i.n ORDER BY i.n)
SELECT i.n, u.n IS NOT NULL FROM i LEFT JOIN u ON u.n = i.n ORDER BY i.n`

// queueOutcomes queues the statement of rows on b.
func (j *Journal) queueOutcomes(b *pgx.Batch, rows []finRow) *flushPart {
	cols := make([][]string, 8)
	tokens := make([]int64, len(rows))
	results := make([]*string, len(rows))
	for r, row := range rows {
		o := row.o
		appendRow(cols, o.Scope, o.EffectID, o.State, o.ReceiptRef, o.ErrorCode, o.ReceiptErrorCode, o.CallID, row.detail)
		tokens[r] = row.token
		if o.Result != nil {
			s := string(o.Result)
			results[r] = &s
		}
	}
	b.Queue(j.db.hot.on(finishMany, j.db.hot.suffix(cols[0])), cols[0], cols[1], tokens, cols[2], cols[3], results, cols[4], cols[5], cols[6], cols[7], j.db.now(), j.owner)
	return writtenPart(len(rows), "finish", func(ctx context.Context, r int, ok bool) error { return rows[r].done(ctx, ok) })
}

// endRow is a deferred Queue.Finish; done gets the ended entry, or nil
// when it was not running under the token.
type endRow struct {
	queueID, status, code, message string
	token                          int64
	done                           func(ctx context.Context, e *endedRow) error
}

type endedRow struct {
	ref, final string
	key        *string
	max        int
}

// endMany is Queue.Finish's statement for many entries.
const endMany = `WITH i AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[])
	WITH ORDINALITY AS i(queue_id, token, status, code, message, n))
UPDATE touba.entries e SET
	status = CASE WHEN i.status = 'failed' AND e.cancel_requested IS NOT NULL THEN 'cancelled' ELSE i.status END,
	error_code = CASE WHEN i.status = 'failed' AND e.cancel_requested IS NOT NULL THEN '` + touba.ERunCancelled + `' ELSE NULLIF(i.code, '') END,
	error_message = CASE WHEN i.status = 'failed' AND e.cancel_requested IS NOT NULL THEN e.cancel_requested ELSE NULLIF(i.message, '') END,
	cancel_requested = CASE WHEN i.status = 'parked' THEN e.cancel_requested END,
	not_before = NULL, updated_at = $6, lease_owner = NULL, lease_expires_at = NULL
FROM i WHERE e.queue_id = i.queue_id AND e.status COLLATE "C" = 'running' AND e.lease_token = i.token
RETURNING i.n, e.trigger_ref, e.conc_key, e.conc_max, e.status`

// queueEnds queues the statement of rows on b.
func queueEnds(b *pgx.Batch, rows []endRow, now string, hot *hotLeaves) *flushPart {
	cols := make([][]string, 4)
	tokens := make([]int64, len(rows))
	for r, row := range rows {
		appendRow(cols, row.queueID, row.status, row.code, row.message)
		tokens[r] = row.token
	}
	b.Queue(hot.on(endMany, hot.suffix(cols[0])), cols[0], tokens, cols[1], cols[2], cols[3], now)
	ended := make([]*endedRow, len(rows))
	return &flushPart{
		read: func(br pgx.BatchResults) error {
			res, err := br.Query()
			if err != nil {
				return fmt.Errorf("end %d entries: %w", len(rows), err)
			}
			defer res.Close()
			for res.Next() {
				var n int
				e := &endedRow{}
				if err := res.Scan(&n, &e.ref, &e.key, &e.max, &e.final); err != nil {
					return fmt.Errorf("end %d entries: %w", len(rows), err)
				} else if n < 1 || n > len(rows) {
					return fmt.Errorf("end %d entries: row %d returned", len(rows), n)
				}
				ended[n-1] = e
			}
			if err := res.Err(); err != nil {
				return fmt.Errorf("end %d entries: %w", len(rows), err)
			}
			return nil
		},
		done: func(ctx context.Context) error {
			for r, row := range rows {
				if err := row.done(ctx, ended[r]); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// queueRuns queues the insert of a batch's run history on b.
func queueRuns(b *pgx.Batch, runs []runRow) *flushPart {
	sql, args := insertRuns(runs)
	b.Queue(sql, args...)
	return &flushPart{
		read: func(br pgx.BatchResults) error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("record %d runs: %w", len(runs), err)
			}
			return nil
		},
		done: func(context.Context) error { return nil },
	}
}

// appendRow appends a row's text values to the column arrays of a
// multi-row statement (unnest), value c to column c.
func appendRow(cols [][]string, vs ...string) {
	for c, v := range vs {
		cols[c] = append(cols[c], v)
	}
}

// flushPart is one statement of a flush: read takes its answer from the
// pipeline, done then settles its rows.
type flushPart struct {
	read func(br pgx.BatchResults) error
	done func(ctx context.Context) error
}

// writtenPart is the part of a statement answering written for each of
// its n effect rows (written), each row then told by done.
func writtenPart(n int, what string, done func(ctx context.Context, r int, ok bool) error) *flushPart {
	var ok []bool
	return &flushPart{
		read: func(br pgx.BatchResults) (err error) {
			if ok, err = written(br, n); err != nil {
				return fmt.Errorf("%s %d effects: %w", what, n, err)
			}
			return nil
		},
		done: func(ctx context.Context) error {
			for r := range n {
				if err := done(ctx, r, ok[r]); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// written reads a multi-row statement's (n, written) answers, n numbering
// the rows from 1.
func written(br pgx.BatchResults, rows int) ([]bool, error) {
	res, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer res.Close()
	ok := make([]bool, rows)
	seen := 0
	for res.Next() {
		var n int
		var w bool
		if err := res.Scan(&n, &w); err != nil {
			return nil, err
		} else if n < 1 || n > rows {
			return nil, fmt.Errorf("row %d of %d returned", n, rows)
		}
		ok[n-1] = w
		seen++
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	if seen != rows {
		return nil, fmt.Errorf("%d answers for %d rows", seen, rows)
	}
	return ok, nil
}
