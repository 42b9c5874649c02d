// Command floor measures the SQL a stub effect costs, alone: the
// statements the dispatcher's stores run for one accounting_stub effect
// (the lease, the journal's prepared+dispatched row and events, its
// outcome and event, the entry's end, the run record), on the real
// schemas and files (synchronous=FULL), in batches of -batch effects per
// commit of each file, from one goroutine through the driver connection,
// with no dispatcher, no commit engine and no Go work but binding the
// arguments. Its CPU per effect is the floor under the dispatcher's: what
// is left once everything that is not SQLite is taken away.
//
//	go run ./scripts/bench/floor -n 30000 -batch 100 -body 1024
//
// Extra arguments are SQL run first on a file ("q:", "j:" or "s:" then
// the statement), to measure what an index or a trigger costs, say
// "j:DROP TRIGGER effects_applied_final".
package main

import (
	"context"
	"database/sql/driver"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/uuidv7"
	"github.com/touba/touba-trigger/sqlite/journal"
	"github.com/touba/touba-trigger/sqlite/queue"
	"github.com/touba/touba-trigger/sqlite/state"
)

// The statements, as the stores write them (sqlite/queue, sqlite/journal,
// sqlite/state).
const (
	qLease = `UPDATE entries SET status = 'running', attempts = attempts + 1, lease_token = lease_token + 1, updated_at = ?
		WHERE queue_id IN (SELECT queue_id FROM entries e WHERE status = 'pending' AND held = 0
		  AND (not_before IS NULL OR not_before <= ?) ORDER BY queue_id LIMIT ?)
		RETURNING queue_id, trigger_ref, event_id, digest, body, headers, remote_addr, received_at, status,
		  attempts, lease_token`
	qInsertEffect = `INSERT INTO effects (scope, effect_id, tool_ref, operation, fingerprint, retry_mode, state,
		attempts, call_id, created_at, updated_at, owner)
		VALUES (?, ?, ?, ?, ?, ?, 'dispatched', 1, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
	qEventPair = `INSERT INTO effect_events (scope, effect_id, call_id, state, at, detail)
		VALUES (?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?)`
	qEvent   = `INSERT INTO effect_events (scope, effect_id, call_id, state, at, detail) VALUES (?, ?, ?, ?, ?, ?)`
	qOutcome = `UPDATE effects SET state = ?, receipt_ref = ?, result = ?, error_code = ?, receipt_error_code = ?,
		owner = NULL, updated_at = ? WHERE scope = ? AND effect_id = ? AND call_id = ?
		AND state IN ('prepared', 'dispatched') AND owner = ?`
	qFinish = `UPDATE entries SET status = ?, error_code = NULLIF(?, ''), error_message = NULLIF(?, ''),
		not_before = NULL, updated_at = ? WHERE queue_id = ? AND status = 'running' AND lease_token = ?
		AND conc_key IS NULL`
	qRun = `INSERT INTO runs (run_id, queue_id, trigger_ref, attempt, status, error_code, error_message,
		started_at, ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

func main() {
	n := flag.Int("n", 30000, "effects")
	batch := flag.Int("batch", 100, "effects per commit of each file")
	bodySize := flag.Int("body", 34, "body bytes")
	syncMode := flag.String("sync", "FULL", "synchronous: FULL (as the daemon), or OFF to see the statements without fsync")
	flag.Parse()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-floor-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	qp, jp, sp := filepath.Join(dir, "q.sqlite"), filepath.Join(dir, "j.sqlite"), filepath.Join(dir, "s.sqlite")
	fill(ctx, qp, jp, sp, *n, body(*bodySize))
	q, j, s := open(qp, *syncMode), open(jp, *syncMode), open(sp, *syncMode)
	for _, x := range flag.Args() {
		c := map[string]*conn{"q": q, "j": j, "s": s}[x[:1]]
		if c == nil || len(x) < 3 {
			log.Fatalf("%q: want q:, j: or s: and a statement", x)
		}
		c.run(x[2:])
	}
	result := `{"external_id":"BILL-x","payload":{"order":` + string(body(*bodySize)) + `}}`
	phases := []string{"lease", "journal prepared+dispatched", "journal outcome", "queue finish", "run record"}
	spent := make([]time.Duration, len(phases))
	c0, t0 := cpu(), time.Now()
	done := 0
	for done < *n {
		mark := cpu()
		step := func(i int) { now := cpu(); spent[i] += now - mark; mark = now }
		now := touba.FormatTime(time.Now())
		q.run(`BEGIN IMMEDIATE`)
		leased := q.query(qLease, now, now, int64(*batch))
		q.run(`COMMIT`)
		step(0)
		if len(leased) == 0 {
			break
		}
		type effect struct {
			queueID, effectID, callID string
			token                     int64
		}
		effs := make([]effect, len(leased))
		j.run(`BEGIN IMMEDIATE`)
		for i, r := range leased {
			e := effect{queueID: r[0].(string), token: r[10].(int64), callID: uuidv7.New()}
			e.effectID = e.queueID + ":post"
			effs[i] = e
			j.exec(qInsertEffect, e.queueID, e.effectID, "tool:bench/Post", "invoke", "sha256:"+strings.Repeat("0", 64),
				"idempotency_key", e.callID, now, now, "owner")
			j.exec(qEventPair, e.queueID, e.effectID, e.callID, "prepared", now, "prepare attempt 1",
				e.queueID, e.effectID, e.callID, "dispatched", now, "dispatch attempt 1")
		}
		j.run(`COMMIT`)
		step(1)
		j.run(`BEGIN IMMEDIATE`)
		for _, e := range effs {
			if j.exec(qOutcome, "applied", "BILL-"+e.effectID, result, nil, nil, now, e.queueID, e.effectID, e.callID, "owner") != 1 {
				log.Fatal("outcome matched no row")
			}
			j.exec(qEvent, e.queueID, e.effectID, e.callID, "applied", now, " receipt_ref=BILL-"+e.effectID)
		}
		j.run(`COMMIT`)
		step(2)
		q.run(`BEGIN IMMEDIATE`)
		for _, e := range effs {
			if q.exec(qFinish, "done", "", "", now, e.queueID, e.token) != 1 {
				log.Fatal("finish matched no row")
			}
		}
		q.run(`COMMIT`)
		step(3)
		s.run(`BEGIN IMMEDIATE`)
		for _, e := range effs {
			s.exec(qRun, uuidv7.New(), e.queueID, "trigger:bench/D", int64(1), "done", nil, nil, now, now)
		}
		s.run(`COMMIT`)
		step(4)
		done += len(effs)
	}
	elapsed, spentAll := time.Since(t0), cpu()-c0
	for i, p := range phases {
		fmt.Printf("  %-28s %6.1f us CPU per effect\n", p, float64(spent[i].Microseconds())/float64(done))
	}
	fmt.Printf("floor effects=%d batch=%d body=%d sync=%s cpu_us_per_effect=%.1f wall_us_per_effect=%.1f fsyncs_per_effect=%.2f\n",
		done, *batch, *bodySize, *syncMode, float64(spentAll.Microseconds())/float64(done),
		float64(elapsed.Microseconds())/float64(done), 5/float64(*batch))
}

func body(size int) []byte {
	if size <= len(`{"data":""}`) {
		return []byte(`{"order_id":42,"lines":["a","b"]}`)
	}
	return []byte(`{"data":"` + strings.Repeat("x", size-len(`{"data":""}`)) + `"}`)
}

// fill creates the three files with the stores' own migrations and queues
// n entries through the queue's writer, then closes them all.
func fill(ctx context.Context, qp, jp, sp string, n int, b []byte) {
	q, err := queue.Open(ctx, qp, queue.Options{})
	if err != nil {
		log.Fatal(err)
	}
	j, err := journal.Open(ctx, jp, journal.Options{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := state.Open(ctx, sp, state.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if _, err := q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:bench/D", EventID: fmt.Sprintf("e%d", i),
					Digest: dedupe.Digest(b), Body: b}); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	q.Close()
	j.Close()
	s.Close()
}

// conn is one file's connection, with its statements prepared once.
type conn struct {
	c     *sqlite3.SQLiteConn
	stmts map[string]driver.Stmt
}

func open(path, syncMode string) *conn {
	c, err := (&sqlite3.SQLiteDriver{}).Open("file:" + path + "?_journal_mode=WAL&_synchronous=" + syncMode + "&_busy_timeout=10000")
	if err != nil {
		log.Fatal(err)
	}
	sc := c.(*sqlite3.SQLiteConn)
	cn := &conn{c: sc, stmts: map[string]driver.Stmt{}}
	cn.run(`PRAGMA wal_autocheckpoint=4096; PRAGMA cache_size=-32768; PRAGMA temp_store=MEMORY`) // as sqlitex's writer
	return cn
}

func (c *conn) run(q string) {
	if _, err := c.c.Exec(q, nil); err != nil {
		log.Fatalf("%s: %v", q, err)
	}
}

func (c *conn) stmt(q string) driver.Stmt {
	s := c.stmts[q]
	if s == nil {
		var err error
		if s, err = c.c.Prepare(q); err != nil {
			log.Fatalf("%s: %v", q, err)
		}
		c.stmts[q] = s
	}
	return s
}

func args(a []any) []driver.NamedValue {
	nv := make([]driver.NamedValue, len(a))
	for i, v := range a {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv
}

func (c *conn) exec(q string, a ...any) int64 {
	r, err := c.stmt(q).(driver.StmtExecContext).ExecContext(context.Background(), args(a))
	if err != nil {
		log.Fatalf("%s: %v", q, err)
	}
	n, _ := r.RowsAffected()
	return n
}

func (c *conn) query(q string, a ...any) [][]driver.Value {
	rows, err := c.stmt(q).(driver.StmtQueryContext).QueryContext(context.Background(), args(a))
	if err != nil {
		log.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out [][]driver.Value
	for {
		v := make([]driver.Value, len(rows.Columns()))
		if err := rows.Next(v); err == io.EOF {
			return out
		} else if err != nil {
			log.Fatal(err)
		}
		out = append(out, v)
	}
}

// cpu is the CPU (user and system) this process has used.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
