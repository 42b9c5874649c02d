// Command sizing measures what one delivery and one effect cost the
// storage (docs/storage.md, "Sizing"): it runs N deliveries through the
// stores' API as the daemon does (enqueue; lease; per step an effect
// prepared and dispatched, its outcome, a checkpoint but for the last
// step; the run; done), 64 at a time so that commits group as under load,
// then prints rows, bytes on disk and bytes written per delivery.
//
//	sizing -n 20000 -steps 1 -body 1024 [-database URL] [-dir DIR]
//
// SQLite (default): the three files in DIR (a temporary folder), their
// size once closed (WAL checkpointed into them) and what the process
// wrote to disk (/proc/self/io: WAL, checkpoints). PostgreSQL with
// -database: each table's size with its partitions and indexes, and the
// WAL the database wrote (pg_current_wal_lsn).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/scripts/bench/procio"
	"github.com/touba/touba-trigger/sqlite"
)

type stores struct {
	q touba.QueueStore
	s touba.StateStore
	j touba.EffectJournal
}

func main() {
	n := flag.Int("n", 20000, "deliveries")
	steps := flag.Int("steps", 1, "steps, each an external write, per delivery")
	bodySize := flag.Int("body", 1024, "body bytes")
	database := flag.String("database", "", "postgres://... (else SQLite files)")
	dir := flag.String("dir", "", "where the SQLite files go (default: a temporary folder)")
	flag.Parse()
	ctx := context.Background()
	var st stores
	var closeAll func() error
	var db *pgx.Conn
	if *database != "" {
		pg, err := postgres.Open(ctx, postgres.Config{URL: *database, NodeID: "sizing", History: 90 * 24 * time.Hour, Log: zerolog.Nop()})
		if err != nil {
			log.Fatal(err)
		}
		st, closeAll = stores{pg.Queue, pg.State, pg.Journal}, pg.Close
		if db, err = pgx.Connect(ctx, *database); err != nil {
			log.Fatal(err)
		}
	} else {
		if *dir == "" {
			d, err := os.MkdirTemp("", "touba-sizing")
			if err != nil {
				log.Fatal(err)
			}
			defer os.RemoveAll(d)
			*dir = d
		}
		f, err := sqlite.Open(ctx, sqlite.Config{Queue: filepath.Join(*dir, "q"), State: filepath.Join(*dir, "s"), Journal: filepath.Join(*dir, "j")})
		if err != nil {
			log.Fatal(err)
		}
		st, closeAll = stores{f.Queue, f.State, f.EffectJournal()}, f.Close
	}
	written0, wal0 := procio.WriteBytes(0), lsn(db)
	body := `{"data":"` + strings.Repeat("x", max(*bodySize-11, 0)) + `"}`
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				run(ctx, st, i, body, *steps)
			}
		}()
	}
	for i := range *n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := st.s.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	took := time.Since(start)
	perN := func(v int64) float64 { return float64(v) / float64(*n) }
	fmt.Printf("%d deliveries of %d steps (an external write each), %d-byte bodies, in %s\n", *n, *steps, *bodySize, took.Round(time.Millisecond))
	if db != nil {
		var parts []string
		var total int64
		for _, t := range []string{"entries", "runs", "run_steps", "effects", "effect_events"} {
			var size, rows int64
			if err := db.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(relid)), 0), (SELECT count(*) FROM touba.`+t+`)
				FROM pg_partition_tree('touba.`+t+`')`).Scan(&size, &rows); err != nil {
				log.Fatal(err)
			}
			total += size
			parts = append(parts, fmt.Sprintf("%s %.2f rows %.0f B", t, perN(rows), perN(size)))
		}
		fmt.Printf("RESULT per delivery: %s; tables %.0f B, WAL %.0f B\n", strings.Join(parts, ", "), perN(total), perN(lsn(db)-wal0))
		closeAll()
		return
	}
	if err := closeAll(); err != nil {
		log.Fatal(err)
	}
	var parts []string
	var total int64
	for _, f := range []string{"q", "s", "j"} {
		fi, err := os.Stat(filepath.Join(*dir, f))
		if err != nil {
			log.Fatal(err)
		}
		total += fi.Size()
		parts = append(parts, fmt.Sprintf("%s %.0f B", map[string]string{"q": "queue", "s": "state", "j": "journal"}[f], perN(fi.Size())))
	}
	fmt.Printf("RESULT per delivery: %s; files %.0f B; written to disk %.0f B (WAL and checkpoints)\n",
		strings.Join(parts, ", "), perN(total), perN(procio.WriteBytes(0)-written0))
}

// run takes delivery i through the daemon's steps.
func run(ctx context.Context, st stores, i int, body string, steps int) {
	r, err := st.q.Enqueue(ctx, &touba.Delivery{TriggerRef: "trigger:bench/Ingest", EventID: fmt.Sprintf("sz-%d-%d", os.Getpid(), i),
		Digest: fmt.Sprint("d", i), Body: []byte(body), Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "127.0.0.1:1"})
	if err != nil {
		log.Fatal(err)
	}
	var d *touba.Delivery
	for d == nil {
		got, err := st.q.Lease(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		if len(got) == 1 {
			d = got[0]
		}
	}
	_ = r
	id := d.QueueID
	now := time.Now()
	for s := range steps {
		eff := fmt.Sprintf("%s:s%d", id, s)
		call := fmt.Sprintf("c%d-%d", i, s)
		if pd, ok := st.j.(interface {
			PrepareDispatched(context.Context, touba.EffectPrepare) (*touba.Effect, error)
		}); ok {
			if _, err := pd.PrepareDispatched(ctx, touba.EffectPrepare{Scope: id, EffectID: eff, ToolRef: "tool:bench/Post",
				Operation: touba.OperationInvoke, Fingerprint: "sha256:" + strings.Repeat("0", 64), RetryMode: touba.RetryIdempotencyKey,
				CallID: call, LeaseToken: d.LeaseToken}); err != nil {
				log.Fatal(err)
			}
		}
		out, _ := json.Marshal(map[string]any{"external_id": "BILL-" + eff, "payload": json.RawMessage(body)})
		if err := st.j.Finish(ctx, touba.EffectOutcome{Scope: id, EffectID: eff, CallID: call, State: touba.EffectApplied,
			ReceiptRef: "BILL-" + eff, Result: out}); err != nil {
			log.Fatal(err)
		}
		if s < steps-1 {
			if err := st.s.SaveStep(id, d.LeaseToken, fmt.Sprint("s", s), "run-"+id, out); err != nil {
				log.Fatal(err)
			}
		}
	}
	end := time.Now()
	st.s.RecordRun(&touba.Run{RunID: "run-" + id, QueueID: id, TriggerRef: d.TriggerRef, Attempt: 1, Status: touba.StatusDone, StartedAt: now, EndedAt: &end})
	if err := st.q.Finish(ctx, id, d.LeaseToken, touba.StatusDone, "", ""); err != nil {
		log.Fatal(err)
	}
}

// lsn is the database's WAL position in bytes (0 without one).
func lsn(db *pgx.Conn) int64 {
	n, err := procio.WALBytes(db)
	if err != nil {
		log.Fatal(err)
	}
	return n
}
