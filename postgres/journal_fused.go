package postgres

import (
	"context"

	touba "github.com/touba/touba-trigger"
)

// The journal's common transitions as one statement each (issue 28): the
// lease fence, the effect row and its audit event, which were three round
// trips, each a wait of the one goroutine that commits a batch for many
// callers. Each statement's CTEs run in one snapshot and the fence's row
// lock is held to the end of the transaction, as when they were three
// statements; the effect is written only when the fence matched. When
// either part matched nothing the caller takes the slow path, which
// explains why (whyNot, heldRow), unchanged.

// fusedPrepare is Prepare of an effect not yet journaled, under a live
// lease: fenced reports the fence, inserted that the row and its
// "prepared" event were written (false: the identity exists, or the fence
// failed). The fence locks the entry's row but does not extend the lease:
// no request leaves before Dispatch, whose fence checks the lease again
// and extends it by the whole --lease-ttl for the call (unless it is
// fresh: dbFresh); a lease that ran
// out in between fails there (LeaseLost, nothing sent, the effect stays
// prepared: a new attempt for whoever takes the entry over). One row
// version of entries fewer per effect.
// The lease is live by the database's clock (SPEC §8), as in fence.
func (j *Journal) fusedPrepare() string {
	return `WITH f AS (
	SELECT kept FROM touba.entries WHERE queue_id = $1 AND lease_token = $10 AND status = 'running'
		AND lease_expires_at IS NOT NULL AND lease_expires_at >= ` + j.db.dbNow() + ` FOR UPDATE),
ins AS (INSERT INTO touba.effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
		attempts, call_id, created_at, updated_at, owner, lease_token, kept, born, born_call)
	SELECT $1, $2, $3, $4, $5, $6, 'prepared', 1, $7, $8, $8, $9, $10, kept, '` + bornP + `', $7 FROM f
	ON CONFLICT DO NOTHING RETURNING kept)
SELECT EXISTS (SELECT 1 FROM f), EXISTS (SELECT 1 FROM ins)`
}

func (j *Journal) prepareFused(ctx context.Context, tx *Tx, p touba.EffectPrepare, now string) (fenced, inserted bool, err error) {
	err = tx.QueryRow(ctx, j.fusedPrepare(), p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.RetryMode,
		p.CallID, now, j.owner, p.LeaseToken).Scan(&fenced, &inserted)
	return fenced, inserted, err
}

// fusedDispatch is Dispatch under a live lease it extends unless it is
// fresh (dbFresh; locked either way): attempts is 0 when the effect was
// not moved (fence failed, or not prepared by callID). The lease is
// checked and extended by the database's clock (SPEC §8). $7 ends the
// event's detail (the request, DispatchRequest).
func (j *Journal) fusedDispatch() string {
	return `WITH f AS (
	SELECT kept, lease_expires_at < ` + j.db.dbFresh() + ` AS stale FROM touba.entries WHERE queue_id = $1 AND lease_token = $2 AND status = 'running'
		AND lease_expires_at IS NOT NULL AND lease_expires_at >= ` + j.db.dbNow() + ` FOR UPDATE),
x AS (UPDATE touba.entries SET lease_expires_at = ` + j.db.dbExpiry() + ` WHERE queue_id = $1 AND (SELECT stale FROM f)),
u AS (UPDATE touba.effects SET state = 'dispatched', updated_at = $3
	WHERE scope = $1 AND effect_id = $4 AND state = 'prepared' AND call_id = $5 AND owner = $6 AND EXISTS (SELECT 1 FROM f)
	RETURNING attempts),
ev AS (INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at, detail, kept)
	SELECT $1, $4, NULLIF($5, ''), 'dispatched', $3, 'dispatch attempt ' || attempts || $7::text, (SELECT kept FROM f) FROM u)
SELECT EXISTS (SELECT 1 FROM f), COALESCE((SELECT attempts FROM u), 0)`
}

func (j *Journal) dispatchFused(ctx context.Context, tx *Tx, scope, effectID, callID string, token int64, note string) (fenced bool, attempts int, err error) {
	err = tx.QueryRow(ctx, j.fusedDispatch(), scope, token, j.db.now(), effectID, callID, j.owner, note).Scan(&fenced, &attempts)
	return fenced, attempts, err
}

// fusedFinish is Finish's outcome under the lease (not necessarily live:
// the call may have outlived it, the answer is still the journal's):
// finished is false when the fence failed or callID does not hold the
// effect. The outcome is kept in the effect's row when it holds none yet,
// else it is a row (finishMany).
var fusedFinish = `WITH f AS (
	SELECT kept FROM touba.entries WHERE queue_id = $1 AND lease_token = $2 AND status = 'running' FOR UPDATE),
s AS (SELECT nextval('` + eventSeq + `') AS seq),
u AS (UPDATE touba.effects SET state = $3, receipt_ref = $4, result = $5, error_code = $6,
		receipt_error_code = $7, updated_at = $8, owner = NULL,
		` + settleSet("$3", "NULLIF($10, '')", "$8", "NULLIF($12, '')", "(SELECT seq FROM s)") + `
	WHERE scope = $1 AND effect_id = $9 AND state IN ('prepared', 'dispatched') AND call_id = $10 AND owner = $11
		AND EXISTS (SELECT 1 FROM f)
	RETURNING settled_seq = (SELECT seq FROM s) AS settled),
ev AS (INSERT INTO touba.effect_events (seq, scope, effect_id, call_id, state, at, detail, kept)
	SELECT (SELECT seq FROM s), $1, $9, NULLIF($10, ''), $3, $8, NULLIF($12, ''), (SELECT kept FROM f) FROM u WHERE NOT u.settled)
SELECT EXISTS (SELECT 1 FROM f), EXISTS (SELECT 1 FROM u)`

func (j *Journal) finishFused(ctx context.Context, tx *Tx, o touba.EffectOutcome, token int64, now, detail string) (fenced, finished bool, err error) {
	var result any
	if o.Result != nil {
		result = string(o.Result)
	}
	err = tx.QueryRow(ctx, fusedFinish, o.Scope, token, o.State, nullable(o.ReceiptRef), result, nullable(o.ErrorCode),
		nullable(o.ReceiptErrorCode), now, o.EffectID, o.CallID, j.owner, detail).Scan(&fenced, &finished)
	return fenced, finished, err
}

// fusedPrepareDispatched is PrepareDispatched of an effect not yet
// journaled (in-process handlers): the fence checks the lease is live and
// extends it unless fresh, as Dispatch's does, and the row is inserted straight as
// dispatched with both audit events (prepared, then dispatched; seq keeps
// their order), as on SQLite (docs/performance.md, "Prepared and
// dispatched in one commit"). fenced and inserted as fusedPrepare.
func (j *Journal) fusedPrepareDispatched() string {
	return `WITH f AS (
	SELECT kept, lease_expires_at < ` + j.db.dbFresh() + ` AS stale FROM touba.entries WHERE queue_id = $1 AND lease_token = $10 AND status = 'running'
		AND lease_expires_at IS NOT NULL AND lease_expires_at >= ` + j.db.dbNow() + ` FOR UPDATE),
x AS (UPDATE touba.entries SET lease_expires_at = ` + j.db.dbExpiry() + ` WHERE queue_id = $1 AND (SELECT stale FROM f)),
ins AS (INSERT INTO touba.effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
		attempts, call_id, created_at, updated_at, owner, lease_token, kept, born, born_call)
	SELECT $1, $2, $3, $4, $5, $6, 'dispatched', 1, $7, $8, $8, $9, $10, kept, '` + bornPD + `', $7 FROM f
	ON CONFLICT DO NOTHING RETURNING kept)
SELECT EXISTS (SELECT 1 FROM f), EXISTS (SELECT 1 FROM ins)`
}

func (j *Journal) prepareDispatchedFused(ctx context.Context, tx *Tx, p touba.EffectPrepare, now string) (fenced, inserted bool, err error) {
	err = tx.QueryRow(ctx, j.fusedPrepareDispatched(), p.Scope, p.EffectID, p.ToolRef, p.Operation, p.Fingerprint, p.RetryMode,
		p.CallID, now, j.owner, p.LeaseToken).Scan(&fenced, &inserted)
	return fenced, inserted, err
}
