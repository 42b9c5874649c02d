package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/internal/commit"
	"github.com/touba/touba-trigger/internal/sqlwhere"
)

// Journal is the effect journal (SPEC §5) in the shared database. As the
// SQLite journal, each open handle has an owner id that holds its prepared
// and dispatched effects, and an in-memory claim per effect in progress;
// here each claim also keeps the lease token its call runs under, which
// Dispatch and Finish check against the entry in the same transaction.
type Journal struct {
	db    *db
	owner string

	claimMu sync.Mutex
	claims  map[string]claim

	// pdMany is prepareDispatchedMany's statement, built once (unless a
	// test shifts the clock: ClockOffset).
	pdMany string
}

type claim struct {
	callID string
	token  int64
}

func newJournal(d *db) *Journal {
	j := &Journal{db: d, owner: newID(), claims: map[string]claim{}}
	if d.cfg.ClockOffset == nil {
		j.pdMany = j.buildPrepareDispatchedMany()
	}
	return j
}

var _ touba.EffectJournal = (*Journal)(nil)

func claimKey(scope, effectID string) string { return scope + "\x00" + effectID }

func (j *Journal) claim(scope, effectID, callID string, token int64) bool {
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	k := claimKey(scope, effectID)
	if _, held := j.claims[k]; held {
		return false
	}
	j.claims[k] = claim{callID, token}
	return true
}

// holds returns callID's claim of an identity in this process.
func (j *Journal) holds(scope, effectID, callID string) (claim, bool) {
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	c, ok := j.claims[claimKey(scope, effectID)]
	return c, ok && c.callID == callID
}

func (j *Journal) release(scope, effectID, callID string) {
	j.claimMu.Lock()
	defer j.claimMu.Unlock()
	k := claimKey(scope, effectID)
	if j.claims[k].callID == callID {
		delete(j.claims, k)
	}
}

// submit runs fn in the next batch of scope's writer, isolated from the
// other operations: fn is redo-safe (it sets its results on every run), so
// a batch of such operations runs without a savepoint each and, should one
// fail, runs again with them (commit.Options.Optimistic). An operation
// that fails having written nothing (a fence that matched no row) says so
// with commit.Refused and leaves the batch alone.
//
// One that lost a deadlock or met a row a pass moved to the kept
// partitions while it waited for the row's lock (40001, "tuple to be
// locked was already moved to another partition": its batch isolated
// from the start, by an operation not redo-safe beside it) runs again,
// as the queue's changes do (issue 42): its transaction rolled back.
func (j *Journal) submit(scope string, fn func(ctx context.Context, tx *Tx) error) error {
	return retried(func() error {
		return errClosed(j.db.writer(scope).DoRedo(context.Background(), func(ctx context.Context, tx *Tx) error {
			tx.journal++
			return fn(ctx, tx)
		}))
	})
}

// fence checks, in tx, that the entry scope is still leased under token
// and locks it until the transaction ends, so no take-over commits in
// between. live also asks that the lease has not expired: a call starts
// only under a live lease. Token 0 (an operator's action) is not fenced.
func (j *Journal) fence(ctx context.Context, tx *Tx, scope string, token int64, live bool) error {
	if token == 0 {
		return nil
	}
	// Live: one statement both checks the lease and extends it (the call
	// that follows has the whole --lease-ttl, longer than any binding's
	// timeout, before anyone may take the entry over). Either way the
	// entry's row stays locked until the transaction ends, so no take-over
	// commits in between.
	query, args := `SELECT 1 FROM touba.entries WHERE queue_id = $1 AND lease_token = $2 AND status = 'running' FOR UPDATE`, []any{scope, token}
	if live {
		query = `UPDATE touba.entries SET lease_expires_at = ` + j.db.dbExpiry() + ` WHERE queue_id = $1 AND lease_token = $2
			AND status = 'running' AND lease_expires_at IS NOT NULL AND lease_expires_at >= ` + j.db.dbNow() + ` RETURNING 1`
	}
	var one int
	err := tx.QueryRow(ctx, query, args...).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fenceLost(ctx, tx, scope, token)
	}
	return err
}

// fenceRefused is fenceLost for an operation that wrote nothing before its
// fence failed: the LeaseLost is marked commit.Refused, so that an
// optimistic batch goes on without it (no savepoint undoes anything, and
// nothing needs undoing). A failed read is a plain error: the transaction
// is gone, and the batch runs again isolated.
func (j *Journal) fenceRefused(ctx context.Context, tx *Tx, scope string, token int64) error {
	var cur int64
	var owner string
	err := tx.QueryRow(ctx, `SELECT lease_token, COALESCE(lease_owner, '') FROM touba.entries WHERE queue_id = $1`, scope).Scan(&cur, &owner)
	switch {
	case err == nil && cur != token:
		return commit.Refused(touba.Errorf(touba.ELeaseLost, "entry %s is leased under token %d (node %q), not %d", scope, cur, owner, token))
	case err == nil || errors.Is(err, pgx.ErrNoRows):
		return commit.Refused(touba.Errorf(touba.ELeaseLost, "the lease of entry %s (token %d) has expired or ended", scope, token))
	}
	return fmt.Errorf("lease of entry %s: %w", scope, err)
}

// fenceLost is the LeaseLost of a fence that matched no row.
func fenceLost(ctx context.Context, tx *Tx, scope string, token int64) error {
	if werr := whyNot(ctx, tx, scope, token); touba.ErrorCode(werr) == touba.ELeaseLost {
		return werr
	}
	return touba.Errorf(touba.ELeaseLost, "the lease of entry %s (token %d) has expired or ended", scope, token)
}

const effectCols = `scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state, attempts,
	call_id, receipt_ref, result, error_code, receipt_error_code, created_at, updated_at, owner`

type row struct {
	touba.Effect
	owner string
}

func scanEffect(s scanner) (*row, error) {
	var r row
	var callID, receipt, result, code, rcode, owner *string
	var created, updated string
	err := s.Scan(&r.Scope, &r.EffectID, &r.ToolRef, &r.Operation, &r.Fingerprint, &r.RetryMode,
		&r.State, &r.Attempts, &callID, &receipt, &result, &code, &rcode, &created, &updated, &owner)
	if err != nil {
		return nil, err
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	r.CallID, r.ReceiptRef, r.ErrorCode, r.ReceiptErrorCode, r.owner = str(callID), str(receipt), str(code), str(rcode), str(owner)
	if result != nil {
		r.Result = json.RawMessage(*result)
	}
	if r.CreatedAt, err = touba.ParseTime(created); err != nil {
		return nil, err
	}
	if r.UpdatedAt, err = touba.ParseTime(updated); err != nil {
		return nil, err
	}
	return &r, nil
}

func getRow(ctx context.Context, q querier, scope, effectID string) (*row, error) {
	r, err := scanEffect(q.QueryRow(ctx, `SELECT `+effectCols+` FROM touba.effects WHERE scope = $1 AND effect_id = $2`, scope, effectID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// Get returns one effect, or nil, nil.
func (j *Journal) Get(ctx context.Context, scope, effectID string) (*touba.Effect, error) {
	r, err := getRow(ctx, j.db.pool, scope, effectID)
	if err != nil || r == nil {
		return nil, err
	}
	return &r.Effect, nil
}

// List returns the effects that match f, oldest first.
func (j *Journal) List(ctx context.Context, f touba.EffectFilter) ([]touba.Effect, error) {
	var where sqlwhere.Where
	where.Equal("state", f.State)
	where.Equal("scope", f.Scope)
	q := `SELECT ` + effectCols + ` FROM touba.effects` + where.String() + ` ORDER BY created_at, scope, effect_id`
	var more []any
	if f.Limit > 0 {
		q += ` LIMIT ?`
		more = append(more, f.Limit)
	}
	rows, err := j.db.pool.Query(ctx, sqlwhere.Dollar(q), where.Args(more...)...)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	defer rows.Close()
	var out []touba.Effect
	for rows.Next() {
		r, err := scanEffect(rows)
		if err != nil {
			return nil, fmt.Errorf("list effects: %w", err)
		}
		out = append(out, r.Effect)
	}
	return out, rows.Err()
}

// CountByState returns how many effects are in each state.
func (j *Journal) CountByState(ctx context.Context) (map[string]int64, error) {
	return countBy(ctx, j.db.pool, `SELECT state, COUNT(*) FROM touba.effects GROUP BY state`)
}

// JournalStats returns the shared writer's counters.
func (j *Journal) JournalStats() touba.JournalStats {
	st := j.db.stats()
	return touba.JournalStats{Commits: uint64(st.Commits), Transitions: uint64(st.Ops), Failed: uint64(st.Failed),
		LargestBatch: uint64(st.Largest), Pending: st.Pending}
}

func appendEvent(ctx context.Context, tx *Tx, scope, effectID, callID, state, at, detail string) error {
	_, err := tx.Exec(ctx, `INSERT INTO touba.effect_events (scope, effect_id, call_id, state, at, detail, kept)
		VALUES ($1, $2, NULLIF($3, ''), $4, $5, NULLIF($6, ''), EXISTS (SELECT 1 FROM touba.entries k WHERE k.queue_id = $1 AND k.kept))`, scope, effectID, callID, state, at, detail)
	if err != nil {
		return fmt.Errorf("append effect event: %w", err)
	}
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (j *Journal) holdsSecret(values ...string) bool {
	for _, v := range values {
		if j.db.cfg.Secrets.Contains(v) {
			return true
		}
	}
	return false
}

func secretRefused(what string) error {
	return touba.Errorf(touba.ESecretValueRefused, "%s holds a resolved secret value; not stored", what)
}
