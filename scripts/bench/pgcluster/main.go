// Command pgcluster is the benchmarks' throwaway PostgreSQL 15: the same
// cluster the tests start (internal/pgtest), but with fsync on, so that a
// commit costs what it costs in production.
//
//	pgcluster serve            start it, print a database URL, run until SIGTERM or SIGINT
//	pgcluster fresh URL NAME   create database NAME on URL's cluster and print its URL
//	pgcluster count URL [STATUS]   print how many entries (in STATUS) the database holds
//	pgcluster prefill URL N    enqueue N pending entries of trigger:bench/Ingest; print first=ID, the lowest queue id made
//	pgcluster wait URL N [ID]  wait until N entries (at or above ID) are done; print effects_per_s
//	pgcluster history URL DAYS PER_DAY WINDOW   finished history (history.go)
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	touba "github.com/touba/touba-trigger"
	"github.com/touba/touba-trigger/dedupe"
	"github.com/touba/touba-trigger/internal/pgtest"
	"github.com/touba/touba-trigger/postgres"
	"github.com/touba/touba-trigger/trigger"
)

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		log.Fatal("usage: pgcluster serve | fresh URL NAME | count URL [STATUS] | prefill URL N [PROGRAM] | wait URL N")
	}
	ctx := context.Background()
	switch os.Args[1] {
	case "serve":
		serve()
	case "fresh":
		conn := connect(ctx, os.Args[2])
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+os.Args[3]); err != nil {
			log.Fatal(err)
		}
		fmt.Println(strings.Replace(os.Args[2], "/"+conn.Config().Database+"?", "/"+os.Args[3]+"?", 1))
	case "count":
		status := ""
		if len(os.Args) > 3 {
			status = os.Args[3]
		}
		fmt.Println(count(ctx, connect(ctx, os.Args[2]), status))
	case "prefill":
		program := ""
		if len(os.Args) > 4 {
			program = os.Args[4]
		}
		prefill(ctx, os.Args[2], atoi(os.Args[3]), program)
	case "wait":
		first := ""
		if len(os.Args) > 4 {
			first = os.Args[4]
		}
		wait(ctx, os.Args[2], atoi(os.Args[3]), first)
	case "history":
		window, err := time.ParseDuration(os.Args[5])
		if err != nil {
			log.Fatal(err)
		}
		prefillHistory(ctx, os.Args[2], atoi(os.Args[3]), atoi(os.Args[4]), window)
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		log.Fatal(err)
	}
	return n
}

func connect(ctx context.Context, url string) *pgx.Conn {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	return conn
}

func count(ctx context.Context, conn *pgx.Conn, status string) int64 {
	return countFrom(ctx, conn, status, "")
}

// countFrom counts the entries (in status) at or above the queue id
// first ("": all). first is a literal of the text, so that the planner
// leaves out the partitions below it: on the parameter, the final count
// of a drain planned and read every partition (53 ms of the database's
// CPU at 100 partitions, counted as the drain's).
func countFrom(ctx context.Context, conn *pgx.Conn, status, first string) int64 {
	var n int64
	from := ""
	if first != "" {
		from = ` AND queue_id >= '` + strings.ReplaceAll(first, "'", "''") + `'`
	}
	err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM touba.entries WHERE ($1 = '' OR status = $1) AND event_id NOT LIKE 'history-%'`+from,
		pgx.QueryExecModeSimpleProtocol, status).Scan(&n)
	if err != nil {
		return 0 // no schema yet: no entries
	}
	return n
}

// busy says whether an entry is still pending or running (or the schema
// is not there yet). from is the smallest queue id among those, found
// anew at each probe from the last one up. An entry pending or running
// again keeps its id and is never below from (it was unfinished when from
// was found), and the daemons make no entries while they drain; the final
// count is the check.
//
// The probe reads each leaf of entries that may hold an id at or above
// from (leaves), by name, with from a literal: a plan made for it walks
// the primary key up from from, and planning it against one table is
// cheap. On the parent, a parameter's generic plan opened every
// partition's index (2-4.5 ms a probe at 72 partitions), and a literal,
// which prunes them, was planned at each probe against every partition
// (1.65 ms a probe at 72 partitions: 244 ms of planning in a 4 s drain,
// 12 µs per effect counted in the database's CPU as if the daemon's). On
// the leaf with a parameter, the generic plan read the status index
// (8 ms a probe). A leaf with nothing unfinished at or above from is not
// probed again (by the argument above, nothing in it becomes so), so a
// poll is one probe of the newest leaf once the empty ones are known.
func busy(ctx context.Context, conn *pgx.Conn, from *string, leaves *[]leaf) bool {
	if *leaves == nil {
		ls, err := entryLeaves(ctx, conn)
		if err != nil {
			return true // no schema yet
		}
		*leaves = ls
	}
	first := ""
	lit := strings.ReplaceAll(*from, "'", "''")
	var busyLeaves []leaf
	for _, l := range *leaves {
		if l.upper != "" && l.upper <= *from {
			continue // every id in it is below from
		}
		var id string
		err := conn.QueryRow(ctx, `SELECT queue_id FROM `+l.name+` WHERE queue_id >= '`+lit+`'
			AND status IN ('pending', 'running') ORDER BY queue_id LIMIT 1`, pgx.QueryExecModeSimpleProtocol).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // nothing unfinished in it, and nothing becomes so (above): not probed again
		} else if err != nil {
			*leaves = nil // a partition made or dropped meanwhile: list them again
			return true
		}
		busyLeaves = append(busyLeaves, l)
		if first == "" || id < first {
			first = id
		}
	}
	*leaves = busyLeaves
	if first == "" {
		return false
	}
	*from = first
	return true
}

// leaf is a leaf partition of entries, with its upper bound ("": none,
// such as a default or list partition).
type leaf struct{ name, upper string }

var upperBound = regexp.MustCompile(`TO \('([^']*)'\)`)

// entryLeaves lists the leaves of entries (entries itself when it is not
// partitioned). A bound has no Vars: pg_get_expr's 0 opens no partition.
func entryLeaves(ctx context.Context, conn *pgx.Conn) ([]leaf, error) {
	rows, err := conn.Query(ctx, `SELECT t.relid::regclass::text, COALESCE(pg_get_expr(c.relpartbound, 0), '')
		FROM pg_partition_tree('touba.entries') t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []leaf
	for rows.Next() {
		var l leaf
		var bound string
		if err := rows.Scan(&l.name, &bound); err != nil {
			return nil, err
		}
		if m := upperBound.FindStringSubmatch(bound); m != nil {
			l.upper = m[1]
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("entries has no leaf")
	}
	return out, nil
}

func serve() {
	if ok, why := pgtest.Available(); !ok {
		log.Fatal("PostgreSQL 15 not installed: " + why)
	}
	c, err := pgtest.StartDurable()
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(c.Dir)
	defer c.Stop()
	fmt.Println(c.URL("postgres"))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// prefill enqueues n entries through the store's group commit, from 64
// goroutines, as the daemon's intake would: under the definition of the
// trigger in program, when given, as intake pins it (an entry of another
// definition costs its run a read or two: the reload checks of SPEC §2.3).
func prefill(ctx context.Context, url string, n int, program string) {
	pinned := ""
	if program != "" {
		p, err := trigger.LoadProgram(program)
		if err != nil {
			log.Fatal(err)
		}
		t, ok := p.Lookup("bench/Ingest")
		if !ok {
			log.Fatalf("%s has no trigger:bench/Ingest", program)
		}
		pinned = t.Digest
	}
	st, err := postgres.Open(ctx, postgres.Config{URL: url, NodeID: "prefill", Log: zerolog.Nop()})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	body := []byte(`{"data":"x"}`)
	digest := dedupe.Digest(body)
	var wg sync.WaitGroup
	var mu sync.Mutex
	first := ""
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 64 {
				d := &touba.Delivery{TriggerRef: "trigger:bench/Ingest", EventID: fmt.Sprintf("prefill-%d", i), Digest: digest,
					Body: body, Headers: map[string]string{"content-type": "application/json"}, RemoteAddr: "prefill",
					ReceivedAt: time.Now(), ProgramDigest: pinned}
				res, err := st.Queue.Enqueue(ctx, d)
				if err != nil {
					log.Fatal(err)
				}
				mu.Lock()
				if first == "" || res.QueueID < first {
					first = res.QueueID
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("first=%s\n", first)
}

// wait polls until n entries (at or above the queue id first, "": any)
// are done and prints the rate since it began (it is started with the
// daemons, so the rate includes their start-up).
func wait(ctx context.Context, url string, n int, first string) {
	conn := connect(ctx, url)
	// The probe below on entries_ready, whatever the statistics say (stale
	// during a drain: a seq or bitmap scan cost 2 ms a probe at load 20,
	// counted in the database's CPU per effect).
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`); err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	from := first
	var leaves []leaf
	// Poll with a statement that stops at the first entry not yet done
	// (an index probe), not a count of the whole table: a COUNT(*) every
	// 20 ms was a fifth of the database's statement time in the figures
	// it measured (issue 28). The full count is taken once at the end.
	for {
		for busy(ctx, conn, &from, &leaves) {
			if time.Since(start) > 10*time.Minute {
				log.Fatal("not done within 10 minutes")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if countFrom(ctx, conn, touba.StatusDone, first) >= int64(n) {
			break
		}
		leaves = nil // not all done: read every leaf again
		time.Sleep(20 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	fmt.Printf("entries=%d secs=%.3f effects_per_s=%.0f\n", n, secs, float64(n)/secs)
}
