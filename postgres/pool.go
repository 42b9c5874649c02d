package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	touba "github.com/touba/touba-trigger"
)

// DefaultTimeout is --database-timeout's default.
const DefaultTimeout = 5 * time.Second

// poolConfig is the pool's configuration from c.URL: every wait bounded
// (SPEC §8). Direct (the first try), the server-side timeouts are startup
// parameters of each session (free per transaction) and statements are
// prepared and cached (pgx's default). Pooled (a connection pooler such as
// PgBouncer in transaction mode, which refuses or drops such parameters
// and hands each transaction any server connection), nothing is asked of
// a session: the timeouts are set per transaction (SET LOCAL) and no named
// statement is prepared on the server.
func poolConfig(c Config, pooled bool) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, touba.Errorf(touba.ECONFIG, "--database: %v", err)
	}
	cc := pc.ConnConfig
	// The client side: a dial, the TLS and startup handshakes are bounded;
	// a connection whose peer stopped acknowledging (black-holed, its host
	// gone) is declared dead by the kernel after Timeout of unacknowledged
	// data (TCP_USER_TIMEOUT) or of silence (keepalives).
	if cc.ConnectTimeout <= 0 || cc.ConnectTimeout > c.Timeout {
		cc.ConnectTimeout = c.Timeout
	}
	cc.DialFunc = dialer(c.Timeout).DialContext
	if !pooled {
		for k, v := range sessionTimeouts(c.Timeout) {
			if _, ok := cc.RuntimeParams[k]; !ok {
				cc.RuntimeParams[k] = v
			}
		}
		if _, ok := cc.RuntimeParams["jit"]; !ok {
			cc.RuntimeParams["jit"] = "off" // jitOff
		}
	} else if !strings.Contains(c.URL, "default_query_exec_mode") {
		// No named server-side prepared statement: through the pooler the
		// next transaction may run on another server connection, where it
		// does not exist. cache_describe keeps each statement's parameter
		// and result types on the client (described once per connection,
		// through the unnamed statement) and sends every execution as
		// Parse, Bind, Execute of the unnamed statement: one round trip,
		// binary formats. A URL naming default_query_exec_mode keeps its
		// choice.
		cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "touba-trigger " + c.NodeID // PgBouncer passes this one on
	}
	pc.MaxConns = c.MaxConns
	return pc, nil
}

// dialer dials with keepalives and TCP_USER_TIMEOUT set to timeout.
func dialer(timeout time.Duration) *net.Dialer {
	every := max(timeout/3, time.Second)
	return &net.Dialer{
		Timeout:         timeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: timeout, Interval: every, Count: 3},
		Control: func(network, address string, rc syscall.RawConn) error {
			if network != "tcp" && network != "tcp4" && network != "tcp6" {
				return nil // a unix socket: no TCP options
			}
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(timeout.Milliseconds()))
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
}

// lockTimeout is the server's lock_timeout for a --database-timeout: a
// writer's batch waiting on a lock holds up every operation of the batch,
// so the wait is a fraction of what a request may take.
func lockTimeout(timeout time.Duration) time.Duration {
	return max(timeout/5, 50*time.Millisecond)
}

// sessionTimeouts are the server-side bounds as startup parameters, in
// milliseconds.
func sessionTimeouts(timeout time.Duration) map[string]string {
	ms := func(d time.Duration) string { return fmt.Sprint(d.Milliseconds()) }
	return map[string]string{"statement_timeout": ms(timeout), "lock_timeout": ms(lockTimeout(timeout)),
		"idle_in_transaction_session_timeout": ms(timeout)}
}

// probeDirect tells whether the sessions of pool run with the timeouts
// asked at startup: false when the server side refused them (PgBouncer's
// "unsupported startup parameter") or does not show them (a pooler that
// dropped them), and the error of a database that did not answer.
func probeDirect(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) (bool, error) {
	rows, err := pool.Query(ctx, `SELECT name, setting FROM pg_settings
		WHERE name IN ('statement_timeout', 'lock_timeout', 'idle_in_transaction_session_timeout')`)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "08P01" && strings.Contains(pe.Message, "startup parameter") {
			return false, nil
		}
		return false, fmt.Errorf("connect to the database: %w", err)
	}
	want := sessionTimeouts(timeout)
	n := 0
	for rows.Next() {
		var name, setting string
		if err := rows.Scan(&name, &setting); err != nil {
			rows.Close()
			return false, err
		}
		if want[name] == setting {
			n++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("connect to the database: %w", err)
	}
	return n == len(want), nil
}

// JIT is off for the daemon's sessions (a startup parameter; per
// transaction behind a pooler, where a session's settings do not stay):
// a statement over a partitioned table plans a function per partition
// once its estimate passes jit_above_cost, and the retention pass at 72
// partitions compiled 1,853 of them, 16 s where it ran in 25 ms without
// (docs/performance.md, issue 42 round 11). The daemon's statements are
// short, and none gains from compiling. A URL that names jit keeps it.
const jitOff = `SET LOCAL jit = off`

// beginRC begins a READ COMMITTED transaction.
const beginRC = `BEGIN ISOLATION LEVEL READ COMMITTED`

// beginSQL begins a writer's transaction: READ COMMITTED whatever the
// database's default (the per-key decisions in queue_concurrency.go need a new
// snapshot after each lock), with the server-side bounds set for this
// transaction only (SET LOCAL: nothing stays on a connection a pooler
// hands to someone else), in the BEGIN's own round trip.
func beginSQL(timeout time.Duration, pooled bool) string {
	if !pooled {
		return beginRC // the session has the bounds
	}
	return fmt.Sprintf(beginRC+`; `+jitOff+`; SET LOCAL statement_timeout = %d; `+
		`SET LOCAL lock_timeout = %d; SET LOCAL idle_in_transaction_session_timeout = %d`,
		timeout.Milliseconds(), lockTimeout(timeout).Milliseconds(), timeout.Milliseconds())
}

// setLocal is beginSQL's bounds as one statement, for a batch sent as one
// implicit transaction (a pipeline ending in one Sync).
func setLocal(timeout time.Duration) string {
	return fmt.Sprintf(`SELECT set_config('statement_timeout', '%d', true), set_config('lock_timeout', '%d', true), `+
		`set_config('idle_in_transaction_session_timeout', '%d', true), set_config('jit', 'off', true)`,
		timeout.Milliseconds(), lockTimeout(timeout).Milliseconds(), timeout.Milliseconds())
}

// bounded is ctx with Timeout more at most.
func (d *db) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.cfg.Timeout)
}

// implicitTx runs each statement after setLocal in one pipeline ending
// in one Sync: one implicit transaction, one round trip, the server-side
// bounds set for it alone.
type implicitTx struct {
	pool *pgxpool.Pool
	set  string
}

func (p implicitTx) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return sendAfter(ctx, p.pool, b, p.set)
}

func (p implicitTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	// The implicit transaction commits at the pipeline's Sync, which Close
	// reads: a deferred constraint or a failed commit is only seen there.
	if cerr := br.Close(); err == nil && cerr != nil {
		return pgconn.CommandTag{}, cerr
	}
	return tag, err
}

func (p implicitTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p implicitTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := p.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return firstRow{rows}
}

// batchSender is a pool or a connection.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendAfter sends heads (statements without arguments) and then b's
// statements as one pipeline on s, and reads the heads' answers; the
// caller reads b's from the results as if b had been sent alone.
func sendAfter(ctx context.Context, s batchSender, b *pgx.Batch, heads ...string) (pgx.BatchResults, error) {
	nb := &pgx.Batch{}
	for _, h := range heads {
		nb.Queue(h)
	}
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	br := s.SendBatch(ctx, nb)
	for range heads {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
}

// batchRows closes its batch with its rows.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow's answer from Query's rows.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		r.rows.Close()
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// Unavailable tells whether err from Open is the database not answering
// (refused, unreachable, timed out, starting up or shutting down) rather
// than a refusal that waiting will not change: the daemon waits at start
// for the first kind.
func Unavailable(err error) bool {
	if err == nil || touba.ErrorCode(err) != touba.EINTERNAL {
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe):
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P")
	case errors.As(err, &ce), errors.As(err, &ne), errors.Is(err, context.DeadlineExceeded), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return true
	}
	return false
}

// Redact is the database URL without its password, for logs.
func Redact(url string) string {
	cc, err := pgconn.ParseConfig(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
}

// set is setLocal behind a pooler, "" when each session has the bounds.
func (d *db) set() string {
	if d.pooled {
		return setLocal(d.cfg.Timeout)
	}
	return ""
}
