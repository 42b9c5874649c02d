package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A transaction begun inside its first pipeline (connTx) commits what it
// wrote, and a COMMIT the server answers ROLLBACK (a statement of it
// failed, its error swallowed) is a failed commit, never a success.
func TestPipelineBeginCommitsOrFails(t *testing.T) {
	st, _ := deferStore(t)
	ctx := context.Background()
	d := st.db
	b := backend{pool: d.pool, now: d.now, begin: d.begin, set: d.set(), timeout: time.Second, dc: &d.deferred}
	write := func(key string, fail bool) error {
		return b.Batch(ctx, func(tx *Tx) error {
			pb := &pgx.Batch{}
			pb.Queue(`INSERT INTO touba.meta (key, value) VALUES ($1, 'v')`, key)
			if fail {
				pb.Queue(`SELECT 1 / 0`)
			}
			br, err := tx.sendBatch(ctx, pb)
			if err != nil {
				return err
			}
			if _, ok := tx.tx.(*connTx); !ok {
				t.Errorf("the batch's first pipeline did not begin its transaction: %T", tx.tx)
			}
			_, _ = br.Exec()
			_, _ = br.Exec() // the failure, swallowed: only the commit can tell
			_ = br.Close()
			return nil
		})
	}
	if err := write("pipe-ok", false); err != nil {
		t.Fatal(err)
	}
	if err := write("pipe-failed", true); err == nil {
		t.Fatal("a transaction with a failed statement committed without an error")
	}
	var n int
	if err := d.pool.QueryRow(ctx, `SELECT COUNT(*) FROM touba.meta WHERE key IN ('pipe-ok', 'pipe-failed')`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d of the two rows stored (%v), want the committed one", n, err)
	}
	if st := d.pool.Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired after both batches", st.AcquiredConns())
	}
}

// A statement run behind a pooler (implicitTx: one pipeline, one implicit
// transaction committed at its Sync) fails when its commit fails: here a
// deferred unique constraint, checked only at that commit.
func TestImplicitTxReportsTheCommit(t *testing.T) {
	_, url := deferStore(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE touba.implicit_commit (id INT UNIQUE DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO touba.implicit_commit VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	p := implicitTx{pool: pool, set: setLocal(time.Second)}
	if _, err := p.Exec(ctx, `INSERT INTO touba.implicit_commit VALUES ($1)`, 1); err == nil {
		t.Fatal("an insert whose implicit commit failed (a deferred unique violation) reported no error")
	}
	if _, err := p.Exec(ctx, `INSERT INTO touba.implicit_commit VALUES ($1)`, 2); err != nil {
		t.Fatalf("a sound insert: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT COUNT(*) FROM touba.implicit_commit`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows (%v), want 2: the failed insert rolled back, the sound one kept", n, err)
	}
}
